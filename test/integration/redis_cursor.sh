#!/usr/bin/env bash
# Backfill cursors in a real Redis: compatibility with Sentry's format both
# ways, unreadable values, Redis down, hung (SIGSTOP), restarted, a failure
# after commit, and the password.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'kill -CONT $REDIS_PID 2>/dev/null; cluster_stop' EXIT
redis_start
# No worker: its backfill pass reads every registered table's cursor, and
# the read of a missing key creates it at commit (the check below that a
# rolled-back read creates none failed 1 run in 3 on a loaded machine).
# Every batch here is called by the test.
cluster_start "outbox.worker_enabled = off"

source "$root/test/harness/check.sh"
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
# The [0, 1] a read creates is a default, written only if the key is still
# absent at commit: a value that another client set in between (an operator,
# a worker's batch) is not overwritten.  (CI once saw a worker's read of a
# new table overwrite a value the test had just set.)
rcli DEL $key >/dev/null
q -c "BEGIN" -c "SELECT * FROM outbox.get_processing_state('orgs')" \
  -c "\\! redis-cli -p $REDIS_PORT SET $key '[5, 1]'" -c "COMMIT" >/dev/null
check "the created [0, 1] does not overwrite a value set before commit" [ "$(rcli GET $key)" = "[5, 1]" ]
rcli SET $key '[0, 1]' >/dev/null

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

# The password: only from a file that the server's OS user owns and nobody
# else may read; never a setting, never in a message or the log.
rcli CONFIG SET requirepass 's3cret-pw' >/dev/null
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "without the password: Redis's own error" grep -qi "NOAUTH" <<<"$out"
# (PostgreSQL logs a failing statement whole: these attempts use no real
# password.)
out=$(q -c "SET outbox.redis_password = 'attempted'")
check "outbox.redis_password is no setting any more" grep -q 'invalid configuration parameter name "outbox.redis_password"' <<<"$out"
out=$(q -c "ALTER DATABASE postgres SET outbox.redis_password = 'attempted'")
check "nor can it be stored for a database" bash -c "grep -q 'invalid configuration parameter name' <<<'$out' && [ \"\$(psql -X -tA -c \"SELECT count(*) FROM pg_db_role_setting WHERE array_to_string(setconfig, ',') LIKE '%redis_password%'\")\" = 0 ]"
printf 's3cret-pw\n' >"$CLUSTER_DIR/redis.pw"
chmod 644 "$CLUSTER_DIR/redis.pw"
[[ $(id -u) == 0 ]] && chown postgres "$CLUSTER_DIR/redis.pw"
q -c "ALTER SYSTEM SET outbox.redis_password_file = '$CLUSTER_DIR/redis.pw'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "a password file others may read is refused" grep -q "redis.pw\" must belong to the database server's OS user and give no permission to group or others" <<<"$out"
chmod 600 "$CLUSTER_DIR/redis.pw"
got=$(q -c "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('orgs')")
check "with outbox.redis_password_file (mode 600) it works" [ "$got" = "0,1" ]
q -c "CREATE ROLE nosy LOGIN IN ROLE pg_monitor" >/dev/null
out=$(q -U nosy -c "SELECT name, setting FROM pg_settings WHERE name LIKE 'outbox.%'" -c "SELECT current_setting('outbox.redis_password', true)" -c "SELECT setconfig FROM pg_db_role_setting")
check "a pg_monitor member finds the password nowhere (pg_settings, current_setting, pg_db_role_setting)" bash -c "! grep -q s3cret <<<'$out' && grep -q 'outbox.redis_password_file' <<<'$out'"
printf 'wrong-pw\n' >"$CLUSTER_DIR/redis.pw"
out=$(q -c "SELECT * FROM outbox.get_processing_state('orgs')")
check "a wrong password: Redis's error, not the password" bash -c "grep -qi 'WRONGPASS\|invalid password' <<<'$out' && ! grep -q wrong-pw <<<'$out'"
# A leftover outbox.redis_password of 0.4.0 in postgresql.conf: dropped with
# a WARNING that names only the parameter.
echo "outbox.redis_password = 'leftover-pw'" >>"$CLUSTER_DIR/data/postgresql.conf"
q -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
check "a leftover outbox.redis_password is reported by name" grep -q 'outbox.redis_password' "$CLUSTER_DIR/server.log"
check "the password is never in the server log" bash -c "! grep -q -e s3cret -e wrong-pw -e leftover-pw '$CLUSTER_DIR/server.log'"
sed -i '/outbox.redis_password = /d' "$CLUSTER_DIR/data/postgresql.conf"
rcli -a s3cret-pw --no-auth-warning CONFIG SET requirepass '' >/dev/null
q -c "ALTER SYSTEM RESET outbox.redis_password_file" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3

