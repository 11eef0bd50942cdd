#!/usr/bin/env bash
# What the 0.4.0 counters (outbox.stats) cost the drain: workload B of
# bench/drain/run.sh (200,000 rows of distinct objects over 1,000 shards,
# no-op PL/pgSQL handler, outbox.drain() until empty) in two servers side
# by side, rounds interleaved: one preloads pg_outbox (counters on: one
# shared-memory update per delivered message and per committed drain), the
# other does not (no shared memory: the counting calls return at once).
#
#   bash bench/drain/counters.sh        # RUNS=5
#   SMOKE=1 bash bench/drain/counters.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
RUNS=${RUNS:-5}
SHARDS=1000
if [[ -n ${SMOKE:-} ]]; then RUNS=1 SHARDS=20; fi
rows=$((SHARDS * 200))
install_extension "$root"
# Both servers, whichever exit: the trap is set before the first starts.
with_dir=
stop_both() {
    if [[ -n $with_dir ]]; then CLUSTER_DIR=$with_dir cluster_stop; fi
    cluster_stop
}
trap stop_both EXIT
conf=("shared_buffers = 1GB" "max_wal_size = 8GB" "autovacuum = off" "outbox.worker_enabled = off")
cluster_start "${conf[@]}"
with_dir=$CLUSTER_DIR with_port=$PGPORT
CLUSTER_DIR=
cluster_start "${conf[@]}" "shared_preload_libraries = ''"
without_dir=$CLUSTER_DIR without_port=$PGPORT
q() { psql -X -q -tA -v ON_ERROR_STOP=1 -h "$1" -p "$2" "${@:3}"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

setup='CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope($$S$$, 0);
SELECT outbox.register_category($$C$$, $$S$$, 1);
CREATE FUNCTION noop(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN END $f$;
SELECT outbox.register_handler($$C$$, $$noop(outbox.message)$$);'
q "$with_dir" "$with_port" -c "$setup" >/dev/null
q "$without_dir" "$without_port" -c "$setup" >/dev/null

round() { # DIR PORT: messages/s
    q "$1" "$2" -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
                    SELECT 0, s, 1, s * 100000 + r FROM generate_series(1, $SHARDS) s, generate_series(1, 200) r
                     ORDER BY r, s" -c "VACUUM ANALYZE outbox.cell_outbox" >/dev/null
    local start n=0 got
    start=$(date +%s%N)
    while true; do
        got=$(q "$1" "$2" -c "SELECT outbox.drain('cell')") || bench_fail "outbox.drain() failed on port $2"
        ((got > 0)) || break
        n=$((n + got))
        ((n <= rows)) || bench_fail "outbox.drain() delivered $n messages of $rows on port $2"
    done
    ((n == rows)) || bench_fail "outbox.drain() delivered $n messages of $rows on port $2"
    echo $((n * 1000000000 / ($(date +%s%N) - start)))
}
with=() without=()
for i in $(seq "$RUNS"); do
    with+=("$(round "$with_dir" "$with_port")")
    without+=("$(round "$without_dir" "$without_port")")
    echo "round $i: counters on ${with[-1]}, off ${without[-1]} messages/s" >&2
done
on=$(printf '%s\n' "${with[@]}" | median)
off=$(printf '%s\n' "${without[@]}" | median)
delivered=$(q "$with_dir" "$with_port" -c "SELECT delivered FROM outbox.stats WHERE category = 1")
((delivered == RUNS * rows)) || bench_fail "the counted server's outbox.stats.delivered is $delivered, not $((RUNS * rows))"
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | \`bash bench/drain/counters.sh\` RUNS=$RUNS"
echo "counters on: $on messages/s, off: $off messages/s (medians), on/off = $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.2f", a / b}'); the counted server's outbox.stats.delivered = $delivered"
