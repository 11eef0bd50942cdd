#!/usr/bin/env bash
# Backfill benchmark: rows/s backfilling a ROWS-row table, side by side with
#   (a) the physical limit: one INSERT ... SELECT of the same outbox rows into
#       the same outbox (and, for reference, into a Sentry-shaped outbox with
#       three btrees and into one with only a primary key);
#   (b) what Sentry does: one outbox INSERT per row from a client (pgbench,
#       2 connections, synchronous_commit off);
# plus pgbench TPS of a concurrent OLTP workload with and without a backfill
# at the default rate (10,000 rows a minute, one batch a second).
#
#   bash bench/backfill/run.sh          # ROWS=1000000 RUNS=3 OLTP_SECONDS=20
#   SMOKE=1 bash bench/backfill/run.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/backfill/results.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
ROWS=${ROWS:-1000000}
RUNS=${RUNS:-3}
OLTP_SECONDS=${OLTP_SECONDS:-20}
BATCH=${BATCH:-10000}
SENTRY_ROWS=${SENTRY_ROWS:-100000}
OLTP_SCALE=10
if [[ -n ${SMOKE:-} ]]; then
    ROWS=10000 RUNS=1 OLTP_SECONDS=1 BATCH=1000 SENTRY_ROWS=1000 OLTP_SCALE=1
fi
work=$(mktemp -d)
trap 'cluster_stop; rm -rf "$work"' EXIT
chmod 777 "$work"

install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "checkpoint_timeout = 30min" \
    "autovacuum = off" "outbox.worker_enabled = off" "outbox.database_name = postgres"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
# Milliseconds a SQL script takes, commits included.
timed() {
    local start end
    start=$(date +%s%N)
    q "$@" >/dev/null || bench_fail "psql failed: $*"
    end=$(date +%s%N)
    echo $(((end - start) / 1000000))
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

q >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 0);
CREATE TABLE t (id bigint PRIMARY KEY, organization_id bigint NOT NULL, email text NOT NULL);
INSERT INTO t SELECT g, g % 1000, 'user' || g || '@example.com' FROM generate_series(1, $ROWS) g;
SELECT outbox.register_table('t', 'ORGANIZATION_MEMBER_UPDATE', shard_column => 'organization_id');
TRUNCATE outbox.cell_outbox;
-- Reference outboxes for the physical limit.
CREATE TABLE sentry_outbox (id bigserial PRIMARY KEY, shard_scope int NOT NULL,
    shard_identifier bigint NOT NULL, category int NOT NULL, object_identifier bigint NOT NULL,
    payload jsonb, scheduled_from timestamptz NOT NULL DEFAULT now(),
    scheduled_for timestamptz NOT NULL DEFAULT now(), date_added timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON sentry_outbox (shard_scope, shard_identifier, id);
CREATE INDEX ON sentry_outbox (scheduled_for);
CREATE TABLE pk_outbox (LIKE sentry_outbox INCLUDING DEFAULTS);
ALTER TABLE pk_outbox ADD PRIMARY KEY (id);
-- The backfill loop: one batch per transaction, as the worker runs it.
CREATE PROCEDURE backfill_all(batch int) LANGUAGE plpgsql AS \$\$
BEGIN
    WHILE outbox.process_backfill_batch('t', batch) IS NOT NULL LOOP
        COMMIT;
    END LOOP;
END \$\$;
VACUUM ANALYZE t;
SQL

physical_sql="INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload) SELECT 0, organization_id, 0, id, NULL FROM t"
declare -A ms
for run in $(seq "$RUNS"); do
    for target in outbox sentry pk; do
        q -c "TRUNCATE outbox.cell_outbox, sentry_outbox, pk_outbox" -c "CHECKPOINT"
        case $target in
        outbox) sql=$physical_sql ;;
        sentry) sql=${physical_sql/outbox.cell_outbox/sentry_outbox} ;;
        pk) sql=${physical_sql/outbox.cell_outbox/pk_outbox} ;;
        esac
        ms[physical_$target]+="$(timed -c "$sql") "
    done
    # pg_outbox: a new coded version and an open gate, then batches of BATCH.
    q -c "TRUNCATE outbox.cell_outbox" -c "CHECKPOINT" \
      -c "SELECT outbox.set_replication_version('t', $((run + 1)))" \
      -c "SELECT outbox.set_option('outbox_replication.t.replication_version', '$((run + 1))')" >/dev/null
    ms[pg_outbox]+="$(timed -c "CALL backfill_all($BATCH)") "
    written=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
    [[ $written == "$ROWS" ]] || bench_fail "pg_outbox backfill wrote $written rows, not $ROWS"
    echo "run $run done"
done
for k in "${!ms[@]}"; do echo "$k: ${ms[$k]}"; done >&2

