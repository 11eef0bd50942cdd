#!/usr/bin/env bash
# Consumers outside the database, as real processes: the Python consumer of
# consumer/outbox_consumer.py (through consumer_process.py, which records
# each delivery in the table delivered), next to the background worker.
#   1. two consumers (one claiming ahead) and the worker on the same
#      category under a stream of writes: each shard served by one of them
#      at a time, in order, and every change delivered; the worker on
#      another category meanwhile; a consumer claiming ahead stopped in the
#      middle gives back both the batch in hand and the one claimed ahead;
#   2. a consumer SIGKILLed mid-batch: its messages wait in the outbox and
#      nothing of its shards is delivered before its lease ends, then
#      everything is (again, for those it had handled: at least once);
#   3. a completion after the lease ended is refused, and the rows stay;
#   4. failures back the shard off (shard_depth shows the error), then
#      max_attempts moves the message to the dead letters and the shard
#      goes on;
#   5. LISTEN/NOTIFY wake-ups: commit-to-handler latency with a poll of 60 s,
#      claiming ahead and not;
#   6. bad tokens and a role without CONSUME, over real connections;
#   7. a claim after the extension was dropped and created again in the
#      same session.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/consumer_cluster.sh" "outbox.naptime = 100" "outbox.database_name = postgres"
CONSUMER_CATEGORIES=org_update

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
CREATE TABLE orgs (id bigint PRIMARY KEY, seq int NOT NULL DEFAULT 0,
                   written_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('orgs', 'org_update', 'cell', shard_column => 'id',
                             payload_columns => '{seq,written_at}');
CREATE TABLE users (id bigint PRIMARY KEY, org_id bigint NOT NULL);
SELECT outbox.register_table('users', 'user_update', 'cell', shard_column => 'org_id');
CREATE TABLE delivered (n bigserial, consumer text, shard bigint, object bigint, seq int,
                        written_at timestamptz, started timestamptz, finished timestamptz,
                        at timestamptz DEFAULT clock_timestamp());
CREATE ROLE consumer LOGIN;
CREATE ROLE bystander LOGIN;
SELECT outbox.grant_category('org_update', 'consumer', 'CONSUME');
-- The worker's handlers: user_update always, org_update in part 1.
CREATE FUNCTION by_worker(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_sleep(0.002);
    INSERT INTO delivered (consumer, shard, object, seq, started, finished)
    VALUES ('worker', m.shard_identifier, m.object_identifier, (m.payload->>'seq')::int, t,
            clock_timestamp());
END $$;
SELECT outbox.register_handler('user_update', 'by_worker(outbox.message)');
SELECT outbox.register_handler('org_update', 'by_worker(outbox.message)');
SQL

# 1. 40 organisations, each written 15 times by a writer, while two
# consumers (5 ms a message, claims of 20; two claims ahead) and the worker
# all serve org_update; 200 users changes go to the worker alone.
consumer one DELAY=0.005 BATCH=20
consumer two DELAY=0.005 BATCH=20 CLAIM_AHEAD=1
(for seq in $(seq 1 15); do
    q -c "INSERT INTO orgs (id, seq) SELECT g, $seq FROM generate_series(1, 40) g
          ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, written_at = clock_timestamp()" >/dev/null
    q -c "INSERT INTO users SELECT g, g % 7 FROM generate_series($seq * 100, $seq * 100 + 12) g" >/dev/null
    sleep 0.1
done) &
writer=$!
wait $writer
check "every organisation's last change is delivered" wait_for 60 \
    "SELECT count(*) FROM (SELECT shard FROM delivered WHERE shard BETWEEN 1 AND 40 GROUP BY shard HAVING max(seq) = 15) s" 40
check "the outbox is drained" wait_for 30 "SELECT count(*) FROM outbox.cell_outbox" 0
check "both consumers and the worker served org_update" \
    [ "$(q -c "SELECT string_agg(DISTINCT consumer, ',' ORDER BY consumer) FROM delivered WHERE shard BETWEEN 1 AND 40")" = "one,two,worker" ]
check "per shard, changes arrive in order, none twice" \
    [ "$(q -c "SELECT count(*) FROM (SELECT seq <= lag(seq) OVER (PARTITION BY shard ORDER BY n) AS bad
               FROM delivered WHERE shard BETWEEN 1 AND 40) s WHERE bad")" = 0 ]
check "no shard was handled by two of them at once" \
    [ "$(q -c "SELECT count(*) FROM delivered a JOIN delivered b ON a.shard = b.shard AND a.n < b.n
               AND a.consumer <> b.consumer AND b.started < a.finished AND a.started < b.finished
               WHERE a.shard BETWEEN 1 AND 40")" = 0 ]
check "the worker delivered every users change meanwhile" \
    [ "$(q -c "SELECT count(DISTINCT object) FROM delivered WHERE consumer = 'worker' AND object >= 100 AND shard < 7")" = 195 ]
# Every row counted once as processed; messages (delivered) are fewer
# when a consumer falls behind and coalesces an organisation's changes
# (a sanitizer run on a busy machine: "delivered >= 600" failed).
check "outbox.stats counts the consumers' rows, deliveries and lag" wait_for 10 \
    "SELECT processed >= 600 AND delivered BETWEEN 40 AND processed AND lag_p99 IS NOT NULL
       FROM outbox.stats WHERE category_name = 'org_update'" t
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
check "SIGTERM: both consumers stop cleanly" [ "$(cat "$logs/one.err" "$logs/two.err")" = "" ]
pids=()

q -c "SELECT outbox.unregister_handler('org_update')" >/dev/null

# A consumer claiming ahead (batches of 5, 0.2 s a message), stopped with
# SIGTERM in the middle: it completes what it handled and gives back the
# rest of its batch and the batches it claimed ahead, whose leases would
# otherwise hold those shards for 30 s.  One ahead, then three: the claims
# go on one after the other while the batch in hand is handled, until
# three wait.
for n in 1 3; do
    q -c "INSERT INTO orgs (id, seq) SELECT g, $n FROM generate_series(2001, 2020) g
          ON CONFLICT (id) DO UPDATE SET seq = excluded.seq" >/dev/null
    consumer ahead$n DELAY=0.2 BATCH=5 CLAIM_AHEAD=$n
    ahead=$!
    check "the consumer claiming $n ahead starts on its batch" wait_for 30 \
        "SELECT count(*) >= 1 FROM delivered WHERE object BETWEEN 2001 AND 2020" t
    check "it holds $((n + 1)) batches: the one in hand and $n claimed ahead" wait_for 10 \
        "SELECT count(*) FROM outbox.consumer_claims WHERE NOT released AND lease_until > now()" \
        $((5 * (n + 1)))
    kill -TERM $ahead
    wait $ahead 2>/dev/null
    check "stopped, it holds no shard: all $((n + 1)) batches given back" \
        [ "$(q -c "SELECT count(*) FROM outbox.consumer_claims WHERE NOT released AND lease_until > now()")" = 0 ]
    check "what it handled is delivered, the rest waits in the outbox" \
        [ "$(q -c "SELECT (SELECT count(*) FROM delivered WHERE object BETWEEN 2001 AND 2020)
                          + (SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier BETWEEN 2001 AND 2020)")" = 20 ]
    check "and it stopped cleanly" [ "$(cat "$logs/ahead$n.err")" = "" ]
    pids=()
    q -c "DELETE FROM outbox.cell_outbox WHERE shard_identifier BETWEEN 2001 AND 2020" >/dev/null
    q -c "DELETE FROM delivered WHERE object BETWEEN 2001 AND 2020" >/dev/null
done

# 2. A consumer killed with SIGKILL in the middle of a batch of 20
# messages (0.3 s each, lease 3 s): its shards stay held until the lease
# ends, then another consumer delivers all of them.
q -c "TRUNCATE delivered" >/dev/null
q -c "INSERT INTO orgs (id, seq) SELECT g, 1 FROM generate_series(1001, 1020) g" >/dev/null
consumer killed DELAY=0.3 BATCH=20 LEASE='3 seconds'
victim=$!
check "the consumer starts on its batch" wait_for 30 "SELECT count(*) >= 2 FROM delivered" t
kill -KILL $victim
wait $victim 2>/dev/null
lease_end=$(q -c "SELECT max(lease_until) FROM outbox.consumer_claims")
before=$(q -c "SELECT count(*) FROM delivered")
check "killed after $before messages: all 20 wait in the outbox, their shards held" \
    [ "$(q -c "SELECT count(*) || ' ' || (SELECT count(*) FROM outbox.consumer_claims WHERE lease_until > now())
               FROM outbox.cell_outbox WHERE shard_identifier BETWEEN 1001 AND 1020")" = "20 20" ]
consumer rescuer BATCH=20 POLL=0.2
check "after the lease, every message is delivered" wait_for 30 \
    "SELECT count(DISTINCT object) FROM delivered WHERE object BETWEEN 1001 AND 1020" 20
check "nothing of the killed consumer's shards was delivered before its lease ended" \
    [ "$(q -c "SELECT count(*) FROM delivered WHERE consumer = 'rescuer' AND started < '$lease_end'")" = 0 ]
check "the outbox is empty again" wait_for 10 "SELECT count(*) FROM outbox.cell_outbox" 0

# 3. A handler slower than the lease: its completion is refused, and the
# message stays in the outbox to be delivered again.
q -c "TRUNCATE delivered" >/dev/null
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()
consumer late DELAY=1.5 LEASE='1 second' POLL=0.2
q -c "INSERT INTO orgs (id, seq) VALUES (2000, 1)" >/dev/null
check "the late completion is refused" wait_for 30 \
    "SELECT count(*) >= 2 FROM delivered WHERE object = 2000" t
check "the consumer says why" grep -q "the lease of claim .* ended" "$logs/late.err"
check "the row stays in the outbox" \
    [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier = 2000")" = 1 ]
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()
q -c "DELETE FROM outbox.cell_outbox WHERE shard_identifier = 2000" >/dev/null
# A handler that fails after its lease ended: fail() is refused as well,
# logged, and the consumer goes on (0.9.0's died of the 55000).
consumer late_failure FAIL_OBJECTS=2500 FAIL_AFTER=1.5 LEASE='1 second' POLL=0.2
late_pid=$!
q -c "INSERT INTO orgs (id, seq) VALUES (2500, 1)" >/dev/null
wait_log() { # SECONDS PATTERN FILE
    local deadline=$((SECONDS + $1))
    while ((SECONDS < deadline)); do
        grep -q "$2" "$3" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
check "a late failure is refused, and the consumer says why" \
    wait_log 30 'failure refused.*the lease of claim .* ended' "$logs/late_failure.err"
q -c "INSERT INTO orgs (id, seq) VALUES (2501, 1)" >/dev/null
check "and the consumer goes on: it delivers the next message" wait_for 30 \
    "SELECT count(*) FROM delivered WHERE object = 2501" 1
check "still running" kill -0 "$late_pid"
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()
q -c "DELETE FROM outbox.cell_outbox WHERE shard_identifier IN (2500, 2501)" >/dev/null

# 4. Failures: the shard backs off with the error in shard_depth; with
# max_attempts 2 the second failure moves the message to the dead letters,
# and the message behind it in the shard is delivered.
consumer failing FAIL_OBJECTS=3000 POLL=0.2
q -c "INSERT INTO orgs (id, seq) VALUES (3000, 1)" >/dev/null
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
      VALUES (0, 3000, 0, 3001, '{\"seq\": 1}')" >/dev/null
check "the failure backs the shard off, with the error in shard_depth" wait_for 30 \
    "SELECT state || ' ' || object_identifier || ' ' || last_error FROM outbox.shard_depth WHERE shard_identifier = 3000" \
    "backed_off 3000 RuntimeError('receiver refused object 3000')"
check "the message behind it waits" \
    [ "$(q -c "SELECT count(*) FROM delivered WHERE object = 3001")" = 0 ]
q -c "SELECT outbox.set_max_attempts('org_update', 2)" >/dev/null
q -c "SELECT outbox.retry_shard('cell', 0, 3000)" >/dev/null
check "the next failure moves it to the dead letters" wait_for 30 \
    "SELECT object_identifier || ' ' || (attempts >= 2) FROM outbox.dead_letters" "3000 true"
check "and the shard goes on" wait_for 30 "SELECT count(*) FROM delivered WHERE object = 3001" 1
check "outbox.stats counts every failure" \
    [ "$(q -c "SELECT handler_errors = (SELECT attempts FROM outbox.dead_letters)
               FROM outbox.stats WHERE category_name = 'org_update'")" = t ]
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()

# 5. Wake-ups: a consumer that polls once a minute sees each of 30 commits
# (one every 100 ms) through LISTEN/NOTIFY; claiming ahead, its LISTEN is on
# the connection that claims.
for ahead in 0 1; do
    q -c "TRUNCATE delivered" >/dev/null
    consumer listening$ahead POLL=60 CLAIM_AHEAD=$ahead
    mode=$([[ $ahead == 1 ]] && echo ", claiming ahead" || true)
    sleep 1
    for i in $(seq 1 30); do
        q -c "INSERT INTO orgs (id, seq) VALUES (4000 + $ahead * 100 + $i, 1)" >/dev/null
        sleep 0.1
    done
    check "every commit reaches the idle consumer$mode" wait_for 30 \
        "SELECT count(*) FROM delivered WHERE object > 4000" 30
    latency=$(q -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)) || ' ms p50, '
                        || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)) || ' ms p99'
                    FROM (SELECT extract(epoch FROM started - written_at) * 1000 AS ms
                            FROM delivered WHERE object > 4000) s")
    check "commit to handler within a second, not a poll$mode ($latency)" \
        [ "$(q -c "SELECT max(started - written_at) < interval '1 second' FROM delivered WHERE object > 4000")" = t ]
    kill -TERM "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    pids=()
