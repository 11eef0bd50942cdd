#!/usr/bin/env bash
# Issue 24 ("safe again", part 1), the attacks that need the background
# worker or more than one session:
#   - a table owner's index predicate sets search_path during the worker's
#     cascade step, then plants operators in it (0.9.0: the next drain pass
#     ran the owner's "=" as the bootstrap superuser);
#   - an application role holds ACCESS EXCLUSIVE on its table: the worker's
#     tombstone check and backfill give up on that table within
#     outbox.owner_lock_timeout, and every other tenant's delivery goes on;
#   - a table owner's predicate that sleeps in the worker's cascade step is
#     stopped by outbox.owner_code_timeout, and the worker goes on.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
source "$root/test/harness/check.sh"
q() { psql -X -q -tA "$@" 2>&1; }

redis_start
cluster_start "outbox.naptime = 100" "log_min_messages = log" "outbox.cursor_store = 'table'"
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('USER', 'S', 0);
SELECT outbox.register_category('OTHER', 'S', 1);
SELECT outbox.register_category('CHILD', 'S', 2);
SELECT outbox.register_cell('us');
CREATE ROLE owner_role;
CREATE ROLE app_role;
SELECT outbox.grant_category('CHILD', 'owner_role');
CREATE SCHEMA own AUTHORIZATION owner_role;
GRANT USAGE ON SCHEMA own TO app_role;
CREATE TABLE users (id bigint PRIMARY KEY);
SELECT outbox.register_table('users', 'USER', 'control', shard_column => 'id');
CREATE TABLE other (id bigint PRIMARY KEY, org int NOT NULL);
SELECT outbox.register_table('other', 'OTHER', shard_column => 'org');
CREATE TABLE delivered (category int, object_identifier bigint);
CREATE FUNCTION take(m outbox.message) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.delivered VALUES (m.category, m.object_identifier) $$;
SELECT outbox.register_handler('USER', 'take(outbox.message)');
SELECT outbox.register_handler('OTHER', 'take(outbox.message)');
SQL

# 1. The owner's predicate leaves search_path = own, pg_catalog behind, and
# own holds an "=" for every type the worker's SQL compares.
q >/dev/null <<'SQL'
SET ROLE owner_role;
CREATE TABLE own.seen (who name, super boolean);
CREATE FUNCTION own.escalate() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO own.seen SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user;
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE owner_role SUPERUSER';
    END IF;