# Cursor writes kept per subtransaction (issue 9: the list was rebuilt in
# memory freed at the subtransaction's cleanup; a released write was lost,
# and with temporary tables created meanwhile the backend crashed).
for temp in "" "CREATE TEMP TABLE t1 (a int); CREATE TEMP TABLE t2 (b text); CREATE TEMP TABLE t3 (c int);"; do
    out=$(psql -X -q -tA 2>&1 <<SQL
SELECT outbox.set_processing_state('orgs', 100, 1);
BEGIN;
SELECT outbox.set_processing_state('orgs', 150, 1);
SAVEPOINT a;
SELECT outbox.set_processing_state('orgs', 200, 1);
ROLLBACK TO a;
SAVEPOINT b;
SELECT outbox.set_processing_state('orgs', 300, 1);
RELEASE b;
SAVEPOINT c;
$temp
SELECT 1/0;
ROLLBACK TO c;
SELECT 'in transaction: ' || lower_bound FROM outbox.get_processing_state('orgs');
COMMIT;
SQL
)
    check "savepoints ${temp:+with temporary tables }: the released write counts (${out//$'\n'/ })" \
        bash -c "grep -q 'in transaction: 300' <<<'$out' && [ \"\$(redis-cli -p $REDIS_PORT GET $key)\" = '[300, 1]' ]"
done
check "no backend crashed" bash -c "! grep -q 'terminated by signal' '$CLUSTER_DIR/server.log'"

# COMMIT after batches of many tables with Redis hung: one round trip (MSET),
# bounded by the command timeout, not one timeout per key; and a cancel or a
# terminate during that commit takes effect at once.
q >/dev/null <<'SQL'
DO $$
BEGIN
    FOR i IN 1..8 LOOP
        EXECUTE format('CREATE TABLE many_%s (id int PRIMARY KEY)', i);
        EXECUTE format('INSERT INTO many_%s SELECT generate_series(1, 5)', i);
        PERFORM outbox.register_table(format('many_%s', i)::regclass, 'C');
    END LOOP;
END
$$;
SQL
batches=$(for i in $(seq 8); do echo "SELECT up FROM outbox.process_backfill_batch('many_$i', 2, true);"; done)
kill -STOP $REDIS_PID
start=$(date +%s%N)
out=$(q <<SQL
SET outbox.redis_command_timeout_ms = 700;
BEGIN;
$(for i in $(seq 8); do echo "SELECT outbox.set_processing_state('many_$i', 0, 1);"; done)
COMMIT;
SQL
)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "8 cursors at commit, Redis hung: one timeout, not eight ($ms ms)" bash -c "grep -q '8 backfill cursors were not moved' <<<'$out' && [ $ms -lt 2500 ]"
for signal in cancel terminate; do
    (q <<SQL >"$CLUSTER_DIR/$signal.out" 2>&1 &
SET outbox.redis_command_timeout_ms = 30000;
SET application_name = 'commit-$signal';
BEGIN;
$(for i in $(seq 8); do echo "SELECT outbox.set_processing_state('many_$i', 0, 1);"; done)
COMMIT;
SQL
)
    for _ in $(seq 100); do
        [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'commit-$signal' AND query = 'COMMIT;'")" = 1 ] && break
        sleep 0.05
    done
    sleep 0.3
    start=$(date +%s%N)
    q -c "SELECT pg_${signal}_backend(pid) FROM pg_stat_activity WHERE application_name = 'commit-$signal'" >/dev/null
    for _ in $(seq 100); do
        [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'commit-$signal' AND state = 'active'")" = 0 ] && break
        sleep 0.05
    done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    check "pg_${signal}_backend ends a COMMIT waiting on a hung Redis ($ms ms)" [ $ms -lt 2000 ]
done
kill -CONT $REDIS_PID
check "the commits committed (the cursor writes were given up with a WARNING)" grep -q "were not moved.*interrupted" "$CLUSTER_DIR/cancel.out"

# A hostile Redis value: the error shows its first 100 bytes, never all of it.
log_before=$(stat -c %s "$CLUSTER_DIR/server.log")
head -c 20000000 /dev/zero | tr '\0' 'x' | redis-cli -p "$REDIS_PORT" -x SET $key >/dev/null
out=$(q -c "SELECT * FROM outbox.process_backfill_batch('orgs', 2, true)")
check "a 20 MB value: a short error (${#out} bytes)" bash -c "grep -q '(20000000 bytes)' <<<'$out' && [ ${#out} -lt 2000 ]"
log_after=$(stat -c %s "$CLUSTER_DIR/server.log")
check "and a short log ($((log_after - log_before)) bytes)" [ $((log_after - log_before)) -lt 10000 ]

checks_done redis_cursor
