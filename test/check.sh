# TAP-style checks for the integration scripts: check DESCRIPTION COMMAND...
# prints "ok - ..." or "not ok - ..." (and returns 1 then); checks_done NAME
# exits with the result.
failures=0
check() {
    local description=$1
    shift
    if "$@"; then
        echo "ok - $description"
    else
        echo "not ok - $description"
        failures=$((failures + 1))
        return 1
    fi
}
# wait_for SECONDS SQL EXPECTED: polls every 0.2 s until the script's own
# psql wrapper, q -c SQL, returns EXPECTED.
wait_for() {
    local deadline=$((SECONDS + $1)) got
    while ((SECONDS < deadline)); do
        got=$(q -c "$2")
        [[ $got == "$3" ]] && return 0
        sleep 0.2
    done
    echo "  waited $1 s for '$3', last saw '$got'" >&2
    return 1
}
checks_done() {
    echo "$1: $failures failed"
    exit $((failures > 0))
}
