#!/usr/bin/env bash
# Drain benchmark: messages per second through a no-op PL/pgSQL handler,
#   A. 1,000 shards x 100 rows, 10 objects per shard (coalescing: 10,000 messages);
#   B. 200,000 rows of distinct objects over 1,000 shards (200,000 messages);
# drained by outbox.drain() (one transaction per call) and by the background
# worker (one transaction per batch), side by side with PgQ's consumer
# (next_batch / get_batch_events / finish_batch) calling the same no-op per
# event.  Commit-to-handler lag is bench/latency/run.sh's.
#
#   bash bench/drain/run.sh        # RUNS=3
#   SMOKE=1 bash bench/drain/run.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
RUNS=${RUNS:-3}
SHARDS=1000 PGQ_EVENTS=200000
if [[ -n ${SMOKE:-} ]]; then RUNS=1 SHARDS=20 PGQ_EVENTS=4000; fi
work=$(mktemp -d)
chmod 777 "$work"
trap 'cluster_stop; rm -rf "$work"' EXIT
install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "autovacuum = off" \
    "outbox.worker_enabled = off" "outbox.database_name = postgres"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

q -f "$root/bench/drain/setup.sql" >/dev/null

# Fills the outbox: shards x rows_per_shard rows, objects_per_shard objects.
fill() {
    q -c "TRUNCATE outbox.cell_outbox" -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
          SELECT 0, s, 1, s * 100000 + r % $3, jsonb_build_object('r', r)
            FROM generate_series(1, $1) s, generate_series(1, $2) r ORDER BY r, s" -c "VACUUM ANALYZE outbox.cell_outbox" >/dev/null
}
drain_sql() { # messages/s draining with outbox.drain() until empty
    local start n
    start=$(date +%s%N)
    n=$(q -c "CALL drain_all()") || bench_fail "outbox.drain() failed"
    [[ $(q -c "SELECT count(*) FROM outbox.cell_outbox") == 0 ]] || bench_fail "outbox.drain() left the outbox not empty"
    echo $((n * 1000 / $(ms_since "$start"))) $n
}
drain_worker() { # messages/s with the worker (one transaction per batch)
    local start deadline=$((SECONDS + 300))
    q -c "ALTER SYSTEM SET outbox.worker_enabled = on" -c "ALTER SYSTEM SET outbox.naptime = 10" -c "SELECT pg_reload_conf()" >/dev/null
    start=$(date +%s%N)
    until [[ $(q -c "SELECT count(*) FROM outbox.cell_outbox") == 0 ]]; do
        ((SECONDS < deadline)) || bench_fail "the worker left $(q -c "SELECT count(*) FROM outbox.cell_outbox") rows undelivered after 300 s"
        sleep 0.05
    done
    local ms=$(ms_since "$start")
    q -c "ALTER SYSTEM SET outbox.worker_enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 0.3
    echo $(($1 * 1000 / ms))
}
pgq_fill() {
    q -c "SELECT pgq.insert_event('bench', 'member', 'id=' || g) FROM generate_series(1, $1) g" >/dev/null
    q -c "SELECT pgq.force_tick('bench')" -c "SELECT pgq.ticker()" >/dev/null
}
pgq_drain() {
    local start got
    start=$(date +%s%N)
    got=$(q -c "SELECT pgq_consume()") || bench_fail "PgQ's consumer failed"
    echo $((got * 1000 / $(ms_since "$start"))) "$got"
}

# got=($(...)): a contender's failure (bench_fail in the substitution) ends
# the script here too, which read < <(...) would not.
declare -A rate
for run in $(seq "$RUNS"); do
    fill $SHARDS 100 10; got=($(drain_sql)); rate[a_sql]+="${got[0]} "; msgs_a=${got[1]}
    fill $SHARDS 100 10; rate[a_worker]+="$(drain_worker $((SHARDS * 10))) "
    fill $SHARDS 200 200; got=($(drain_sql)); rate[b_sql]+="${got[0]} "; msgs_b=${got[1]}
    fill $SHARDS 200 200; rate[b_worker]+="$(drain_worker $((SHARDS * 200))) "
    pgq_fill $PGQ_EVENTS; got=($(pgq_drain)); rate[pgq]+="${got[0]} "; pgq_n=${got[1]}
    echo "run $run: ${rate[a_sql]} | ${rate[b_sql]} | pgq ${rate[pgq]}" >&2
done
[[ $msgs_a == $((SHARDS * 10)) && $msgs_b == $((SHARDS * 200)) && $pgq_n == "$PGQ_EVENTS" ]] ||
    bench_fail "messages delivered: $msgs_a, $msgs_b, PgQ $pgq_n; not $((SHARDS * 10)), $((SHARDS * 200)), $PGQ_EVENTS"

med() { echo ${rate[$1]} | tr ' ' '\n' | median; }
pgq_rate=$(med pgq)
{
echo "# pg_outbox drain benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/drain/run.sh\` RUNS=$RUNS"
echo
echo "No-op PL/pgSQL handler; medians of $RUNS runs, all in one run of the script."
echo
echo "| workload | drained by | messages/s | vs PgQ |"
echo "|---|---|---:|---:|"
for k in a_sql a_worker b_sql b_worker; do
    case $k in
    a_*) w="A: 1,000 shards x 100 rows, 10 objects each (10,000 messages)" ;;
    b_*) w="B: 200,000 rows, distinct objects, 1,000 shards (200,000 messages)" ;;
    esac
    case $k in
    *_sql) by="outbox.drain() in a loop in one session, one transaction per call" ;;
    *_worker) by="the worker, one transaction per batch" ;;
    esac
    echo "| $w | $by | $(med $k) | $(awk -v a="$(med $k)" -v b="$pgq_rate" 'BEGIN{printf "%.2f", a/b}') |"
done
echo "| 200,000 events | PgQ consumer (next_batch / get_batch_events / finish_batch) | $pgq_rate | 1.00 |"
echo
echo "Workload A coalesces 100,000 outbox rows into 10,000 messages: its rows/s is 10x its messages/s."
echo
echo "Commit-to-handler lag: bench/latency/results.md."
} | tee "$(bench_results "$root/bench/drain/results.md")"