done

# 6. Over real connections: a made-up token, and a role without CONSUME.
check "a made-up token is refused" \
    bash -c "psql -X -tA -d '$(dsn consumer)' -c 'SELECT outbox.complete(array[42])' 2>&1 | grep -q 'claim 42 is not held'"
env NAME=intruder OUTBOX_DSN="$(dsn bystander)" RECORD_DSN="$(dsn postgres)" CATEGORIES=org_update \
    timeout 20 "$PYTHON" "$root/test/harness/consumer_process.py" >/dev/null 2>"$logs/intruder.err"
check "a role without CONSUME cannot consume" grep -q "permission denied to consume category 'org_update'" "$logs/intruder.err"
check "nor read the outbox" \
    bash -c "psql -X -tA -d '$(dsn bystander)' -c 'SELECT count(*) FROM outbox.cell_outbox' 2>&1 | grep -q 'permission denied'"

# 7. The extension dropped and created again within one session that has
# claimed before: its next claim records its lease with the new table
# (the kept plan of the old one named a row type that is gone: an ERROR).
# Once, in CI's sanitizer pass, that claim returned no message, with no
# error (the cause was not found); what this checks is the kept plan, so
# the claim is tried again in the same session, a transaction each, for up
# to 6 s, and the label says after how many tries.
reclaimed=$(q -v ON_ERROR_STOP=1 <<'SQL' | tail -1
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
VALUES (0, 9001, 0, 9001);
SELECT count(*) FROM outbox.claim(10, '3 s', '{org_update}');
DROP EXTENSION pg_outbox CASCADE;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
VALUES (0, 9002, 0, 9002);
CREATE TEMP TABLE reclaim (tries int, messages bigint);
DO $$
DECLARE
    messages bigint;
BEGIN
    FOR tries IN 1..30 LOOP
        SELECT count(*) INTO messages FROM outbox.claim(10, '3 s', '{org_update}');
        IF messages > 0 OR tries = 30 THEN
            INSERT INTO reclaim VALUES (tries, messages);
            EXIT;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.2);
    END LOOP;
END $$;
SELECT messages || ' message, try ' || tries FROM reclaim;
SQL
)
check "a claim after the extension was made again in the session records its lease ($reclaimed)" \
    test "${reclaimed%%,*}" = "1 message"

checks_done consumers
