#!/usr/bin/env bash
# The cross-silo cascade through the background worker, after Sentry's
# test_hybrid_cloud.py, against a real server and a real Redis: deleted
# control users take their cell members (tombstones written by the drain,
# the cascade run by the worker); the watermarks in Redis in Sentry's
# format; a corrupted watermark stops only its own cascade, and a missing
# one starts the walk again; Redis down pauses the cascade and nothing is
# lost; the worker SIGKILLed mid-cascade: nothing lost, nothing left.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'kill -CONT $REDIS_PID 2>/dev/null; cluster_stop' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 100000000" \
    "outbox.database_name = postgres" "outbox.redis_command_timeout_ms = 500"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }
members_of() { q -c "SELECT count(*) FROM member WHERE user_id BETWEEN $1 AND $2"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop(outbox.message)');
CREATE TABLE member (id bigint PRIMARY KEY, user_id bigint NOT NULL);
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
INSERT INTO auth_user SELECT g FROM generate_series(1, 1000) g;
INSERT INTO member SELECT g, g % 1000 + 1 FROM generate_series(1, 20000) g;
SQL
# (90 s, not 30: on fresh CI machines the worker was seen to sit out about
# a minute right after start, twice in four runs, never on a machine up
# for hours; show_worker says where if it ever waits longer.)
check "the worker drains the users" wait_for 90 "SELECT count(*) FROM outbox.control_outbox" 0 ||
    show_worker

q -c "DELETE FROM auth_user WHERE id <= 100" >/dev/null
check "deleted users leave tombstones (the drain)" wait_for 30 \
    "SELECT count(*) FROM outbox.cell_tombstone WHERE table_name = 'auth_user'" 100
check "the worker cascades: their 2,000 members are gone" wait_for 60 \
    "SELECT count(*) FROM member WHERE user_id <= 100" 0
check "and only theirs" [ "$(q -c "SELECT count(*) FROM member")" = 18000 ]
# The row walk's watermark is the last member id it saw: 20000, or 19999
# when the cascade deleted member 20000 (of user 1) before the walk reached
# it (about one run in ten here).  Wait for the walk to be idle, then read
# Redis.
check "outbox.foreign_keys: idle, at the watermarks" wait_for 30 \
    "SELECT (row_watermark IN (19999, 20000)) || ',' || tombstone_watermark || ',' || pending_tombstones || ',' || state FROM outbox.foreign_keys" "true,100,0,idle"
row=$(redis-cli -p "$REDIS_PORT" GET row.member.user_id)
tomb=$(redis-cli -p "$REDIS_PORT" GET tombstone.member.user_id)
check "Redis holds Sentry's watermarks ($row, $tomb)" grep -Eq '^\[(19999|20000), "[0-9a-f]{40}"\] \[100, "[0-9a-f]{40}"\]$' <<<"$row $tomb"

# A corrupted watermark: that cascade stops, visibly; deleting the key
# starts the walk again from the smallest id, and it catches up.
redis-cli -p "$REDIS_PORT" SET tombstone.member.user_id 'not a watermark' >/dev/null
q -c "DELETE FROM auth_user WHERE id = 101" >/dev/null
check "a corrupted watermark: the view says so" wait_for 30 \
    "SELECT state FROM outbox.foreign_keys" watermark_unavailable
check "and the worker reports it" wait_for 30 \
    "SELECT last_error LIKE 'cascade of public.member: cascade watermark%not [low%' FROM outbox.worker_status" t
check "the members of the user are still there" [ "$(members_of 101 101)" = 20 ]
redis-cli -p "$REDIS_PORT" DEL tombstone.member.user_id >/dev/null
check "a missing watermark starts again, and the cascade catches up" wait_for 90 \
    "SELECT count(*) FROM member WHERE user_id = 101" 0

# Redis down (hung): the cascade pauses, nothing is lost, it resumes.
kill -STOP "$REDIS_PID"
q -c "DELETE FROM auth_user WHERE id = 102" >/dev/null
check "Redis down: the tombstone is recorded" wait_for 30 \
    "SELECT count(*) FROM outbox.cell_tombstone WHERE object_identifier = 102" 1
sleep 3
check "Redis down: the members wait" [ "$(members_of 102 102)" = 20 ]
kill -CONT "$REDIS_PID"
check "Redis back: the cascade resumes" wait_for 90 "SELECT count(*) FROM member WHERE user_id = 102" 0

# The worker SIGKILLed mid-cascade (small steps: many transactions).
q -c "ALTER SYSTEM SET outbox.cascade_chunk_size = 50" -c "SELECT pg_reload_conf()" >/dev/null
q -c "DELETE FROM auth_user WHERE id BETWEEN 200 AND 299" >/dev/null
check "the cascade starts" wait_for 60 "SELECT count(*) < 2000 FROM member WHERE user_id BETWEEN 200 AND 299" t
pid=$(worker_pid)
kill -KILL "$pid"
check "a killed worker is restarted" wait_for 30 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND pid <> $pid" 1
check "after the kill the cascade completes" wait_for 120 \
    "SELECT count(*) FROM member WHERE user_id BETWEEN 200 AND 299" 0
check "and nothing else went: 18,000 - 20 - 20 - 2,000 members" \
    [ "$(q -c "SELECT count(*) FROM member")" = 15960 ]
check "no crash in the log" bash -c "! grep -q 'terminated by signal 11\|TRAP' '$CLUSTER_DIR/server.log'"
checks_done cascade
