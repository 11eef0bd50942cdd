#!/usr/bin/env bash
# The gate procedure of docs/guide.md exactly as written (issue 26, item 6): plan, set
# the hot-shard guard with ALTER SYSTEM and pg_reload_conf(), open the gate
# at once, while the worker is in the middle of a cycle (a handler that
# sleeps 4 s).  The guard is in force for the worker's first backfill step:
# the hot shard (held by an operator's pause, so that it cannot drain)
# never goes past the bound plus one batch, as the plan promised; 0.9.0
# read the reload only at its next cycle and put the whole budget, 10,000
# rows, into it at once.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'cluster_stop' EXIT
redis_start
# A budget above the table's 10,000 rows: without the guard the whole table
# would go into the shard at once, and with it the resumed backfill ends
# within this minute's budget instead of waiting for the next one.
cluster_start "outbox.naptime = 100" "outbox.database_name = postgres" \
    "outbox.backfill_rate_per_minute = 100000"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('member_update', 'Org', 0);
SELECT outbox.register_category('slow_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE FUNCTION nothing(m outbox.message) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION slowly(m outbox.message) RETURNS void LANGUAGE sql AS 'SELECT pg_sleep(4)';
SELECT outbox.register_handler('member_update', 'nothing(outbox.message)');
SELECT outbox.register_handler('slow_update', 'slowly(outbox.message)');
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL);
INSERT INTO member SELECT g, 7 FROM generate_series(1, 10000) g;
SELECT outbox.register_table('member', 'member_update', 'cell', shard_column => 'org_id',
                             replication_version => 2);
SELECT outbox.pause_shard('cell', 0, 7);
SQL
check "the plan: 10,000 rows in shard 7" \
    [ "$(q -c "SELECT peak_shard_depth FROM outbox.plan_backfill('member')")" = 10000 ]
# The worker in a slow handler: the middle of a cycle.
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
      VALUES (0, 99, 1, 99)" >/dev/null
check "the worker is in the slow handler" wait_for 30 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND wait_event = 'PgSleep'" 1
# docs/guide.md: the guard, then the gate.
q -c "ALTER SYSTEM SET outbox.backfill_max_shard_depth = 2000" -c "SELECT pg_reload_conf()" \
  -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
check "the plan promises at most 4,000 now" \
    [ "$(q -c "SELECT peak_shard_depth_guarded FROM outbox.plan_backfill('member')")" = 4000 ]
check "worker_status shows the guard in force" wait_for 30 \
    "SELECT backfill_max_shard_depth FROM outbox.worker_status" 2000
check "the backfill holds at the bound" wait_for 60 \
    "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'" throttled
depth=$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier = 7")
check "shard 7 holds $depth rows: at most the bound plus one batch" [ "$depth" -le 4000 ]
q -c "SELECT outbox.resume_shard('cell', 0, 7)" >/dev/null
check "resumed, the backfill completes" wait_for 120 \
    "SELECT state FROM outbox.backfill_status WHERE table_key = 'member'" complete
checks_done guard_reload
