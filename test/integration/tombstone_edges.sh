#!/usr/bin/env bash
# Nothing lost at the edges (issue 35), through the background worker and a
# consumer, against a real server and a real Redis:
#   1. the drain's tombstone check waits on a lock (REINDEX of the parent's
#      primary key held open) and the worker is cancelled there: the batch
#      fails and is retried, every tombstone is recorded, none is taken for
#      the table's failure (0.9.0: the cancel was swallowed, the batch
#      committed, the tombstones were lost);
#   2. the same lock with lock_timeout = 500ms for every session: the
#      checks wait in outbox.tombstone_checks and every tombstone is
#      recorded (0.9.0: 7 of 10 lost);
#   3. tombstones that commit out of id order: a consumer's complete() held
#      open while the worker drains and cascades another deletion, then a
#      transaction recording tombstones held open (as a link's receive()
#      round from one cell is) while another cell's deletion is cascaded:
#      the cascade's watermark waits for the open transaction, and every
#      child of every tombstoned parent goes (0.9.0: the watermark passed
#      them, outbox.foreign_keys said idle, the children stayed for ever).
# The re-created id (item 4) is in sql/tombstone_return.sql.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; cluster_stop' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.database_name = postgres"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }
set_system() { # SETTING VALUE (DEFAULT: reset)
    if [[ $2 == DEFAULT ]]; then
        q -c "ALTER SYSTEM RESET $1" -c "SELECT pg_reload_conf()" >/dev/null
    else
        q -c "ALTER SYSTEM SET $1 = '$2'" -c "SELECT pg_reload_conf()" >/dev/null
    fi
}
tombstones_of() { # TABLE LOW HIGH
    q -c "SELECT count(*) FROM outbox.cell_tombstone WHERE table_name = '$1' AND object_identifier BETWEEN $2 AND $3"
}

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_category('org_update', 'User', 1);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop(outbox.message)');
-- org_update has no handler: a consumer's.
CREATE TABLE org (id bigint PRIMARY KEY);
SELECT outbox.register_table('org', 'org_update', 'control', shard_column => 'id');
CREATE TABLE member (id bigserial PRIMARY KEY, user_id bigint NOT NULL);
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
CREATE TABLE org_member (id bigserial PRIMARY KEY, org_id bigint NOT NULL);
CREATE INDEX ON org_member (org_id);
SELECT outbox.register_foreign_key('org_member', 'org_id', 'org', 'CASCADE');
CREATE ROLE consumer LOGIN;
SELECT outbox.grant_category('org_update', 'consumer', 'CONSUME');
GRANT SELECT ON member TO consumer;
INSERT INTO auth_user SELECT generate_series(1, 40);
INSERT INTO org SELECT generate_series(1, 20);
INSERT INTO member (user_id) SELECT g % 40 + 1 FROM generate_series(1, 80) g;
INSERT INTO org_member (org_id) SELECT g % 20 + 1 FROM generate_series(1, 40) g;
SQL
consume_all="SELECT outbox.complete(array_agg(DISTINCT claim)) FROM outbox.claim(1000, '1 minute', '{org_update}')"
check "the worker drains the users" wait_for 90 \
    "SELECT count(*) FROM outbox.control_outbox WHERE category = 0" 0 || show_worker
q -U consumer -c "$consume_all" >/dev/null
check "the consumer takes the orgs" [ "$(q -c "SELECT count(*) FROM outbox.control_outbox")" = 0 ]

# 1. The worker cancelled while its tombstone check waits on the lock of
# REINDEX INDEX auth_user_pkey, held 3 s (outbox.owner_lock_timeout raised
# so that the check waits on the lock rather than giving up on it).
set_system outbox.worker_enabled off
sleep 1
q -c "DELETE FROM auth_user WHERE id BETWEEN 11 AND 20" >/dev/null
set_system outbox.owner_lock_timeout 30s
q -c "BEGIN" -c "REINDEX INDEX auth_user_pkey" -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null &
locker=$!
pids+=("$locker")
sleep 0.5
set_system outbox.worker_enabled DEFAULT
check "the worker's tombstone check waits on the lock" wait_for 20 \
    "SELECT wait_event_type FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" Lock
check "the worker is cancelled there" [ "$(q -c "SELECT pg_cancel_backend($(worker_pid))")" = t ]
wait "$locker"
check "once the lock is gone, the 10 tombstones are recorded" wait_for 30 \
    "SELECT count(*) FROM outbox.cell_tombstone WHERE table_name = 'auth_user' AND object_identifier BETWEEN 11 AND 20" 10
