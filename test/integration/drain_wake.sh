#!/usr/bin/env bash
# Issue 32: the worker drains what a commit wrote at once, not at its next
# cycle (outbox.wake_on_commit), and does not read again and again rows
# nobody can take (delivery/partition_watch.hpp).  The cycle (naptime) is a
# minute here, so that whatever is delivered within seconds was woken by its
# commit; a partition read shows in pg_stat_all_tables.seq_scan (the outbox
# has no index: a read is a sequential scan).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
work=$(mktemp -d)
chmod 777 "$work"
trap 'kill $stream 2>/dev/null; cluster_stop; rm -rf "$work"' EXIT
stream=
redis_start
cluster_start "outbox.naptime = '1min'" "outbox.database_name = postgres" \
    "outbox.cursor_store = table" "autovacuum = off"
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
reads() { # partition reads of the cell outbox so far
    q -c "SELECT pg_stat_force_next_flush()" -c "SELECT sum(seq_scan) FROM pg_stat_all_tables WHERE relname LIKE 'cell_outbox_%'" | tail -1
}

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('AUDIT_LOG', 'ORGANIZATION_SCOPE', 2);
CREATE TABLE member (id bigint PRIMARY KEY, organization_id bigint NOT NULL);
CREATE TABLE audit_log (id bigint PRIMARY KEY, organization_id bigint NOT NULL);
-- created: the change's clock_timestamp(), when its payload has it.
CREATE TABLE delivered (category int, object_identifier bigint, created timestamptz,
                        at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION record(msg outbox.message) RETURNS void LANGUAGE sql AS $$
    INSERT INTO delivered (category, object_identifier, created)
    VALUES (msg.category, msg.object_identifier, (msg.payload->>'created_at')::timestamptz)
$$;
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id');
SELECT outbox.register_table('audit_log', 'AUDIT_LOG', shard_column => 'organization_id');
SELECT outbox.register_handler('MEMBER_UPDATE', 'record(outbox.message)');
SQL
check "the worker runs" wait_for 10 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" 1
# Its first cycle reads every partition once.
sleep 1

# 1. A commit wakes it.
q -c "INSERT INTO member VALUES (1, 7)" >/dev/null
check "a committed change reaches its handler within seconds, the cycle a minute away" \
    wait_for 5 "SELECT count(*) FROM delivered WHERE object_identifier = 1" 1
q -c "BEGIN" -c "INSERT INTO member VALUES (2, 7)" -c "ROLLBACK" >/dev/null
q -c "BEGIN" -c "SAVEPOINT s" -c "INSERT INTO member VALUES (3, 7)" -c "ROLLBACK TO s" \
  -c "INSERT INTO member VALUES (4, 8)" -c "COMMIT" >/dev/null
check "a rolled-back change is not delivered; a change after a rolled-back savepoint is" \
    wait_for 5 "SELECT string_agg(object_identifier::text, ',' ORDER BY object_identifier) FROM delivered" "1,4"
check "the outbox is empty" wait_for 5 "SELECT count(*) FROM outbox.cell_outbox" 0

# 2. Rows nobody takes are not read again.
q -c "INSERT INTO audit_log SELECT g, g % 100 FROM generate_series(1, 100000) g" >/dev/null
# A cycle asked for reads every partition; then cycles every 100 ms (the
# worker reports its reads at most once a second) read none for 3 s.
q -c "SELECT outbox.wake_worker()" -c "ALTER SYSTEM SET outbox.naptime = 100" \
  -c "SELECT pg_reload_conf()" >/dev/null
sleep 2.5
before=$(reads)
sleep 3
after=$(reads)
check "100,000 rows without handler: 30 cycles read no partition again ($before reads, then $after)" \
    [ "$before" = "$after" ]
q -c "INSERT INTO member VALUES (5, 7)" >/dev/null
check "a change among them is delivered at once" \
    wait_for 5 "SELECT count(*) FROM delivered WHERE object_identifier = 5" 1
sleep 2.5
after_one=$(reads)
check "by a read of its partition alone ($after reads, then $after_one)" [ $((after_one - after)) = 1 ]
check "the rows stay visible: shard_depth and metrics()" [ "$(q -c "SELECT sum(depth) FROM outbox.shard_depth WHERE silo = 'cell'") $(q -c "SELECT outbox.metrics()" | grep -c '^pg_outbox_depth{silo="cell"} 100000$')" = "100000 1" ]
q -c "ALTER SYSTEM SET outbox.naptime = '1min'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1

# 3. ... and delivered as soon as a handler takes them.
q -c "SELECT outbox.register_handler('AUDIT_LOG', 'record(outbox.message)')" >/dev/null
check "registering a handler delivers them within seconds" \
    wait_for 20 "SELECT count(*) FROM delivered WHERE category = 2" 100000 ||
    q -c "SELECT tableoid::regclass, count(*), min(scheduled_for - now()), max(scheduled_for - now()), count(DISTINCT shard_identifier) FROM outbox.cell_outbox GROUP BY 1" -c "SELECT * FROM outbox.shard_errors" >&2
check "and the outbox is empty" wait_for 5 "SELECT count(*) FROM outbox.cell_outbox" 0
q -c "SELECT outbox.unregister_handler('AUDIT_LOG')" -c "TRUNCATE delivered" >/dev/null

# 4. SQL that writes the outbox wakes it too (the statement trigger):
# a dead letter retried, a shard resumed.
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
      VALUES (0, 9, 1, 900)" >/dev/null
check "a row inserted into the outbox by SQL is delivered within seconds" \
    wait_for 5 "SELECT count(*) FROM delivered WHERE object_identifier = 900" 1
q -c "SELECT outbox.pause_shard('cell', 0, 11)" -c "INSERT INTO member VALUES (6, 11)" >/dev/null
sleep 2
check "a paused shard's change waits" [ "$(q -c "SELECT count(*) FROM delivered WHERE object_identifier = 6")" = 0 ]
q -c "SELECT outbox.resume_shard('cell', 0, 11)" >/dev/null
check "resumed, it is delivered within seconds" \
    wait_for 5 "SELECT count(*) FROM delivered WHERE object_identifier = 6" 1 ||
    { show_worker; q -c "SELECT tableoid::regclass, id, shard_identifier, object_identifier, scheduled_for - now() FROM outbox.cell_outbox WHERE category = 1" -c "SELECT * FROM outbox.paused_shards" >&2; }
check "the trigger function is a trigger function" \
    bash -c "psql -X -tA -v VERBOSITY=verbose -c 'SELECT outbox._drain_soon()' 2>&1 | grep -q '39P01: outbox._drain_soon() is a trigger function'"
q -c "CREATE TABLE t (x int)" >/dev/null
check "a trigger of it names a silo" bash -c "psql -X -tA -v VERBOSITY=verbose -c \"CREATE TRIGGER t AFTER INSERT ON t EXECUTE FUNCTION outbox._drain_soon('x')\" -c 'INSERT INTO t VALUES (1)' 2>&1 | grep -q \"39P01: outbox._drain_soon() takes one argument: 'cell', 'control', 'both' or 'handlers'\""

# 5. A failing handler: its shard backs off, is read again when due (not
# at every cycle before), and is delivered then.
q >/dev/null <<'SQL'
-- Fails for a second from now (a failure rolls back what the handler
-- wrote, so a count of attempts could not be kept).
CREATE TABLE failures (until timestamptz);
INSERT INTO failures VALUES (now() + interval '1 second');
CREATE FUNCTION flaky(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF clock_timestamp() < (SELECT until FROM failures) THEN
        RAISE EXCEPTION 'not yet';
    END IF;
    INSERT INTO delivered (category, object_identifier) VALUES (msg.category, msg.object_identifier);
END $$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'flaky(outbox.message)');
ALTER SYSTEM SET outbox.naptime = 100;
SELECT pg_reload_conf();
SQL
sleep 1
q -c "INSERT INTO member VALUES (7, 13)" >/dev/null
check "a failed message is delivered after its backoff" \
    wait_for 10 "SELECT count(*) FROM delivered WHERE object_identifier = 7" 1
check "its error is gone" wait_for 5 "SELECT count(*) FROM outbox.shard_errors" 0 ||
    q -c "SELECT * FROM outbox.shard_errors" >&2
q -c "SELECT outbox.register_handler('MEMBER_UPDATE', 'record(outbox.message)')" >/dev/null

# 6. A stream of commits does not starve the backfill: with a budget of
# 6,000 ids a minute, and 6,000 as the floor, it backfills 6,000 in the
# minute while 300 changes a second arrive and are delivered, at the
# default naptime (1 s; the cluster was started with a minute).
q >/dev/null <<'SQL'
ALTER SYSTEM SET outbox.backfill_rate_per_minute = 6000;
ALTER SYSTEM SET outbox.backfill_min_rate_per_minute = 6000;
ALTER SYSTEM SET outbox.naptime = '1s';
SELECT pg_reload_conf();
TRUNCATE delivered;
SELECT outbox.unregister_table('member');
ALTER TABLE member ADD COLUMN created_at timestamptz NOT NULL DEFAULT clock_timestamp();
INSERT INTO member SELECT g, g % 1000 FROM generate_series(100, 20099) g;
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{created_at}');
SQL
echo 'INSERT INTO member VALUES (1000000 + :client_id * 100000000 + nextval('"'"'stream'"'"'), (random() * 999)::int);' >"$work/insert.sql"
q -c "CREATE SEQUENCE stream" >/dev/null
"$PG_BIN/pgbench" -n -c 2 -j 2 -R 300 -T 15 -f "$work/insert.sql" >"$work/pgbench.log" 2>&1 &
stream=$!
sleep 1
q -c "SELECT outbox.set_replication_version('member', 2)" \
  -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
start=$SECONDS
check "under the stream, the backfill takes its 6,000 ids within 10 s" \
    wait_for 10 "SELECT rows_backfilled >= 6000 FROM outbox.worker_status" t ||
    q -c "SELECT now(), * FROM outbox.worker_status" -c "SELECT * FROM outbox.backfill_status" -c "SELECT state, wait_event, query, now() - state_change FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" >&2
wait $stream
stream=
check "the stream went at its rate" grep -Eq '^tps = (2[7-9][0-9]|3[01][0-9])[.]' "$work/pgbench.log"
check "and every change of the stream was delivered" \
    wait_for 10 "SELECT count(*) = (SELECT count(*) FROM member WHERE id >= 1000000) FROM delivered WHERE object_identifier >= 1000000" t
# A generous bound (bench/latency measures it): a worker that waited for
# its cycle would show about 1 s here.
check "commit to handler, p99 under 500 ms" [ "$(q -c "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY at - created) < interval '500 ms' FROM delivered WHERE object_identifier >= 1000000")" = t ]

# 7. Woken for rows no handler takes (SQL wrote them; there is no handler
# at all), the worker reads nothing and sleeps again: it does not keep
# waking up for them.  The backfill of section 6 goes first (it would go
# on at the next minute), and what the worker had under way settles.
q -c "SELECT outbox.unregister_table('member')" -c "SELECT outbox.unregister_handler('MEMBER_UPDATE')" \
  -c "ALTER SYSTEM SET outbox.naptime = '1min'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 3
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
      VALUES (0, 9, 1, 901)" >/dev/null
sleep 1
commits() { q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
c0=$(commits)
sleep 2
c1=$(commits)
check "no handler: the worker is idle, not woken again and again ($((c1 - c0)) commits in 2 s)" \
    [ $((c1 - c0)) -lt 20 ]

checks_done drain_wake
