#!/usr/bin/env bash
# Latency benchmark, at the default settings (nothing set but what the
# harness sets for every cluster):
#   1. commit to an in-database handler, p50/p99/max, under a steady 1,000
#      and 5,000 single-row write transactions a second (pgbench -R, 2
#      clients) for LAG_SECONDS each: with the worker woken by commits (the
#      default) and with outbox.wake_on_commit = off (a drain pass every
#      outbox.naptime, as 0.9.0 did), in turn;
#   2. the idle worker's CPU (its process's user + system time over
#      IDLE_SECONDS), with an empty outbox and with UNDELIVERABLE rows of a
#      category that has no handler and no consumer;
#   3. single-row insert transactions a second (pgbench, 2 clients, no rate
#      limit) with the worker running and with outbox.worker_enabled = off,
#      RUNS times in turn, for a table whose category has a handler (a
#      no-op: the worker delivers every row meanwhile, woken by commits and,
#      as 0.9.0, once a naptime) and for one whose category has none.
#
# Writes results.md, lags.tsv (the lags' histogram) and lags.png beside
# this script (under SMOKE, into a scratch directory).
#
#   bash bench/latency/run.sh    # LAG_SECONDS=20 IDLE_SECONDS=30 TPS_SECONDS=15 RUNS=3 UNDELIVERABLE=1000000
#   SMOKE=1 bash bench/latency/run.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
LAG_SECONDS=${LAG_SECONDS:-20}
IDLE_SECONDS=${IDLE_SECONDS:-30}
TPS_SECONDS=${TPS_SECONDS:-15}
RUNS=${RUNS:-3}
UNDELIVERABLE=${UNDELIVERABLE:-1000000}
RELOAD_S=0.5 # for a reload to reach the worker
SETTLE_S=3 # for the idle worker to finish what the last writes left
# pgbench's runs: seconds, or under SMOKE 100 transactions a client (-T
# takes whole seconds, and nine runs of one would be most of a smoke run).
LAG_RUN=(-T "$LAG_SECONDS") TPS_RUN=(-T "$TPS_SECONDS")
if [[ -n ${SMOKE:-} ]]; then
    LAG_RUN=(-t 100) TPS_RUN=(-t 100) IDLE_SECONDS=1 RUNS=1 UNDELIVERABLE=2000 RELOAD_S=0.1 SETTLE_S=0.5
fi
work=$(mktemp -d)
chmod 777 "$work"
trap 'cluster_stop; rm -rf "$work"' EXIT
install_extension "$root"
redis_start
cluster_start
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('AUDIT_LOG', 'ORGANIZATION_SCOPE', 2);
-- created_at is taken just before the commit: the handler's lag is commit
-- to handler, give or take the commit itself.
CREATE TABLE member (id bigserial PRIMARY KEY, organization_id bigint NOT NULL,
                     created_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{created_at}');
-- No handler and no consumer takes AUDIT_LOG: its rows wait.
CREATE TABLE audit_log (id bigserial PRIMARY KEY, organization_id bigint NOT NULL);
SELECT outbox.register_table('audit_log', 'AUDIT_LOG', shard_column => 'organization_id');
CREATE UNLOGGED TABLE lag (ms float8);
CREATE FUNCTION record_lag(msg outbox.message) RETURNS void LANGUAGE sql AS $$
    INSERT INTO lag SELECT extract(epoch FROM clock_timestamp() - (msg.payload->>'created_at')::timestamptz) * 1000
$$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'record_lag(outbox.message)');
SQL
echo 'INSERT INTO member (organization_id) VALUES (1 + (random() * 999)::int);' >"$work/member.sql"
echo 'INSERT INTO audit_log (organization_id) VALUES (1 + (random() * 999)::int);' >"$work/audit.sql"

