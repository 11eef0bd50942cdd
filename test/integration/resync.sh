#!/usr/bin/env bash
# Targeted re-sync run by the worker (issue 49):
#   1. a replica corrupted by hand is repaired by a re-sync of exactly its
#      organization, across three tables, parents first; no other
#      organization's row is sent;
#   2. the hot-shard guard holds the organization's shard at its bound
#      while the shard cannot drain, and the job shows itself throttled;
#   3. a range job of 30,000 rows survives the worker SIGKILLed and Redis
#      restarted without its data (the job starts over, saying so), and
#      every row is delivered;
#   4. cancel stops a job for good; the cursor of a job that ended (done or
#      cancelled) is deleted;
#   5. a batch that fails (its table locked past outbox.owner_lock_timeout)
#      is retried with a growing pause, its error in last_error and
#      worker_status, and the job completes once the lock is gone.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'cluster_stop' EXIT
redis_start
BOUND=${BOUND:-500}
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 100000000" \
    "outbox.database_name = postgres" "outbox.backfill_max_shard_depth = $BOUND"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('project_update', 'Org', 1);
SELECT outbox.register_category('member_update', 'Org', 2);
-- The replica a handler keeps, and every message it was handed.
CREATE TABLE replica (category int, object bigint, payload jsonb, PRIMARY KEY (category, object));
CREATE TABLE seen (seq bigserial, category int, object bigint, shard bigint);
CREATE FUNCTION apply(m outbox.message) RETURNS void LANGUAGE sql AS $$
    INSERT INTO seen (category, object, shard)
    VALUES (m.category, m.object_identifier, m.shard_identifier);
    INSERT INTO replica VALUES (m.category, m.object_identifier, m.payload)
    ON CONFLICT (category, object) DO UPDATE SET payload = excluded.payload;
$$;
SELECT outbox.register_handler(c, 'apply(outbox.message)')
  FROM unnest(ARRAY['org_update', 'project_update', 'member_update']) c;
