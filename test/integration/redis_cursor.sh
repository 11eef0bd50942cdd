#!/usr/bin/env bash
# Backfill cursors in a real Redis: compatibility with Sentry's format both
# ways, unreadable values, Redis down, hung (SIGSTOP), restarted, a failure
# after commit, and the password.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/cluster.sh"
trap 'kill -CONT $REDIS_PID 2>/dev/null; cluster_stop' EXIT
redis_start
cluster_start

source "$root/test/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
key=outbox_backfill.orgs

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE orgs (id bigint PRIMARY KEY, name text);
INSERT INTO orgs SELECT g, 'o' || g FROM generate_series(1, 10) g;
SELECT outbox.register_table('orgs', 'C');
TRUNCATE outbox.cell_outbox;
SQL

# A missing key reads as [0, 1] and is created, after commit only.
q -c "BEGIN; SELECT * FROM outbox.get_processing_state('orgs'); ROLLBACK;" >/dev/null
check "a rolled-back read does not create the key" [ "$(rcli EXISTS $key)" = 0 ]
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "a missing key reads as (0, 1)" [ "$got" = "0,1" ]
check "and is created as Sentry's [0, 1]" [ "$(rcli GET $key)" = "[0, 1]" ]

# Sentry's json.dumps((low, version)) and other JSON spellings read; what
# pg_outbox writes reads in Python's json.
rcli SET $key '[3,1]' >/dev/null
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "reads [3,1] written without spaces" [ "$got" = "3,1" ]
rcli SET $key ' [ 4 , 1 ] ' >/dev/null
got=$(q -c "SELECT low || '-' || up FROM outbox.process_backfill_batch('orgs', 2, true)")
check "a batch starts at the cursor Sentry wrote" [ "$got" = "4-6" ]
check "the new cursor is json.dumps((7, 1))" [ "$(rcli GET $key)" = "[7, 1]" ]
check "which Python's json reads back" \
    python3 -c "import json,sys; sys.exit(0 if json.loads('$(rcli GET $key)') == [7, 1] else 1)"

# An unreadable value is an ERROR naming the key and showing the value, and
# it is left as it is.
for bad in 'garbage' '["7", 1]' '[7]' '[7, 1.5]' '{"low": 7}'; do
    rcli SET $key "$bad" >/dev/null
    out=$(q -c "SELECT * FROM outbox.process_backfill_batch('orgs', 2, true)")
    check "unreadable $bad: clear error" grep -q "backfill cursor at Redis key \"$key\" is not \[lower_bound, version\]" <<<"$out"
    check "unreadable $bad: never reset" [ "$(rcli GET $key)" = "$bad" ]
done
q -c "SELECT outbox.set_processing_state('orgs', 1, 1)" >/dev/null
check "set_processing_state repairs it" [ "$(rcli GET $key)" = "[1, 1]" ]

# A failure after commit: the batch's rows are committed, the cursor does not
# move (a WARNING says so), and the next run does the batch again.  Redis
# refuses the write (out of memory), so the outcome is certain.
out=$(q <<SQL
BEGIN;
SELECT 'up=' || up FROM outbox.process_backfill_batch('orgs', 2, true);
\! redis-cli -p $REDIS_PORT CONFIG SET maxmemory 1 >/dev/null
COMMIT;
SQL
)
rcli CONFIG SET maxmemory 0 >/dev/null
check "a failure after commit is a WARNING" grep -q "WARNING:  backfill cursor $key was not moved to \[4, 1\]: Redis at 127.0.0.1:$REDIS_PORT: OOM" <<<"$out"
check "the batch committed" [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE object_identifier BETWEEN 1 AND 3")" = 3 ]
check "the cursor did not move" [ "$(rcli GET $key)" = "[1, 1]" ]
got=$(q -c "SELECT low || '-' || up FROM outbox.process_backfill_batch('orgs', 2, true)")
check "the next run does the batch again" [ "$got" = "1-3" ]
# A Redis that hangs at commit: the commit still returns, bounded by the
# command timeout, with the WARNING (whether the write landed is unknown, and
# either way no row is skipped).
start=$(date +%s%N)
out=$(q <<SQL
SET outbox.redis_command_timeout_ms = 300;
BEGIN;
SELECT 'up=' || up FROM outbox.process_backfill_batch('orgs', 2, true);
\! kill -STOP $REDIS_PID
COMMIT;
SQL
)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
kill -CONT $REDIS_PID
check "a hung Redis at commit: WARNING within the timeout ($ms ms)" bash -c "grep -q 'WARNING:  backfill cursor $key was not moved to \[7, 1\]: Redis at 127.0.0.1:$REDIS_PORT: no answer within 300 ms' <<<'$out' && [ $ms -lt 2000 ]"
q -c "SELECT outbox.set_processing_state('orgs', 1, 1)" >/dev/null