set_conf() { # name value ...: ALTER SYSTEM and reload
    local sql=()
    while (($#)); do sql+=(-c "ALTER SYSTEM SET $1 = '$2'"); shift 2; done
    q "${sql[@]}" -c "SELECT pg_reload_conf()" >/dev/null
    sleep $RELOAD_S
}
outbox_rows() { q -c "SELECT count(*) FROM outbox.cell_outbox WHERE category = $1"; }
wait_drained() {
    for _ in $(seq 600); do
        [[ $(outbox_rows 1) == 0 ]] && return 0
        sleep 0.1
    done
    bench_fail "the outbox did not drain"
}
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# 1. Lag.
declare -A lag
echo "# offered tx/s, wake_on_commit, bin k, messages: lags of 10^(k/50) ms to 10^((k+1)/50) ms" >"$work/lags.tsv"
for rate in 1000 5000; do
    for wake in on off; do
        set_conf outbox.wake_on_commit "$wake"
        q -c "TRUNCATE lag" >/dev/null
        "$PG_BIN/pgbench" -n -c 2 -j 2 -R "$rate" "${LAG_RUN[@]}" -f "$work/member.sql" \
            >"$work/pgbench.log" 2>&1 || bench_fail "pgbench failed: $(tail -3 "$work/pgbench.log")"
        wait_drained
        tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
        # Each insert, one message, one lag.
        written=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$work/pgbench.log")
        [[ $(q -c "SELECT count(*) FROM lag") == "$written" ]] ||
            bench_fail "$(q -c "SELECT count(*) FROM lag") lags recorded for $written inserts"
        lag[$rate,$wake]="${tps%.*} $(q -F ' ' -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)),
            round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)), round(max(ms)), count(*) FROM lag")"
        # For bench/plot.py's curves: 50 bins a decade (4.7% wide) keep the
        # shape in a few hundred lines instead of 240,000 raw lags.
        q -c "COPY (SELECT $rate, '$wake', floor(log(greatest(ms, 0.001)) * 50)::int k, count(*)
                      FROM lag GROUP BY k ORDER BY k) TO STDOUT" >>"$work/lags.tsv"
        echo "lag $rate tx/s, wake_on_commit $wake: ${lag[$rate,$wake]}" >&2
    done
done
set_conf outbox.wake_on_commit on

# 2. The idle worker.
idle_cpu() { # percent of a core over IDLE_SECONDS
    local pid t0 t1 hz
    pid=$(worker_pid)
    [[ -n $pid ]] || bench_fail "no worker"
    hz=$(getconf CLK_TCK)
    sleep $SETTLE_S # what the last writes left to do
    t0=$(cpu_ticks "$pid")
    sleep "$IDLE_SECONDS"
    t1=$(cpu_ticks "$pid")
    [[ $(worker_pid) == "$pid" ]] || bench_fail "the worker restarted"
    awk -v d=$((t1 - t0)) -v hz="$hz" -v s="$IDLE_SECONDS" 'BEGIN {printf "%.2f", 100 * d / hz / s}'
}
q -c "VACUUM outbox.cell_outbox" >/dev/null
idle_empty=$(idle_cpu)
echo "idle, empty outbox: $idle_empty%" >&2
q -c "INSERT INTO audit_log (organization_id) SELECT 1 + g % 1000 FROM generate_series(1, $UNDELIVERABLE) g" >/dev/null
q -c "VACUUM ANALYZE outbox.cell_outbox" >/dev/null
waiting=$(outbox_rows 2)
shown=$(q -c "SELECT sum(depth) FROM outbox.shard_depth WHERE silo = 'cell'")
idle_full=$(idle_cpu)
echo "idle, $waiting undeliverable rows ($shown shown by shard_depth): $idle_full%" >&2

# 3. Insert TPS, worker on and off.  The outbox is drained (and its
# undeliverable rows kept) before each run, so that no run inherits the
# last one's backlog.  A no-op handler: what the worker costs the writers,
# not what a handler's own work does.
q -c "CREATE FUNCTION noop(msg outbox.message) RETURNS void LANGUAGE sql AS 'SELECT'" \
  -c "SELECT outbox.register_handler('MEMBER_UPDATE', 'noop(outbox.message)')" >/dev/null
