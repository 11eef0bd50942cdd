#!/usr/bin/env bash
# Operating control (SPEC section 10) while the background worker drains the
# same shards: pause_shard waits for the worker's claim and then holds the
# shard, rows written later included; skip_message under a stream of new
# rows loses none of them; retry_shard cuts a long backoff short;
# max_attempts moves exactly the failing message while the shard goes on;
# requeued dead letters are delivered; and outbox.backfill_min_rate_per_minute
# gives the backfill its floor under a live load that uses the whole budget.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'kill $writer 2>/dev/null; cluster_stop' EXIT
writer=
redis_start
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 100000000" \
    "outbox.database_name = postgres"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
-- A handler that takes 50 ms a message, and fails for the objects listed in
-- poison.
CREATE TABLE seen (n serial, shard bigint, object bigint);
CREATE TABLE poison (object bigint PRIMARY KEY);
CREATE FUNCTION slow(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.05);
    IF EXISTS (SELECT FROM poison p WHERE p.object = m.object_identifier) THEN
        RAISE EXCEPTION 'poison %', m.object_identifier;
    END IF;
    INSERT INTO seen (shard, object) VALUES (m.shard_identifier, m.object_identifier);
END $$;
SELECT outbox.register_handler('org_update', 'slow(outbox.message)');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop(outbox.message)');
SQL
write() { # shard first_object last_object
    q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
          SELECT 0, $1, 0, g FROM generate_series($2, $3) g" >/dev/null
}
seen() { q -c "SELECT count(*) FROM seen WHERE shard = $1"; }

# 1. Pause while the worker drains the shard: 60 messages of 50 ms, three
# seconds in one batch.  pause_shard waits for the batch's claim; once it
# returns, nothing more of the shard is delivered, rows written later
# neither; resume_shard delivers them.
write 1 1 60
check "the worker starts on shard 1" wait_for 30 "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()" t
start=$SECONDS
q -c "SELECT outbox.pause_shard('cell', 0, 1)" >/dev/null
at_pause=$(seen 1)
write 1 61 70
sleep 2
check "pause_shard waited for the worker's batch ($at_pause delivered when it returned)" \
    [ "$at_pause" = 60 ]
check "paused: nothing more delivered, rows written later wait" [ "$(seen 1)" = 60 ]
check "shard_depth shows it paused, with its 10 rows" \
    [ "$(q -c "SELECT depth || ' ' || state FROM outbox.shard_depth WHERE shard_identifier = 1")" = "10 paused" ]
q -c "SELECT outbox.resume_shard('cell', 0, 1)" >/dev/null
check "resumed: delivered" wait_for 30 "SELECT count(*) FROM seen WHERE shard = 1" 70

# 2. A poison message, then skip_message while a writer adds rows to the
# same shard: every row ends up delivered or in the dead letters.
q -c "INSERT INTO poison VALUES (200)" >/dev/null
write 2 200 200
check "the poison message backs its shard off" wait_for 30 \
    "SELECT state || ' ' || object_identifier FROM outbox.shard_depth WHERE shard_identifier = 2" \
    "backed_off 200"
(for i in $(seq 201 260); do write 2 "$i" "$i"; sleep 0.02; done) &
writer=$!
sleep 0.3
check "skip_message moves the poison message" \
    [ "$(q -c "SELECT outbox.skip_message('cell', 0, 2, 0, 200)")" = 1 ]
wait $writer
writer=
check "the stream behind it is delivered, none lost" wait_for 30 \
    "SELECT count(*) FROM seen WHERE shard = 2" 60
check "and the poison message waits in the dead letters" \
    [ "$(q -c "SELECT string_agg(object_identifier || ':' || last_error, ',') FROM outbox.dead_letters")" = "200:poison 200" ]

# 3. retry_shard cuts a backoff short: after three failures the shard waits
# 8 s; fixed and retried, it is delivered at once.
q -c "INSERT INTO poison VALUES (300)" >/dev/null
write 3 300 301
check "three failures" wait_for 60 \
    "SELECT attempts >= 3 FROM outbox.shard_depth WHERE shard_identifier = 3" t
q -c "DELETE FROM poison WHERE object = 300" >/dev/null
start=$SECONDS
check "retry_shard makes its rows due" [ "$(q -c "SELECT outbox.retry_shard('cell', 0, 3)")" = 2 ]
check "delivered at once" wait_for 5 "SELECT count(*) FROM seen WHERE shard = 3" 2

# 4. max_attempts: the failing message (both of its rows) moves after two
# failures, the shard goes on.
q -c "SELECT outbox.set_max_attempts('org_update', 2)" -c "INSERT INTO poison VALUES (401)" >/dev/null
write 4 400 401
write 4 401 403
check "the rest of the shard is delivered" wait_for 60 "SELECT count(*) FROM seen WHERE shard = 4" 3
check "exactly the failing message went to the dead letters, after 2 attempts" \
    [ "$(q -c "SELECT string_agg(object_identifier || ':' || attempts, ',' ORDER BY id) FROM outbox.dead_letters WHERE shard_identifier = 4")" = "401:2,401:2" ]
check "metrics() counts them" bash -c \
    "psql -X -tA -c 'SELECT outbox.metrics()' | grep -qx 'pg_outbox_dead_letters{silo=\"cell\"} 3'"

# 5. Fixed, requeued: the worker delivers them.
q -c "DELETE FROM poison" -c "SELECT outbox.requeue_dead_letters()" >/dev/null
check "requeued dead letters are delivered" wait_for 30 \
    "SELECT (SELECT count(*) FROM seen WHERE object IN (200, 401)) || ' ' || (SELECT count(*) FROM outbox.dead_letters)" "2 0"

# 6. The backfill floor: 1,000 ids a minute, a floor of 300, and a live
# burst of 3,000 rows committed with the table's registration uses the whole
# minute's budget; the backfill still gets its 300 (301: a batch of n ids
# spans n + 1, as Sentry's does).
q -c "ALTER SYSTEM SET outbox.backfill_rate_per_minute = 1000" \
  -c "ALTER SYSTEM SET outbox.backfill_min_rate_per_minute = 300" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
q >/dev/null <<'SQL'
CREATE TABLE account (id bigint PRIMARY KEY);
INSERT INTO account SELECT g FROM generate_series(1, 5000) g;
CREATE TABLE live (id bigint PRIMARY KEY);
SELECT outbox.register_table('live', 'user_update', 'cell', shard_column => 'id');
BEGIN;
SELECT outbox.register_table('account', 'user_update', 'cell', shard_column => 'id',
                             replication_version => 1);
SELECT outbox.set_option('outbox_replication.account.replication_version', '1');
INSERT INTO live SELECT g FROM generate_series(1, 3000) g;
COMMIT;
SQL
check "the floor: the backfill gets 301 ids in a minute whose budget live traffic used" \
    wait_for 20 "SELECT rows_backfilled FROM outbox.worker_status" 301
check "while no budget is left" [ "$(q -c "SELECT backfill_budget_left FROM outbox.worker_status")" = 0 ]
check "no crash in the log" bash -c "! grep -q 'terminated by signal\|TRAP' '$CLUSTER_DIR/server.log'"
checks_done operating_control
