#!/usr/bin/env bash
# The worker's cached registry (src/registry/table_meta.cpp) against a
# registration that commits while the worker reads its very first registry:
# the worker took its snapshot before the commit and met the commit's
# invalidation only afterwards, on the lock of the table it read next.  It
# once kept that registry, without the new handler, as valid until some
# other registration came: README's tour then waited for its backfill's
# rows forever (seen in CI).  Here a session holds outbox.handlers while a
# fresh worker starts, so the worker stops right inside that window.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
hold=$(mktemp -u)
trap 'exec 7>&- 2>/dev/null; rm -f "$hold"; cluster_stop' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.database_name = postgres"
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE member (id bigint PRIMARY KEY, organization_id bigint NOT NULL);
CREATE TABLE member_replica (id bigint PRIMARY KEY);
CREATE FUNCTION replicate_member(msg outbox.message) RETURNS void LANGUAGE sql AS
    $$ INSERT INTO member_replica VALUES (msg.object_identifier) ON CONFLICT DO NOTHING $$;
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id');
INSERT INTO member SELECT g, g % 3 FROM generate_series(1, 30) g;
SQL
check "the worker runs" wait_for 10 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" 1

# The handler's registration holds outbox.handlers until it commits.
mkfifo "$hold"
psql -X -q -v ON_ERROR_STOP=1 <"$hold" >/dev/null 2>&1 &
exec 7>"$hold"
echo "BEGIN; LOCK TABLE outbox.handlers IN ACCESS EXCLUSIVE MODE;
      SELECT outbox.register_handler('MEMBER_UPDATE', 'replicate_member(outbox.message)');" >&7
old=$(worker_pid)
q -c "SELECT pg_terminate_backend($old)" >/dev/null
waiting="SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE a.backend_type = 'pg_outbox worker' AND NOT l.granted
            AND l.relation = 'outbox.handlers'::regclass"
check "a fresh worker waits for outbox.handlers in its first registry read" wait_for 20 "$waiting" 1
echo "COMMIT;" >&7
exec 7>&-
check "it delivers through the handler committed meanwhile" wait_for 20 \
    "SELECT count(*) FROM member_replica" 30 || show_worker
check "and the outbox drains" wait_for 10 "SELECT count(*) FROM outbox.cell_outbox" 0

checks_done worker_registry