declare -A tps
tps_run() { # script worker_enabled wake_on_commit
    set_conf outbox.worker_enabled on outbox.wake_on_commit on
    wait_drained
    q -c "VACUUM outbox.cell_outbox" >/dev/null
    set_conf outbox.worker_enabled "$2" outbox.wake_on_commit "$3"
    "$PG_BIN/pgbench" -n -c 2 -j 2 "${TPS_RUN[@]}" -f "$work/$1.sql" >"$work/pgbench.log" 2>&1 ||
        bench_fail "pgbench failed: $(tail -3 "$work/pgbench.log")"
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1 | cut -d. -f1
}
for run in $(seq "$RUNS"); do
    tps[member,off]+="$(tps_run member off on) "
    tps[member,on]+="$(tps_run member on on) "
    tps[member,nap]+="$(tps_run member on off) "
    tps[audit,off]+="$(tps_run audit off on) "
    tps[audit,on]+="$(tps_run audit on on) "
    echo "run $run: member off ${tps[member,off]}on ${tps[member,on]}naptime ${tps[member,nap]}| audit off ${tps[audit,off]}on ${tps[audit,on]}" >&2
done
set_conf outbox.worker_enabled on outbox.wake_on_commit on
wait_drained

med() { echo ${tps[$1]} | tr ' ' '\n' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
out=$(bench_results_dir "$root/bench/latency")
{
echo "# pg_outbox latency benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | pg_outbox $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'") ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')) | \`bash bench/latency/run.sh\` LAG_SECONDS=$LAG_SECONDS IDLE_SECONDS=$IDLE_SECONDS TPS_SECONDS=$TPS_SECONDS RUNS=$RUNS UNDELIVERABLE=$UNDELIVERABLE"
echo
echo "Default settings (outbox.naptime 1 s); a SQL handler that records clock_timestamp() minus the row's"
echo "created_at (taken just before its commit); pgbench, 2 clients, single-row inserts."
echo
echo "## Commit to handler"
echo
echo "| offered | wake_on_commit | tx/s | p50 ms | p99 ms | max ms | messages |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for rate in 1000 5000; do
    for wake in on off; do
        read -r t p50 p99 pmax n <<<"${lag[$rate,$wake]}"
        echo "| $rate | $wake | $t | $p50 | $p99 | $pmax | $n |"
    done
done
echo
echo "Every lag, in bins 4.7% wide: lags.tsv; their curves: lags.png."
echo
echo "## The idle worker"
echo
echo "| outbox | worker CPU, % of a core over ${IDLE_SECONDS} s |"
echo "|---|---:|"
echo "| empty | $idle_empty |"
echo "| $waiting rows of a category without handler or consumer (shard_depth shows $shown) | $idle_full |"
echo
echo "## Insert transactions a second, worker running against worker_enabled = off"
echo
echo "Medians of $RUNS runs of ${TPS_SECONDS} s, in turn; the outbox drained before each run (the $waiting waiting rows stay)."
echo
echo "| table's category | worker off | worker on | on / off | on, wake_on_commit off | that / off |"
echo "|---|---:|---:|---:|---:|---:|"
echo "| with a no-op handler (the worker delivers every row meanwhile, on the same 2 cores) | $(med member,off) | $(med member,on) | $(ratio "$(med member,on)" "$(med member,off)") | $(med member,nap) | $(ratio "$(med member,nap)" "$(med member,off)") |"
echo "| without handler or consumer | $(med audit,off) | $(med audit,on) | $(ratio "$(med audit,on)" "$(med audit,off)") | | |"
} | tee "$out/results.md"
cp "$work/lags.tsv" "$out/lags.tsv"
/usr/bin/python3 "$root/bench/plot.py" latency "$out"
