#!/usr/bin/env bash
# Monitoring benchmark: how long the views take on a deep outbox
# (ROWS queued rows, 1,000,000 by default), side by side with the floor, a
# plain count(*) of the same rows, in three shapes:
#   spread   ROWS rows over 10,000 shards;
#   hot      half the rows on one shard (a backfill piled onto one
#            organisation), the other half over 10,000 shards;
#   scatter  one row per shard (ROWS shards: the most groups).
# For each: SELECT * FROM outbox.shard_depth (every shard to the client),
# the same query written in SQL (GROUP BY, ORDER BY: what an operator
# would write without the view), the view with LIMIT 20 (the hot-shard
# query), outbox.metrics(), and outbox.backfill_status (one registered
# table of ROWS rows).
#
#   bash bench/monitoring/run.sh          # ROWS=1000000 RUNS=5
#   SMOKE=1 bash bench/monitoring/run.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/monitoring/results.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
ROWS=${ROWS:-1000000}
RUNS=${RUNS:-5}
if [[ -n ${SMOKE:-} ]]; then ROWS=5000 RUNS=1; fi
trap 'cluster_stop' EXIT

install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "autovacuum = off" \
    "outbox.worker_enabled = off" "outbox.database_name = postgres"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
# Median milliseconds of RUNS runs of a query in one session (psql's
# \timing: server time plus sending the rows to psql), after one warm-up run.
timed() {
    local timings
    timings=$({ echo '\o /dev/null'; echo "$1;"; echo '\timing on'; for _ in $(seq "$RUNS"); do echo "$1;"; done; } | q) ||
        bench_fail "psql failed: $1"
    sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$timings" |
        sort -n | awk '{a[NR]=$1} END {printf "%.0f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}

q >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 0);
CREATE TABLE t (id bigint PRIMARY KEY, organization_id bigint NOT NULL);
INSERT INTO t SELECT g, g % 1000 FROM generate_series(1, $ROWS) g;
SELECT outbox.register_table('t', 'ORGANIZATION_MEMBER_UPDATE', shard_column => 'organization_id');
SELECT outbox.set_option('outbox_replication.t.replication_version', '1');
SELECT outbox.process_backfill_batch('t', 1000);
SQL

out=$(bench_results "$root/bench/monitoring/results.md")
{
    echo "# pg_outbox monitoring benchmark"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB |" \
        "PostgreSQL $(q -c 'SHOW server_version' | cut -d' ' -f1) | \`bash bench/monitoring/run.sh\` ROWS=$ROWS RUNS=$RUNS"
    echo
    echo "Milliseconds (psql \\timing in one session, rows sent to psql), median of $RUNS runs"
    echo "after a warm-up; ratio to the floor, count(*) of the same outbox rows, measured alongside."
    echo "count(*) runs in parallel (2 workers); outbox.shard_depth reads in one process."
    echo
    echo "| outbox | shards | count(*) floor | shard_depth, all rows | ratio | same in SQL | ratio | shard_depth LIMIT 20 | metrics() | backfill_status |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$out"

for shape in spread hot scatter; do
    case $shape in
    spread) shard="g % 10000" ;;
    hot) shard="CASE WHEN g % 2 = 0 THEN 424242 ELSE g % 10000 END" ;;
    scatter) shard="g" ;;
    esac
    q >/dev/null <<SQL
TRUNCATE outbox.cell_outbox;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
SELECT 0, $shard, 0, g, '{"email": "someone@example.com"}' FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE outbox.cell_outbox;
SQL
    shards=$(q -c "SELECT count(DISTINCT shard_identifier) FROM outbox.cell_outbox")
    floor=$(timed "SELECT count(*) FROM outbox.cell_outbox")
    full=$(timed "SELECT * FROM outbox.shard_depth")
    sql=$(timed "SELECT shard_scope, shard_identifier, count(*) AS depth, min(date_added), min(scheduled_for) FROM outbox.cell_outbox GROUP BY 1, 2 ORDER BY 3 DESC, 5")
    top=$(timed "SELECT * FROM outbox.shard_depth LIMIT 20")
    metrics=$(timed "SELECT outbox.metrics()")
    status=$(timed "SELECT * FROM outbox.backfill_status")
    ratio=$(awk -v a="$full" -v b="$floor" 'BEGIN {printf "%.1f", a / b}')
    sql_ratio=$(awk -v a="$sql" -v b="$floor" 'BEGIN {printf "%.1f", a / b}')
    echo "| $shape: $ROWS rows | $shards | $floor | $full | $ratio | $sql | $sql_ratio | $top | $metrics | $status |" >>"$out"
done
cat "$out"
