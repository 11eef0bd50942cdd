#!/usr/bin/env bash
# The queue "death spiral" test: the application writes RATE rows/s into a
# registered table (capture, one row per transaction) and the worker drains
# them, while another session holds a REPEATABLE READ snapshot for HOLD_S
# seconds (dead outbox tuples cannot be removed meanwhile).  Each minute:
# depth, outbox size on disk, dead tuples, the worker's cycle time, and the
# commit-to-handler lag; then AFTER_S seconds more with the snapshot gone.
#
#   bash bench/drain/held_snapshot.sh      # RATE=2000 BEFORE_S=60 HOLD_S=600 AFTER_S=180
#   COMPACT_MIN_SIZE=0 bash bench/drain/held_snapshot.sh   # without compaction
#   (the report goes to bench/drain/held_snapshot[-nocompact].md)
#   SMOKE=1 bash bench/drain/held_snapshot.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
RATE=${RATE:-2000}
BEFORE_S=${BEFORE_S:-60}
HOLD_S=${HOLD_S:-600}
AFTER_S=${AFTER_S:-180}
SAMPLE_S=60 # a sample a minute
if [[ -n ${SMOKE:-} ]]; then RATE=200 BEFORE_S=2 HOLD_S=2 AFTER_S=2 SAMPLE_S=2; fi
work=$(mktemp -d)
chmod 777 "$work"
# kill fails when no job is left: under set -e that would end the trap before cluster_stop.
trap 'kill $(jobs -p) 2>/dev/null || true; cluster_stop; rm -rf "$work"' EXIT
install_extension "$root"
redis_start
cluster_start "shared_buffers = 512MB" "max_wal_size = 8GB" "autovacuum = on" \
    "autovacuum_naptime = 10s" "outbox.database_name = postgres" "outbox.naptime = 100ms" \
    ${COMPACT_MIN_SIZE:+"outbox.compact_min_size = '$COMPACT_MIN_SIZE'"}
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE member (id bigserial PRIMARY KEY, organization_id bigint NOT NULL,
                     created_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id');
CREATE TABLE lag (at timestamptz, ms float8);
-- The lag from the row's insert (one row per transaction: its commit) to
-- the handler, read through member's primary key: the handler's own cost
-- does not depend on the outbox.
CREATE FUNCTION record_lag(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lag SELECT clock_timestamp(), extract(epoch FROM clock_timestamp() - m.created_at) * 1000
      FROM member m WHERE m.id = msg.object_identifier;
END $$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'record_lag(outbox.message)');
-- When the worker's cycles ended, sampled every 50 ms by the sampler below:
-- under load cycles run back to back, so the time between two ends is what
-- a cycle costs.
CREATE TABLE cycles (ended timestamptz PRIMARY KEY);
SQL

echo 'INSERT INTO member (organization_id) VALUES (1 + (random() * 9999)::int);' >"$work/insert.sql"
total=$((BEFORE_S + HOLD_S + AFTER_S))
"$PG_BIN/pgbench" -n -c 2 -j 2 -R "$RATE" -T "$total" -f "$work/insert.sql" >"$work/pgbench.log" 2>&1 &
pgbench=$!
# Samples the end of the worker's last cycle twenty times a second, while
# this script runs (the trap kills it; kill -0 ends it should the script
# die without its trap).
(
    while kill -0 $$ 2>/dev/null; do
        q -c "INSERT INTO cycles SELECT last_cycle_end FROM outbox.worker_status
               WHERE last_cycle_end IS NOT NULL ON CONFLICT DO NOTHING" >/dev/null 2>&1 || true
        sleep 0.05
    done
) &
sampler=$!

sample() { # minute label
    q -F ' | ' -c "
      SELECT '$1',
             (SELECT count(*) FROM outbox.cell_outbox),
             (SELECT pg_size_pretty(sum(pg_relation_size(c.oid))) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'outbox.cell_outbox'::regclass),
             (SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE relname LIKE 'cell_outbox_%'),
             (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric) || ' / ' ||
                     round(max(ms)::numeric)
                FROM (SELECT extract(epoch FROM ended - lag(ended) OVER (ORDER BY ended)) * 1000 AS ms
                        FROM cycles WHERE ended > now() - interval '60 s') c),
             (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)) || ' / ' ||
                     round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))
                FROM lag WHERE at > now() - interval '60 s'),
             (SELECT count(*) FROM lag WHERE at > now() - interval '60 s')"
}

{
echo "# pg_outbox under a held snapshot"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/drain/held_snapshot.sh\` RATE=$RATE HOLD_S=$HOLD_S"
echo
echo "$RATE single-row inserts/s into a registered table, the worker draining (naptime 100 ms), autovacuum on (naptime 10 s), outbox.compact_min_size $(q -c 'SHOW outbox.compact_min_size'). A REPEATABLE READ snapshot is held from minute $((BEFORE_S / 60)) for $((HOLD_S / 60)) minutes. Cycle ms is the time between two ends of the worker's cycles (back to back under load; naptime included when a cycle found nothing); lag is commit to handler."
echo
echo "| minute | depth | outbox size | dead tuples | worker cycle ms, p50 / max | lag ms, p50 / p99 | messages |"
echo "|---|---:|---:|---:|---:|---:|---:|"
} >"$work/report.md"

minute=0
for ((s = SAMPLE_S; s <= BEFORE_S; s += SAMPLE_S)); do
    sleep $SAMPLE_S; minute=$((minute + 1)); echo "| $(sample "$minute (before)") |" >>"$work/report.md"; tail -1 "$work/report.md" >&2
done
psql -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM member" \
     -c "SELECT pg_sleep($HOLD_S)" -c "COMMIT" >/dev/null &
holder=$!
for ((s = SAMPLE_S; s <= HOLD_S; s += SAMPLE_S)); do
    sleep $SAMPLE_S; minute=$((minute + 1)); echo "| $(sample "$minute (held)") |" >>"$work/report.md"; tail -1 "$work/report.md" >&2
done
wait "$holder" || bench_fail "the session holding the snapshot failed"
for ((s = SAMPLE_S; s <= AFTER_S; s += SAMPLE_S)); do
    sleep $SAMPLE_S; minute=$((minute + 1)); echo "| $(sample "$minute (after)") |" >>"$work/report.md"; tail -1 "$work/report.md" >&2
done
kill "$sampler" 2>/dev/null || true
wait "$pgbench" || bench_fail "pgbench failed: $(tail -3 "$work/pgbench.log")"
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
echo >>"$work/report.md"
echo "pgbench sustained ${tps%.*} tx/s." >>"$work/report.md"
tee "$(bench_results "$root/bench/drain/held_snapshot${COMPACT_MIN_SIZE:+-nocompact}.md")" <"$work/report.md"
