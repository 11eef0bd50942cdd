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
# show_worker: what the worker is doing now, for a check that waited in
# vain (its activity, worker_status, and its stack when gdb is there), on
# stderr.  A fresh machine's worker was seen to sit out about a minute at
# start (issue 25's note); this says where, the next time.
show_worker() {
    local pid
    pid=$(psql -X -q -tA -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" 2>/dev/null)
    {
        psql -X -q -tA -c "SELECT 'worker: ' || state || ' ' || coalesce(wait_event_type || '/' || wait_event, '-') || ' ' || query || ' since ' || (now() - state_change) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" \
            -c "SELECT 'worker_status: ' || w::text || ' at ' || now() FROM outbox.worker_status w" \
            -c "SELECT 'outbox ' || silo || ': ' || n || ' rows, ' || due || ' due, scheduled_for - now() from ' || coalesce(low::text, '-') || ' to ' || coalesce(high::text, '-') FROM (SELECT 'cell' silo, count(*) n, count(*) FILTER (WHERE scheduled_for <= now()) due, min(scheduled_for) - now() low, max(scheduled_for) - now() high FROM outbox.cell_outbox UNION ALL SELECT 'control', count(*), count(*) FILTER (WHERE scheduled_for <= now()), min(scheduled_for) - now(), max(scheduled_for) - now() FROM outbox.control_outbox) o" \
            -c "SELECT 'handlers: ' || count(*) || ', registered tables: ' || (SELECT count(*) FROM outbox.registered_tables) || ', postmaster started ' || pg_postmaster_start_time() FROM outbox.handlers"
        date -u '+clock: %H:%M:%S.%N'
        [[ -n $pid ]] && command -v gdb >/dev/null &&
            timeout 30 gdb -p "$pid" -batch -ex bt 2>/dev/null | grep -E '^#' | head -30
    } >&2 2>/dev/null
    return 0
}
