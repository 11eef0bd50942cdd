#!/usr/bin/env bash
# DROP EXTENSION pg_outbox CASCADE while the worker is busy (300 changes to
# drain through a handler that takes 5 ms each), then CREATE EXTENSION and
# registration again, ROUNDS times: the DROP never meets a deadlock (it took
# its locks of the extension's tables one by one, and the worker's
# transactions theirs in another order: seen as "deadlock detected" in
# consumers.sh under the sanitizers), and the worker drains again after
# each.  No writer runs during the DROP: a writer of a registered table can
# deadlock with it whatever pg_outbox does (docs/operating.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
ROUNDS=${ROUNDS:-25}
trap cluster_stop EXIT
install_extension "$root"
redis_start
cluster_start "outbox.naptime = 10" "outbox.database_name = postgres" "deadlock_timeout = 100ms"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

# The handler takes the extension's type: made again with it.
setup() {
    q -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
CREATE FUNCTION replicate(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.005);
    INSERT INTO replica VALUES (m.object_identifier) ON CONFLICT DO NOTHING;
END $$;
SELECT outbox.register_handler('org_update', 'replicate(outbox.message)');
SELECT outbox.register_table('org', 'org_update');
SQL
}
q -c "CREATE TABLE org (id bigserial PRIMARY KEY, name text)" \
    -c "CREATE TABLE replica (id bigint PRIMARY KEY)" >/dev/null
setup >/dev/null

deadlocks=0 failed=0 draining=0
for round in $(seq "$ROUNDS"); do
    before=$(q -c "SELECT count(*) FROM replica")
    q -c "INSERT INTO org (name) SELECT 'o' FROM generate_series(1, 300)" >/dev/null
    # The worker under way (some delivered, about 1.5 s of work left).
    for _ in $(seq 100); do
        (($(q -c "SELECT count(*) FROM replica") > before)) && { draining=$((draining + 1)); break; }
        sleep 0.05
    done
    out=$(q -c "SET client_min_messages = warning" -c "DROP EXTENSION pg_outbox CASCADE")
    if [[ $out == *deadlock* ]]; then
        deadlocks=$((deadlocks + 1))
        continue
    elif [[ -n $out ]]; then
        failed=$((failed + 1))
        echo "  round $round: $out" >&2
        continue
    fi
    setup >/dev/null || { failed=$((failed + 1)); continue; }
done
check "DROP EXTENSION beside the busy worker: no deadlock in $ROUNDS rounds ($deadlocks)" \
    test "$deadlocks" = 0
check "nor any other error ($failed)" test "$failed" = 0
check "the worker was draining at each DROP, after each CREATE EXTENSION ($draining of $ROUNDS)" \
    test "$draining" = "$ROUNDS"
checks_done drop_extension
