#!/usr/bin/env bash
# The hot-shard guard (issue 16): with outbox.backfill_max_shard_depth =
# 2,000, a backfill of 120,000 rows of which 100,000 go to one shard never
# makes that shard deeper than the bound plus one batch (sampled all along),
# shows itself throttled, survives its gate being closed and opened again
# and the worker being SIGKILLed, and completes with every row delivered.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'cluster_stop' EXIT
redis_start
BOUND=${BOUND:-2000}
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 100000000" \
    "outbox.database_name = postgres" "outbox.backfill_max_shard_depth = $BOUND"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('member_update', 'Org', 0);
SELECT outbox.register_cell('us');
CREATE TABLE seen (object bigint);
CREATE FUNCTION record(m outbox.message) RETURNS void LANGUAGE sql
    AS 'INSERT INTO seen VALUES (m.object_identifier)';
SELECT outbox.register_handler('member_update', 'record(outbox.message)');
-- Five in six members are in organisation 7.
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL);
INSERT INTO member SELECT g, CASE WHEN g % 6 = 0 THEN 1000 + g % 1000 ELSE 7 END
  FROM generate_series(1, 120000) g;
SELECT outbox.register_table('member', 'member_update', 'cell', shard_column => 'org_id',
                             replication_version => 2);
SQL
check "the plan sees the hot shard: 100,000 rows, at most 4,000 with the guard" \
    [ "$(q -c "SELECT hottest_shards->0->>'rows' || ' ' || peak_shard_depth || ' ' || peak_shard_depth_guarded FROM outbox.plan_backfill('member')")" = "100000 100000 $((2 * BOUND))" ]
depth() { q -c "SELECT count(*) FROM outbox.cell_outbox WHERE shard_scope = 0 AND shard_identifier = 7"; }
# The worker drains every cycle before it backfills, so a shard piles up
# only when it does not drain: paused here (a failing handler or a missing
# one does the same).  The guard holds the backfill back at the bound.
q -c "SELECT outbox.pause_shard('cell', 0, 7)" \
  -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
check "the hot shard paused: the backfill is throttled" wait_for 60 \
    "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'" throttled
sleep 1
paused_depth=$(depth)
check "at the bound plus at most one batch ($paused_depth rows)" \
    [ "$paused_depth" -ge "$BOUND" -a "$paused_depth" -le $((2 * BOUND)) ]
check "and metrics() says so" bash -c \
    "psql -X -tA -c 'SELECT outbox.metrics()' | grep -qx 'pg_outbox_backfill_state{table_key=\"member\",state=\"throttled\"} 1'"
q -c "SELECT outbox.resume_shard('cell', 0, 7)" >/dev/null

max_depth=$paused_depth closed=0 killed=0
deadline=$((SECONDS + 300))
while ((SECONDS < deadline)); do
    d=$(depth)
    ((d > max_depth)) && max_depth=$d
    state=$(q -c "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'")
    seen=$(q -c "SELECT count(*) FROM seen")
    # A third of the way: the gate closed for a second, then opened again.
    if ((closed == 0 && seen > 40000)); then
        q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '1')" >/dev/null
        sleep 1
        check "the gate closed: the backfill waits" \
            [ "$(q -c "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'")" = awaiting_option ]
        q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
        closed=1
    fi
    # Two thirds of the way: the worker SIGKILLed.
    if ((killed == 0 && seen > 80000)); then
        kill -KILL "$(worker_pid)"
        killed=1
        sleep 2
    fi
    [[ $state == complete && $d == 0 ]] && break
    sleep 0.2
done
check "the backfill completes" \
    [ "$(q -c "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'")" = complete ]
check "the hot shard never went past the bound plus one batch (deepest seen: $max_depth)" \
    [ "$max_depth" -le $((2 * BOUND)) ]
check "the gate was closed and the worker killed on the way" [ "$closed$killed" = 11 ]
check "every member was delivered" wait_for 60 "SELECT count(DISTINCT object) FROM seen" 120000
check "the plan now has an ETA at the worker's measured rate" \
    [ "$(q -c "SELECT eta_at_worker_rate > interval '0' FROM outbox.plan_backfill('member')")" = t ]
checks_done backfill_guard