# (b) Sentry: one outbox row per client statement, 2 connections.  Sentry
# reads each model instance and saves its outbox row; a transaction here does
# the same for one id.
cat >"$work/sentry.sql" <<'SQL'
\set id random(1, :rows)
INSERT INTO sentry_outbox (shard_scope, shard_identifier, category, object_identifier) SELECT 0, organization_id, 0, id FROM t WHERE id = :id;
SQL
sentry_tps=()
for run in $(seq "$RUNS"); do
    q -c "TRUNCATE sentry_outbox" -c "CHECKPOINT"
    out=$(PGOPTIONS="-c synchronous_commit=off" "$PG_BIN/pgbench" -n -c 2 -j 2 \
        -t $((SENTRY_ROWS / 2)) -D rows="$ROWS" -f "$work/sentry.sql" 2>&1) ||
        bench_fail "pgbench (Sentry's inserts) failed: $(tail -3 <<<"$out")"
    written=$(q -c "SELECT count(*) FROM sentry_outbox")
    [[ $written == "$SENTRY_ROWS" ]] || bench_fail "Sentry's inserts wrote $written rows, not $SENTRY_ROWS"
    sentry_tps+=("$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)")
done

# OLTP with and without a backfill at the default rate.  The worker needs a
# handler for what it drains: a no-op.
q -c "CREATE FUNCTION noop(msg outbox.message) RETURNS void LANGUAGE plpgsql AS \$\$ BEGIN END \$\$" \
  -c "SELECT outbox.register_handler('ORGANIZATION_MEMBER_UPDATE', 'noop(outbox.message)')" >/dev/null
"$PG_BIN/pgbench" -i -q -s $OLTP_SCALE >"$work/init.log" 2>&1 || bench_fail "pgbench -i failed: $(tail -3 "$work/init.log")"
oltp() {
    local out
    out=$("$PG_BIN/pgbench" -n -c 2 -j 2 -T "$OLTP_SECONDS" 2>&1) || bench_fail "pgbench (OLTP) failed: $(tail -3 <<<"$out")"
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1
}
oltp_plain=() oltp_backfill=()
for run in $(seq "$RUNS"); do
    oltp_plain+=("$(oltp)")
    # The background worker at its defaults (10,000 rows a minute, naptime
    # 1 s) backfilling a new version, and draining what it writes.
    q -c "SELECT outbox.set_replication_version('t', $((RUNS + 10 + run)))" \
      -c "SELECT outbox.set_option('outbox_replication.t.replication_version', '$((RUNS + 10 + run))')" \
      -c "ALTER SYSTEM SET outbox.worker_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
    oltp_backfill+=("$(oltp)")
    q -c "ALTER SYSTEM SET outbox.worker_enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
done

rate() { awk -v rows="$1" -v ms="$2" 'BEGIN { printf "%.0f", rows / (ms / 1000) }'; }
m_out=$(echo ${ms[physical_outbox]} | tr ' ' '\n' | median)
m_sentry=$(echo ${ms[physical_sentry]} | tr ' ' '\n' | median)
m_pk=$(echo ${ms[physical_pk]} | tr ' ' '\n' | median)
m_pgo=$(echo ${ms[pg_outbox]} | tr ' ' '\n' | median)
t_sentry=$(printf '%s\n' "${sentry_tps[@]}" | median)
t_plain=$(printf '%s\n' "${oltp_plain[@]}" | median)
t_back=$(printf '%s\n' "${oltp_backfill[@]}" | median)
r_pgo=$(rate "$ROWS" "$m_pgo")
r_out=$(rate "$ROWS" "$m_out")
{
echo "# pg_outbox backfill benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/backfill/run.sh\` ROWS=$ROWS RUNS=$RUNS BATCH=$BATCH"
echo
echo "| what | rows/s (median of $RUNS) | vs pg_outbox |"
echo "|---|---:|---:|"
echo "| pg_outbox backfill, batches of $BATCH, one transaction each, Redis cursor | $r_pgo | 1.00 |"
echo "| (a) physical limit: one INSERT ... SELECT into pg_outbox's outbox | $r_out | $(awk -v a="$r_pgo" -v b="$r_out" 'BEGIN{printf "%.2f", a/b}') of it |"
echo "| (a') one INSERT ... SELECT into a Sentry-shaped outbox (3 btrees) | $(rate "$ROWS" "$m_sentry") | |"
echo "| (a'') one INSERT ... SELECT into an outbox with only a primary key | $(rate "$ROWS" "$m_pk") | |"
echo "| (b) Sentry: one INSERT per row from 2 clients, synchronous_commit off | ${t_sentry%.*} | $(awk -v a="$r_pgo" -v b="$t_sentry" 'BEGIN{printf "%.1fx", a/b}') faster |"
echo
echo "OLTP (pgbench tpcb-like, scale 10, 2 clients, ${OLTP_SECONDS} s, median of $RUNS): ${t_plain%.*} TPS alone, ${t_back%.*} TPS while the worker backfills at its default 10,000 rows/minute and drains what it writes: $(awk -v a="$t_back" -v b="$t_plain" 'BEGIN{printf "%+.1f%%", (a/b-1)*100}')."
} | tee "$(bench_results "$root/bench/backfill/results.md")"
