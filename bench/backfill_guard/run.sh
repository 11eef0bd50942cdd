#!/usr/bin/env bash
# Hot-shard guard benchmark (issue 16): a backfill of ROWS rows, half of them
# in one organisation (shard 7), run by the worker with the budget lifted,
# while a live writer changes a row of that organisation every 20 ms.  Side
# by side in one run: without the guard, and with
# outbox.backfill_max_shard_depth = BOUND.  Reports the live changes' delivery
# lag (commit to handler) and the backfill's total time (gate opened to
# every row delivered).
#
#   bash bench/backfill_guard/run.sh       # ROWS=1000000 BOUND=2000
#   SMOKE=1 bash bench/backfill_guard/run.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/backfill_guard/results.md,
# with the hot shard's depth over time (depth.tsv, sampled every 0.1 s plus
# the query's time), the live changes' lags (lag.tsv) and their picture
# (depth.png) beside it (under SMOKE, into a scratch directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
ROWS=${ROWS:-1000000}
BOUND=${BOUND:-2000}
LIVE_S=2 # the live writer's seconds before the gate opens and after the backfill
if [[ -n ${SMOKE:-} ]]; then ROWS=4000 BOUND=500 LIVE_S=0.5; fi
work=$(mktemp -d)
# kill fails when no writer runs: under set -e that would end the trap before cluster_stop.
trap 'kill $writer 2>/dev/null || true; cluster_stop; rm -rf "$work"' EXIT
writer=

install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "checkpoint_timeout = 30min" \
    "outbox.database_name = postgres" "outbox.naptime = 100" \
    "outbox.backfill_rate_per_minute = 2000000000" ${EXTRA_CONF:+"$EXTRA_CONF"}
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('member_update', 'Org', 0);
SELECT outbox.register_category('setting_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('member_update', 'noop(outbox.message)');
-- The live changes: their lag, from the change's commit-time stamp.
CREATE TABLE lag (seconds float8, made timestamptz);
CREATE FUNCTION measure(m outbox.message) RETURNS void LANGUAGE sql AS \$\$
    INSERT INTO lag SELECT extract(epoch FROM clock_timestamp() - (m.payload->>'at')::timestamptz),
                           (m.payload->>'at')::timestamptz
\$\$;
SELECT outbox.register_handler('setting_update', 'measure(outbox.message)');
CREATE TABLE setting (id bigint PRIMARY KEY, org_id bigint NOT NULL, at timestamptz);
INSERT INTO setting SELECT g, 7, now() FROM generate_series(1, 100) g;
SELECT outbox.register_table('setting', 'setting_update', 'cell', shard_column => 'org_id',
                             payload_columns => '{at}');
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL);
INSERT INTO member SELECT g, CASE WHEN g % 2 = 0 THEN 7 ELSE 1000 + g % 1000 END
  FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE member;
SELECT outbox.register_table('member', 'member_update', 'cell', shard_column => 'org_id',
                             replication_version => 2);
SQL