# Redis hung: statement_timeout and pg_cancel_backend end the call within
# about a second; the command timeout ends it on its own.
kill -STOP $REDIS_PID
start=$(date +%s%N)
out=$(q -c "SET outbox.redis_command_timeout_ms = 60000" -c "SET statement_timeout = '300ms'" \
        -c "SELECT * FROM outbox.get_processing_state('orgs')")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "hung Redis: statement_timeout cancels ($ms ms)" bash -c "grep -q 'canceling statement due to statement timeout' <<<'$out' && [ $ms -lt 1500 ]"
start=$(date +%s%N)
out=$(q -c "SET outbox.redis_command_timeout_ms = 500" -c "SELECT * FROM outbox.get_processing_state('orgs')")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "hung Redis: the command timeout ends the call ($ms ms)" bash -c "grep -q 'Redis at 127.0.0.1:$REDIS_PORT: no answer within 500 ms' <<<'$out' && [ $ms -lt 1500 ]"
(q -c "SET outbox.redis_command_timeout_ms = 60000" -c "SELECT 'cancel-me', * FROM outbox.get_processing_state('orgs')" >"$CLUSTER_DIR/cancel.out" 2>&1 &)
sleep 0.5
start=$(date +%s%N)
q -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%cancel-me%' AND pid <> pg_backend_pid()" >/dev/null
for _ in $(seq 40); do grep -q "canceling statement" "$CLUSTER_DIR/cancel.out" 2>/dev/null && break; sleep 0.05; done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "hung Redis: pg_cancel_backend ends the call ($ms ms)" bash -c "grep -q 'canceling statement due to user request' '$CLUSTER_DIR/cancel.out' && [ $ms -lt 1500 ]"
kill -CONT $REDIS_PID
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "after a hang the next call reconnects and works" [ "$got" = "1,1" ]

# Redis down: a clear error naming host:port and Redis's own message;
# capture does not touch Redis at all.
kill $REDIS_PID; wait $REDIS_PID 2>/dev/null
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "Redis down: the error names host:port" grep -q "could not connect to Redis at 127.0.0.1:$REDIS_PORT: Connection refused" <<<"$out"
check "Redis down: capture still works" [ "$(q -c "INSERT INTO orgs VALUES (100, 'new') RETURNING id")" = 100 ]
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
REDIS_PID=$!
for _ in $(seq 50); do rcli PING >/dev/null 2>&1 && break; sleep 0.1; done
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "Redis back: the same session reconnects (fresh Redis: key recreated)" [ "$got" = "0,1" ]

# The password: AUTH with it; superuser-only; never in a message or the log.
rcli CONFIG SET requirepass 's3cret-pw' >/dev/null
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "without the password: Redis's own error" grep -qi "NOAUTH" <<<"$out"
got=$(q -c "SET outbox.redis_password = 's3cret-pw'" -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "with outbox.redis_password it works" [ "$got" = "0,1" ]
printf 's3cret-pw\n' >"$CLUSTER_DIR/redis.pw"
chmod 600 "$CLUSTER_DIR/redis.pw"
[[ $(id -u) == 0 ]] && chown postgres "$CLUSTER_DIR/redis.pw"
q -c "ALTER SYSTEM SET outbox.redis_password_file = '$CLUSTER_DIR/redis.pw'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "with outbox.redis_password_file it works" [ "$got" = "0,1" ]
q -c "CREATE ROLE nosy LOGIN" >/dev/null
out=$(q -U nosy -c "SHOW outbox.redis_password" -c "SHOW outbox.redis_password_file")
check "ordinary roles cannot read the password settings" bash -c "grep -q 'must be superuser' <<<'$out' && ! grep -q -e s3cret -e redis.pw <<<'$out'"
check "nor see them in pg_settings" [ -z "$(q -U nosy -c "SELECT setting FROM pg_settings WHERE name LIKE 'outbox.redis_password%'")" ]
printf 'wrong-pw\n' >"$CLUSTER_DIR/redis.pw"
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "a wrong password: Redis's error, not the password" bash -c "grep -qi 'WRONGPASS\|invalid password' <<<'$out' && ! grep -q wrong-pw <<<'$out'"
check "the password is never in the server log" bash -c "! grep -q -e s3cret -e wrong-pw '$CLUSTER_DIR/server.log'"

checks_done redis_cursor