echo "  tombstones recorded: $(tombstones_of auth_user 11 20) of 10"
check "the cancel failed the batch: no check was kept for later" \
    [ "$(grep -c 'tombstone check of auth_user failed' "$CLUSTER_DIR/server.log")" = 0 ]
set_system outbox.owner_lock_timeout DEFAULT

# 2. The same lock, held 4 s, with lock_timeout = 500ms for everyone.
set_system outbox.worker_enabled off
sleep 1
q -c "DELETE FROM auth_user WHERE id BETWEEN 21 AND 30" >/dev/null
set_system lock_timeout 500ms
q -c "SET lock_timeout = 0" -c "BEGIN" -c "REINDEX INDEX auth_user_pkey" -c "SELECT pg_sleep(4)" \
    -c "COMMIT" >/dev/null &
locker=$!
pids+=("$locker")
sleep 0.5
set_system outbox.worker_enabled DEFAULT
wait "$locker"
check "lock_timeout = 500ms: the 10 tombstones are recorded" wait_for 30 \
    "SELECT count(*) FROM outbox.cell_tombstone WHERE table_name = 'auth_user' AND object_identifier BETWEEN 21 AND 30" 10
echo "  tombstones recorded: $(tombstones_of auth_user 21 30) of 10"
check "and no check waits any more" wait_for 20 "SELECT count(*) FROM outbox.tombstone_checks" 0
set_system lock_timeout DEFAULT

# 3. Tombstones that commit out of id order.  held SESSION_ARGS SQL USER:
# runs SQL in a transaction (the tombstones it records take their ids
# there), then holds the transaction until the worker's cascade has taken
# USER's members, or 10 s, and commits; meanwhile USER is deleted and the
# worker drains it: its tombstone has a larger id and commits first.
held() {
    local before
    before=$(q -c "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox.cell_tombstone', 'id')), 0)")
    psql -X -q -tA $1 -c "BEGIN" -c "$2" \
        -c "DO \$\$ BEGIN FOR i IN 1 .. 50 LOOP
                EXIT WHEN NOT EXISTS (SELECT FROM member WHERE user_id = $3);
                PERFORM pg_sleep(0.2);
            END LOOP; END \$\$" -c "COMMIT" >/dev/null 2>&1 &
    holder=$!
    pids+=("$holder")
    wait_for 10 "SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox.cell_tombstone', 'id')) > $before" t >/dev/null
    q -c "DELETE FROM auth_user WHERE id = $3" >/dev/null
}
# 3a. A consumer's complete() of five org deletions, held open.
q -c "DELETE FROM org WHERE id <= 5" >/dev/null
held "-U consumer" "$consume_all" 31
check "while complete() is open, the user's tombstone waits, counted" wait_for 10 \
    "SELECT pending_tombstones FROM outbox.foreign_keys WHERE relation = 'member'::regclass" 1
wait "$holder"
check "the children of the five orgs go" wait_for 30 "SELECT count(*) FROM org_member WHERE org_id <= 5" 0
echo "  children of the five orgs left: $(q -c "SELECT count(*) FROM org_member WHERE org_id <= 5") of 10"
check "and the user's" wait_for 30 "SELECT count(*) FROM member WHERE user_id = 31" 0

# 3b. One cell's tombstones of orgs 6 to 10 (deleted) in a transaction held
# open, another cell's deletion of user 32 meanwhile (users 31 and 32: in no shard of the orgs the consumer claims).
q -c "DELETE FROM org WHERE id BETWEEN 6 AND 10" >/dev/null
held "" "SELECT outbox.record_tombstone('cell', 'org', g) FROM generate_series(6, 10) g" 32
wait "$holder"
check "two cells' tombstones out of order: the children of orgs 6 to 10 go" wait_for 30 \
    "SELECT count(*) FROM org_member WHERE org_id BETWEEN 6 AND 10" 0
echo "  children of orgs 6 to 10 left: $(q -c "SELECT count(*) FROM org_member WHERE org_id BETWEEN 6 AND 10") of 10"
check "and the user's" wait_for 30 "SELECT count(*) FROM member WHERE user_id = 32" 0
check "outbox.foreign_keys: both idle, nothing pending" wait_for 30 \
    "SELECT string_agg(relation::text || ':' || pending_tombstones || ':' || state, ',' ORDER BY relation::text) FROM outbox.foreign_keys" \
    "member:0:idle,org_member:0:idle"
check "every other child is there" [ "$(q -c "SELECT (SELECT count(*) FROM member) || ',' || (SELECT count(*) FROM org_member)")" = "36,20" ]

checks_done tombstone_edges.sh