sample() { # guard opened: records the hot shard's depth; true once every backfilled row is delivered
    local row t depth finished
    row=$(q -c "
        SELECT round(extract(epoch FROM clock_timestamp() - '$2')::numeric, 2),
               (SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier = 7),
               (SELECT state FROM outbox.backfill_status WHERE table_key = 'member') = 'complete'
               AND NOT EXISTS (SELECT FROM outbox.cell_outbox WHERE category = 0)") ||
        bench_fail "psql failed sampling the hot shard"
    IFS="|" read -r t depth finished <<<"$row"
    printf '%s\t%s\t%s\n' "$1" "$t" "$depth" >>"$work/depth.tsv"
    [[ $finished == t ]]
}
run() { # guard: sets result (total ms, live changes, their lag p50, p99, max ms)
    # Each run starts from a clean outbox: a partition that the run before
    # left full of dead rows would be compacted during this one, and its
    # lock would stall the live writer's capture.
    q -c "ALTER SYSTEM SET outbox.backfill_max_shard_depth = $1" -c "SELECT pg_reload_conf()" \
      -c "TRUNCATE lag" -c "SELECT outbox.compact_outbox('cell', true)" >/dev/null
    q -c "VACUUM ANALYZE outbox.cell_outbox" -c "CHECKPOINT" >/dev/null
    sleep 1
    # The live writer: one change of organisation 7 every 20 ms, each stamped
    # with the time it was made (then committed at once).
    q >/dev/null 2>&1 <<'SQL' &
DO $$ BEGIN
    FOR i IN 1..1000000 LOOP
        UPDATE setting SET at = clock_timestamp() WHERE id = 1 + i % 100;
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;
SQL
    writer=$!
    sleep $LIVE_S
    local start=$(date +%s%N)
    local opened=$(q -c "SELECT clock_timestamp()")
    sample "$1" "$opened" || true # the shard as the gate opens
    q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
    local deadline=$((SECONDS + 600)) # the guarded run of 1,000,000 rows took 50 s
    until sample "$1" "$opened"; do
        ((SECONDS < deadline)) || bench_fail "the backfill was not delivered after 600 s (bound $1)"
        sleep 0.1
    done
    local ms=$((($(date +%s%N) - start) / 1000000))
    sleep $LIVE_S
    # Killed here, the writer ends with 143; any other status, it failed.
    kill $writer 2>/dev/null || true
    wait $writer || (($? == 143)) || bench_fail "the live writer failed (bound $1)"
    writer=
    # Gate closed, cursor at the start of version 2: awaiting_option, so
    # nothing runs until the next run opens the gate.  A cursor at version 1
    # would be a pending backfill to version 1 under that gate: the whole
    # table again, between the runs, into the next run's first seconds.
    q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '1')" \
      -c "SELECT outbox.set_processing_state('member', 0, 2)" >/dev/null
    q -F $'\t' -c "SELECT $1, round(extract(epoch FROM made - '$opened')::numeric, 3),
                           round(seconds::numeric * 1000, 1) FROM lag WHERE made >= '$opened' ORDER BY made" \
        >>"$work/lag.tsv"
    result=$(q -c "SELECT $ms, count(*),
                 round(percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds)::numeric * 1000),
                 round(percentile_cont(0.99) WITHIN GROUP (ORDER BY seconds)::numeric * 1000),
                 round(max(seconds)::numeric * 1000) FROM lag WHERE made >= '$opened'" | tr '|' ' ')
    [[ $(cut -d' ' -f2 <<<"$result") -gt 0 ]] || bench_fail "no live change was delivered (bound $1)"
}
echo "# bound (0: no guard), seconds since the gate opened, rows in shard 7" >"$work/depth.tsv"
echo "# bound (0: no guard), seconds from the gate's opening to the change, its lag in ms" >"$work/lag.tsv"
# run in this shell, not in $(...): its bench_fail ends the script, and the
# trap sees its writer.
run 0
read -r off_ms off_n off_p50 off_p99 off_max <<<"$result"
echo "without the guard: $off_ms ms, live lag p50 $off_p50 p99 $off_p99 max $off_max ms ($off_n changes)" >&2
run "$BOUND"
read -r on_ms on_n on_p50 on_p99 on_max <<<"$result"
echo "with the guard: $on_ms ms, live lag p50 $on_p50 p99 $on_p99 max $on_max ms ($on_n changes)" >&2

report=$(cat <<MD
# pg_outbox hot-shard guard benchmark

$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(awk '/MemTotal/ {printf "%d GiB", $2/1048576}' /proc/meminfo) | PostgreSQL $(q -c "SHOW server_version") | \`bash bench/backfill_guard/run.sh\` ROWS=$ROWS BOUND=$BOUND

A backfill of $ROWS rows, half of them in organisation 7, run by the worker with the budget lifted, while a live writer changes a row of organisation 7 every 20 ms.  Lag: from the change to its handler, for the changes made after the gate opened.  Total: from opening the gate to every backfilled row delivered.

| | total ms | live changes | lag p50 ms | lag p99 ms | lag max ms |
|---|---:|---:|---:|---:|---:|
| without the guard | $off_ms | $off_n | $off_p50 | $off_p99 | $off_max |
| \`outbox.backfill_max_shard_depth = $BOUND\` | $on_ms | $on_n | $on_p50 | $on_p99 | $on_max |

The hot shard's rows over time: depth.tsv; every live change's lag: lag.tsv; both drawn in depth.png.
MD
)
echo "$report"
out=$(bench_results_dir "$root/bench/backfill_guard")
echo "$report" >"$out/results.md"
cp "$work/depth.tsv" "$work/lag.tsv" "$out/"
/usr/bin/python3 "$root/bench/plot.py" backfill_guard "$out"
