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
checks_done() {
    echo "$1: $failures failed"
    exit $((failures > 0))
}