END $$;
CREATE FUNCTION own.eq4(int, int) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM own.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE FUNCTION own.eq8(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM own.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE FUNCTION own.eqt(text, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM own.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR own.= (LEFTARG = int, RIGHTARG = int, FUNCTION = own.eq4);
CREATE OPERATOR own.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = own.eq8);
CREATE OPERATOR own.= (LEFTARG = text, RIGHTARG = text, FUNCTION = own.eqt);
CREATE FUNCTION own.pin() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM set_config('search_path', 'own, pg_catalog', false);
    RETURN true;
END $$;
CREATE TABLE own.monitor (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON own.monitor (user_id);
CREATE INDEX ON own.monitor (id) WHERE own.pin();
INSERT INTO own.monitor SELECT g, g FROM generate_series(1, 10) g;
SELECT outbox.register_foreign_key('own.monitor', 'user_id', 'users', 'CASCADE');
SQL
# The cascade runs; then messages for the drain.
q -c "INSERT INTO users SELECT generate_series(1, 5)" >/dev/null
q -c "DELETE FROM users WHERE id <= 2" >/dev/null
q -c "INSERT INTO other SELECT g, g % 3 FROM generate_series(1, 30) g" >/dev/null
# (90 s: see cascade.sh on a fresh machine's worker at start.)
check "the worker delivers the messages" wait_for 90 "SELECT count(DISTINCT (category, object_identifier)) FROM delivered" 35 ||
    show_worker
check "the cascade deleted the children of the deleted users" \
    wait_for 20 "SELECT count(*) FROM own.monitor WHERE user_id <= 2" 0
q -c "INSERT INTO other SELECT g, g % 3 FROM generate_series(31, 40) g" >/dev/null
check "and delivers later messages" wait_for 20 "SELECT count(DISTINCT (category, object_identifier)) FROM delivered" 45
check "the owner did not become superuser" \
    wait_for 1 "SELECT rolsuper FROM pg_roles WHERE rolname = 'owner_role'" f
check "no operator of the owner ran in the worker" \
    wait_for 1 "SELECT count(*) FROM own.seen" 0

# 2. An application role with UPDATE on its table holds ACCESS EXCLUSIVE on
# it for 30 s.  Deletions of that table wait to be delivered, with the
# worker stopped; then it starts.  Another tenant's messages are delivered
# within seconds, the locked table's too (their tombstone checks wait in
# outbox.tombstone_checks), and the tombstones are recorded once the lock
# is gone.  (0.9.0: every tenant waited for the lock.)
q >/dev/null <<'SQL'
SELECT outbox.register_category('ORG', 'S', 3);
SELECT outbox.grant_category('ORG', 'owner_role');
SET ROLE owner_role;
CREATE TABLE own.org (id bigint PRIMARY KEY);
GRANT SELECT, INSERT, UPDATE, DELETE ON own.org TO app_role;
SELECT outbox.register_table('own.org', 'ORG', 'control', shard_column => 'id');
RESET ROLE;
SELECT outbox.register_handler('ORG', 'take(outbox.message)');
INSERT INTO own.org SELECT generate_series(1, 10);
SQL
wait_for 20 "SELECT count(*) FROM delivered WHERE category = 3" 10 >/dev/null
q >/dev/null <<'SQL'
ALTER SYSTEM SET outbox.worker_enabled = off;
SELECT pg_reload_conf();
SQL
sleep 1
q -c "DELETE FROM own.org WHERE id <= 4" >/dev/null
# And a backfill of it to do.
q >/dev/null <<'SQL'
SELECT outbox.set_replication_version('own.org', 2);
SELECT outbox.set_option('outbox_replication.org.replication_version', '2');
SQL
psql -X -q -U postgres -c "SET ROLE app_role" \
    -c "BEGIN; LOCK TABLE own.org IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(30); COMMIT;" \
    >/dev/null 2>&1 &
locker=$!
sleep 1
q >/dev/null <<'SQL'
ALTER SYSTEM RESET outbox.worker_enabled;
SELECT pg_reload_conf();
SQL
# The worker is at the locked table by now; another tenant writes.
sleep 2
q -c "INSERT INTO other SELECT g, g % 3 FROM generate_series(101, 110) g" >/dev/null
start=$SECONDS
check "another tenant's messages are delivered while a table is locked" \
    wait_for 15 "SELECT count(*) FROM delivered WHERE category = 1 AND object_identifier > 100" 10
echo "  delivered $((SECONDS - start)) s after they were written, the lock held 30 s"
check "the locked table's messages are delivered too" \
    wait_for 15 "SELECT count(*) FROM delivered WHERE category = 3" 14
check "their tombstone checks wait, visibly" \
    wait_for 5 "SELECT count(*) FROM outbox.tombstone_checks WHERE table_key = 'org'" 4
check "the worker reports the table" \
    wait_for 5 "SELECT last_error LIKE '%org%' FROM outbox.worker_status" t
check "backfill_status shows the locked table failing (its id range unknown)" \
    wait_for 10 "SET client_min_messages = error; SELECT state || ',' || coalesce(max_id::text, 'unknown') FROM outbox.backfill_status WHERE table_key = 'org'" "failing,unknown"
check "and metrics() counts it, and the waiting checks" bash -c "psql -X -q -tA -c 'SET client_min_messages = error' -c 'SELECT outbox.metrics()' | grep -Fxq 'pg_outbox_tables_failing{job=\"backfill\"} 1' && psql -X -q -tA -c 'SET client_min_messages = error' -c 'SELECT outbox.metrics()' | grep -Fxq 'pg_outbox_tombstone_checks_waiting 4'"
check "and the lock was still held" kill -0 $locker
wait $locker
check "once the lock is gone, the tombstones are recorded" \
    wait_for 20 "SELECT string_agg(object_identifier::text, ',' ORDER BY object_identifier) FROM outbox.cell_tombstone WHERE table_name = 'org'" "1,2,3,4"
check "and no check waits any more" \
    wait_for 5 "SELECT count(*) FROM outbox.tombstone_checks" 0

# 3. A table owner's index predicate sleeps when the worker plans its child
# table for a cascade step: outbox.owner_code_timeout (5 s) stops it, the
# cascade of that table backs off, and delivery goes on.
q >/dev/null <<'SQL'
SET ROLE owner_role;
CREATE TABLE own.armed ();
CREATE FUNCTION own.slow() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF EXISTS (SELECT FROM own.armed) THEN
        PERFORM pg_sleep(60);
    END IF;
    RETURN true;
END $$;
CREATE TABLE own.slow_child (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON own.slow_child (user_id);
CREATE INDEX ON own.slow_child (id) WHERE own.slow();
INSERT INTO own.slow_child SELECT g, g FROM generate_series(1, 10) g;
SELECT outbox.register_foreign_key('own.slow_child', 'user_id', 'users', 'CASCADE');
INSERT INTO own.armed DEFAULT VALUES;
SQL
sleep 2
q -c "INSERT INTO other SELECT g, g % 3 FROM generate_series(201, 210) g" >/dev/null
start=$SECONDS
check "a sleeping owner's predicate does not stop delivery" \
    wait_for 20 "SELECT count(*) FROM delivered WHERE category = 1 AND object_identifier > 200" 10
echo "  delivered in $((SECONDS - start)) s"
check "the worker names the table and the bound" \
    wait_for 20 "SELECT last_error LIKE '%slow_child%owner_code_timeout%' FROM outbox.worker_status" t
check "foreign_keys shows its cascade failing" \
    wait_for 20 "SET client_min_messages = error; SELECT state FROM outbox.foreign_keys WHERE table_key = 'own.slow_child'" failing
check "no worker query runs longer than the bound" \
    wait_for 1 "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND state = 'active' AND now() - query_start > interval '8 s'" 0

# 4. The cascade's budget is shared: a big child table (300,000 ids to walk,
# 2,000 ids a minute of budget) and a small one with a tombstone to apply.
# (0.9.0 ran the references in table_key order: a_big took the whole budget
# every minute, and z_small's tombstone waited for hours.)
q >/dev/null <<'SQL'
SELECT outbox._unregister_foreign_key('own.slow_child', 'user_id');
ALTER SYSTEM SET outbox.worker_enabled = off;
ALTER SYSTEM SET outbox.backfill_rate_per_minute = 2000;
SELECT pg_reload_conf();
CREATE TABLE a_big (id bigint PRIMARY KEY, user_id bigint);
INSERT INTO a_big SELECT g, 1000000 FROM generate_series(1, 300000) g;
CREATE INDEX ON a_big (user_id);
CREATE TABLE z_small (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON z_small (user_id);
-- (User 900 is not in users: a tombstone of a row that is there is not
-- acted on, issue 35.)
INSERT INTO z_small VALUES (1, 900);
SELECT outbox.register_foreign_key('a_big', 'user_id', 'users', 'CASCADE');
SELECT outbox.register_foreign_key('z_small', 'user_id', 'users', 'CASCADE');
SELECT outbox.record_tombstone('cell', 'users', 900);
ALTER SYSTEM RESET outbox.worker_enabled;
SELECT pg_reload_conf();
SQL
check "a small reference's tombstone is applied while a big one walks" \
    wait_for 30 "SELECT count(*) FROM z_small" 0
check "and the big one is still walking" \
    wait_for 1 "SELECT row_watermark < 300000 FROM outbox.foreign_keys WHERE table_key = 'a_big'" t

checks_done owner_isolation