CREATE TABLE org (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE project (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES org, name text);
CREATE TABLE member (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES project,
                     org_id bigint NOT NULL, name text);
SELECT outbox.register_table('org', 'org_update', payload_columns => '{name}');
SELECT outbox.register_table('project', 'project_update', shard_column => 'org_id',
                             payload_columns => '{name}');
SELECT outbox.register_table('member', 'member_update', shard_column => 'org_id',
                             payload_columns => '{name}');
SELECT outbox.set_relocation_scope(t, '{Organization}')
  FROM unnest(ARRAY['org', 'project', 'member']::regclass[]) t;
SELECT outbox.set_relocation_root('Organization', 'org');
-- 20 organizations of 5 projects of 10 members; organization 7 has 5,000
-- more members in one project (the hot shard of part 2).
INSERT INTO org SELECT g, 'org ' || g FROM generate_series(1, 20) g;
INSERT INTO project SELECT g, (g - 1) / 5 + 1, 'project ' || g FROM generate_series(1, 100) g;
INSERT INTO member SELECT g, (g - 1) / 10 + 1, ((g - 1) / 10) / 5 + 1, 'member ' || g
  FROM generate_series(1, 1000) g;
INSERT INTO member SELECT 1000 + g, 31, 7, 'hot ' || g FROM generate_series(1, 5000) g;
SQL
check "the worker delivers the initial rows into the replica" wait_for 120 \
    "SELECT count(*) FROM replica" 6120

# 1. A replica corrupted by hand: organization 3's rows changed and one
# deleted; organization 4's changed too, and left so (a re-sync of 3 must
# not touch it).
q >/dev/null <<'SQL'
UPDATE replica SET payload = '{"name": "corrupt"}'
 WHERE (category = 0 AND object IN (3, 4))
    OR (category = 1 AND object IN (SELECT id FROM project WHERE org_id IN (3, 4)))
    OR (category = 2 AND object IN (SELECT id FROM member WHERE org_id IN (3, 4) AND id % 3 = 0));
DELETE FROM replica WHERE category = 2 AND object = 105;
TRUNCATE seen;
SQL
corrupt4=$(q -c "SELECT count(*) FROM replica WHERE payload = '{\"name\": \"corrupt\"}'
    AND (category = 0 AND object = 4 OR category > 0 AND object IN
         (SELECT id FROM project WHERE org_id = 4 UNION ALL SELECT id FROM member WHERE org_id = 4))")
job=$(q -c "SELECT outbox.resync_organization(3)")
check "the organization's job is done" wait_for 60 \
    "SELECT state || ' ' || rows_done || '/' || rows_total FROM outbox.resyncs WHERE job = $job" \
    "done 56/56"
check "organization 3 is repaired: every row as in the source" [ "$(q -c "
    SELECT count(*) FROM (
        SELECT 0, id, jsonb_build_object('name', name) FROM org WHERE id = 3
        UNION ALL SELECT 1, id, jsonb_build_object('name', name) FROM project WHERE org_id = 3
        UNION ALL SELECT 2, id, jsonb_build_object('name', name) FROM member WHERE org_id = 3
        EXCEPT SELECT category, object, payload FROM replica) missing")" = 0 ]
check "exactly its 56 rows were sent, each once" \
    [ "$(q -c "SELECT count(*) || ' ' || count(DISTINCT (category, object)) FROM seen")" = "56 56" ]
check "none of another organization (one shard: organization 3's)" \
    [ "$(q -c "SELECT count(*) FROM seen WHERE shard <> 3")" = 0 ]
check "parents first: the organization, then its projects, then its members" [ "$(q -c "
    SELECT (SELECT max(seq) FROM seen WHERE category = 0) < (SELECT min(seq) FROM seen WHERE category = 1)
       AND (SELECT max(seq) FROM seen WHERE category = 1) < (SELECT min(seq) FROM seen WHERE category = 2)")" = t ]
check "organization 4 stays as corrupted ($corrupt4 rows, not sent)" \
    [ "$(q -c "SELECT count(*) FROM replica WHERE payload = '{\"name\": \"corrupt\"}'")" = "$corrupt4" ]
check "the done job's cursor is gone from Redis" \
    [ "$(redis-cli -p "$REDIS_PORT" exists "outbox_resync.$job")" = 0 ]

# 2. The guard: organization 7's shard paused (it cannot drain) holds the
# job at the bound plus one batch; resumed, the job completes.
depth() { q -c "SELECT count(*) FROM outbox.cell_outbox WHERE shard_scope = 0 AND shard_identifier = 7"; }
q -c "SELECT outbox.pause_shard('cell', 0, 7)" >/dev/null
q -c "TRUNCATE seen" >/dev/null
rows7=$(q -c "SELECT 1 + (SELECT count(*) FROM project WHERE org_id = 7) + (SELECT count(*) FROM member WHERE org_id = 7)")
job=$(q -c "SELECT outbox.resync_organization(7)")
check "the hot shard paused: the job is throttled" wait_for 60 \
    "SELECT throttled FROM outbox.resyncs WHERE job = $job" t
sleep 1
held=$(depth)
check "the shard held at the bound plus at most one batch ($held rows)" \
    [ "$held" -ge "$BOUND" -a "$held" -le $((2 * BOUND)) ]
check "rows left are shown" [ "$(q -c "SELECT rows_left > 0 AND state = 'running' FROM outbox.resyncs WHERE job = $job")" = t ]
q -c "SELECT outbox.resume_shard('cell', 0, 7)" >/dev/null
deepest=$held
deadline=$((SECONDS + 120))
while ((SECONDS < deadline)); do
    d=$(depth)
    ((d > deepest)) && deepest=$d
    [[ $(q -c "SELECT state FROM outbox.resyncs WHERE job = $job") == done ]] && break
    sleep 0.1
done
check "the job completes" [ "$(q -c "SELECT state || ' ' || rows_done FROM outbox.resyncs WHERE job = $job")" = "done $rows7" ]
check "the shard never went past the bound plus one batch (deepest: $deepest)" \
    [ "$deepest" -le $((2 * BOUND)) ]
check "every row of organization 7 delivered" wait_for 60 \
    "SELECT count(DISTINCT (category, object)) FROM seen" "$rows7"

# 3. A range job over 30,000 new members, the worker SIGKILLed a third of
# the way and Redis restarted without its data two thirds of the way.
q -c "INSERT INTO member SELECT 10000 + g, 1 + g % 100, 1 + (g % 100) / 5, 'new ' || g
        FROM generate_series(1, 30000) g" >/dev/null
check "the new members delivered" wait_for 180 "SELECT count(*) FROM replica WHERE category = 2" 36000
q -c "TRUNCATE seen" >/dev/null
job=$(q -c "SELECT outbox.resync('member', 10001, 40000)")
killed=0 restarted=0
deadline=$((SECONDS + 300))
while ((SECONDS < deadline)); do
    done_rows=$(q -c "SELECT rows_done FROM outbox.resyncs WHERE job = $job")
    # (The server restarts after the worker's SIGKILL: no answer for a while.)
    [[ $done_rows =~ ^[0-9]+$ ]] || { sleep 0.2; continue; }
    if ((killed == 0 && done_rows > 10000)); then
        kill -KILL "$(worker_pid)"
        killed=1
    fi
    if ((killed == 1 && restarted == 0 && done_rows > 20000)); then
        kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
        sleep 2
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
            >/dev/null 2>&1 &
        REDIS_PID=$!
        restarted=1
    fi
    [[ $(q -c "SELECT state FROM outbox.resyncs WHERE job = $job") == done ]] && break
    sleep 0.2
done
check "the worker was killed and Redis restarted on the way" [ "$killed$restarted" = 11 ]
check "the range job completes" [ "$(q -c "SELECT state FROM outbox.resyncs WHERE job = $job")" = done ]
check "every member of the range delivered" wait_for 120 \
    "SELECT count(DISTINCT object) FROM seen WHERE category = 2 AND object BETWEEN 10001 AND 40000" 30000
check "the lost cursor was logged: the job started over" \
    grep -q "re-sync job $job lost its cursor (key resync.$job); it starts over" "$CLUSTER_DIR/server.log"

# 4. Cancel: the job writes nothing more.
q -c "SELECT outbox.pause_shard('cell', 0, 1)" >/dev/null
job=$(q -c "SELECT outbox.resync_shard('member', 0, 1)")
check "a shard job under way" wait_for 60 "SELECT throttled FROM outbox.resyncs WHERE job = $job" t
q -c "SELECT outbox.cancel_resync($job)" >/dev/null
before=$(q -c "SELECT outbox_rows FROM outbox.resyncs WHERE job = $job")
q -c "SELECT outbox.resume_shard('cell', 0, 1)" >/dev/null
sleep 2
check "cancelled: no more rows written, its rows gone" [ "$(q -c "
    SELECT state || ' ' || (outbox_rows = $before) || ' ' || (SELECT count(*) FROM outbox.resync_rows r WHERE r.job = $job)
      FROM outbox.resyncs WHERE job = $job")" = "cancelled true 0" ]
check "and its cursor, once the cancel committed" \
    [ "$(redis-cli -p "$REDIS_PORT" exists "outbox_resync.$job")" = 0 ]

# 5. A failing batch, retried: member locked for 6 s by another session
# (owner_lock_timeout: 1 s).  The job is paused while the lock is taken.
job=$(q -c "SELECT outbox.resync_organization(9)")
q -c "SELECT outbox.pause_resync($job)" >/dev/null
psql -X -q -c "BEGIN" -c "LOCK TABLE member IN ACCESS EXCLUSIVE MODE" -c "SELECT pg_sleep(6)" \
    -c "COMMIT" >/dev/null 2>&1 &
locker=$!
wait_for 10 "SELECT count(*) FROM pg_locks WHERE relation = 'member'::regclass AND granted
             AND mode = 'AccessExclusiveLock'" 1
q -c "SELECT outbox.resume_resync($job)" >/dev/null
check "the failing job shows why, still running" wait_for 30 \
    "SELECT state || ': ' || last_error FROM outbox.resyncs WHERE job = $job" \
    "running: could not lock table member within outbox.owner_lock_timeout (1000 ms)"
check "and so does worker_status" wait_for 10 \
    "SELECT last_error LIKE '%re-sync job $job%could not lock table member%' FROM outbox.worker_status" t
failures() { grep -c "re-sync job $job failed" "$CLUSTER_DIR/server.log"; }
first=$(grep -m1 -A1 "re-sync job $job failed" "$CLUSTER_DIR/server.log" | grep -o "retried in [0-9]* s")
check "retried with a growing pause ($first, then 2 s)" \
    bash -c "for _ in \$(seq 100); do grep -A1 're-sync job $job failed' '$CLUSTER_DIR/server.log' | grep -q 'retried in 2 s' && exit 0; sleep 0.1; done; exit 1"
wait "$locker"
check "the lock gone, the job completes and its error clears" wait_for 30 \
    "SELECT state || ' ' || (last_error IS NULL) || ' ' || (rows_done = rows_total) FROM outbox.resyncs WHERE job = $job" \
    "done true true"
check "after $(failures) failed attempts, not one per cycle" [ "$(failures)" -le 5 ]
checks_done resync
