#!/usr/bin/env bash
# Drain at depth: rows/s as the backlog and the number of shards grow, a hot
# shard, and PgQ's consumer, side by side in one run.
#
#   depth curve: 200,000 rows in 1,000 shards; 1,000,000 in 100,000;
#                5,000,000 in 500,000 (distinct objects, no-op PL/pgSQL
#                handler), drained by outbox.drain() in a loop (a procedure
#                that commits after each call) and by the worker;
#   hot shard:   1,000,000 rows in one shard, drained by the worker: time,
#                and the growth of the worker's anonymous memory (RssAnon);
#   PgQ:         at each backlog of the depth curve, as many events through
#                next_batch / get_batch_events / finish_batch with the same
#                kind of no-op per event (a fresh queue each time, as the
#                outbox is emptied for each).
# Writes depth.md and its picture depth.png (bench/plot.py) beside this
# script (under SMOKE, into a scratch directory).
#
#   bash bench/drain/depth.sh          # SIZES="200000:1000 1000000:100000 5000000:500000"
#   SMOKE=1 bash bench/drain/depth.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
SIZES=${SIZES:-"200000:1000 1000000:100000 5000000:500000"}
HOT_ROWS=${HOT_ROWS:-1000000}
if [[ -n ${SMOKE:-} ]]; then SIZES="1000:100 4000:400" HOT_ROWS=2000; fi
trap cluster_stop EXIT
install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "autovacuum = on" \
    "outbox.worker_enabled = off" "outbox.database_name = postgres" "outbox.naptime = 10"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

q -f "$root/bench/drain/setup.sql" >/dev/null

# rows distinct objects spread over shards, written in the order an
# application would (shards interleaved).
fill() {
    q -c "TRUNCATE outbox.cell_outbox" \
      -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
          SELECT 0, g % $2, 1, g, jsonb_build_object('id', g) FROM generate_series(1, $1) g" \
      -c "VACUUM ANALYZE outbox.cell_outbox" >/dev/null
}
empty() { [[ $(q -c "SELECT NOT EXISTS (SELECT FROM outbox.cell_outbox)") == t ]]; }
by_sql() { # rows/s
    local start n
    start=$(date +%s%N)
    n=$(q -c "CALL drain_all()") || bench_fail "outbox.drain() failed"
    local ms=$(ms_since "$start")
    empty || bench_fail "outbox not empty after drain()"
    [[ $n == "$1" ]] || bench_fail "drain() delivered $n of $1"
    echo $(($1 * 1000 / ms))
}
worker_delivered() { q -c "SELECT messages_delivered FROM outbox.worker_status"; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }
rss_anon() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; } # kB
by_worker() { # rows/s [peak RssAnon growth kB]
    local target=$(($(worker_delivered) + $1)) start pid base peak=0 now deadline=$((SECONDS + 300))
    q -c "ALTER SYSTEM SET outbox.worker_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
    start=$(date +%s%N)
    until pid=$(worker_pid) && [[ -n $pid ]]; do
        ((SECONDS < deadline)) || bench_fail "no worker after 300 s"
        sleep 0.05
    done
    base=$(rss_anon "$pid")
    while (($(worker_delivered) < target)); do
        ((SECONDS < deadline)) || bench_fail "the worker delivered $(worker_delivered) messages, not $target, after 300 s"
        now=$(rss_anon "$pid" || echo 0)
        ((now - base > peak)) && peak=$((now - base))
        sleep 0.1
    done
    local ms=$(ms_since "$start")
    q -c "ALTER SYSTEM SET outbox.worker_enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
    empty || bench_fail "outbox not empty after the worker"
    echo $(($1 * 1000 / ms)) "$peak" "$ms"
}

by_pgq() { # events/s
    local start got ms
    q -c "SELECT pgq.drop_queue('bench', true)" -c "SELECT pgq.create_queue('bench')" \
      -c "SELECT pgq.register_consumer('bench', 'c')" >/dev/null
    q -c "SELECT pgq.insert_event('bench', 'member', 'id=' || g) FROM generate_series(1, $1) g" >/dev/null
    q -c "SELECT pgq.force_tick('bench')" -c "SELECT pgq.ticker()" >/dev/null
    start=$(date +%s%N)
    got=$(q -c "SELECT pgq_consume()") || bench_fail "PgQ's consumer failed"
    ms=$(ms_since "$start")
    [[ $got == "$1" ]] || bench_fail "PgQ's consumer took $got of $1 events"
    echo $(($1 * 1000 / ms))
}

# The worker starts with the server; let it settle, disabled.
sleep 1
# got=($(...)): a contender's failure (bench_fail in the substitution) ends
# the script here too, which read < <(...) would not.
declare -A sql worker pgq
for size in $SIZES; do
    rows=${size%:*} shards=${size#*:}
    fill "$rows" "$shards"; sql[$size]=$(by_sql "$rows")
    fill "$rows" "$shards"; got=($(by_worker "$rows")); worker[$size]=${got[0]}
    q -c "TRUNCATE outbox.cell_outbox" >/dev/null
    pgq[$size]=$(by_pgq "$rows")
    echo "$rows rows / $shards shards: drain() ${sql[$size]}/s, worker ${worker[$size]}/s, PgQ ${pgq[$size]}/s" >&2
done
fill "$HOT_ROWS" 1
got=($(by_worker "$HOT_ROWS")); hot_rate=${got[0]} hot_peak=${got[1]} hot_ms=${got[2]}
echo "hot shard: $hot_rate/s, ${hot_ms} ms, RssAnon +${hot_peak} kB" >&2

first=${SIZES%% *}
out=$(bench_results_dir "$root/bench/drain")
{
echo "# pg_outbox drain at depth"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/drain/depth.sh\`"
echo
echo "No-op PL/pgSQL handler, distinct objects, autovacuum on, outbox.drain_batch_size $(q -c 'SHOW outbox.drain_batch_size'); one run, all in one script."
echo
echo "PgQ: as many events as the backlog's rows, in a fresh queue, drained by its consumer in the same run."
echo
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo "| backlog | shards | drain() rows/s | vs first | worker rows/s | vs first | PgQ events/s | vs first | worker vs PgQ |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in $SIZES; do
    rows=${size%:*} shards=${size#*:}
    echo "| $rows | $shards | ${sql[$size]} | $(ratio "${sql[$size]}" "${sql[$first]}") | ${worker[$size]} | $(ratio "${worker[$size]}" "${worker[$first]}") | ${pgq[$size]} | $(ratio "${pgq[$size]}" "${pgq[$first]}") | $(ratio "${worker[$size]}" "${pgq[$size]}") |"
done
echo
echo "Hot shard: $HOT_ROWS rows in one shard, drained by the worker in $((hot_ms / 1000)).$(((hot_ms % 1000) / 100)) s ($hot_rate rows/s); the worker's anonymous memory (RssAnon) grew by at most $((hot_peak / 1024)) MB."
} | tee "$out/depth.md"
/usr/bin/python3 "$root/bench/plot.py" drain "$out"
