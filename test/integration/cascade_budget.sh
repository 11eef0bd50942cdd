#!/usr/bin/env bash
# The cascade and the backfill share the worker's per-minute budget fairly
# (issue 11): with 1,000 ids a minute and both full of work from the same
# commit, each gets half of the minute (the cascade's row walk covers 500
# child ids, the backfill 500 rows), and neither starves the other.  The
# checks run within the worker's first minute.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'cluster_stop' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 1000" \
    "outbox.database_name = postgres" "outbox.worker_enabled = off"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

# The users exist before their table is registered: the backfill, not
# capture, writes their outbox rows, and no live traffic uses the budget.
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 1);
SELECT outbox.register_cell('us');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop(outbox.message)');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
INSERT INTO auth_user SELECT g FROM generate_series(1, 5000) g;
CREATE TABLE member (id bigint PRIMARY KEY, user_id bigint NOT NULL);
CREATE INDEX ON member (user_id);
INSERT INTO member SELECT g, g FROM generate_series(1, 5000) g;
BEGIN;
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
SELECT outbox.set_option('outbox_replication.auth_user.replication_version', '1');
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
COMMIT;
SQL
# The worker from here on: a cycle that listed the foreign keys before the
# setup committed and the tables after it gave the backfill the whole
# minute (seen once in CI, under load).
q -c "ALTER SYSTEM SET outbox.worker_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
# Ids covered: the row walk's watermark (from id 0) and the worker's
# backfill total.
covered() {
    q -c "SELECT coalesce(f.row_watermark, 0) || ' ' || w.rows_backfilled
            FROM outbox.foreign_keys f, outbox.worker_status w"
}
check "both start" wait_for 30 \
    "SELECT f.row_watermark > 0 AND w.rows_backfilled > 0 FROM outbox.foreign_keys f, outbox.worker_status w" t ||
    { # Once seen under the sanitizers in CI (the backfill at 0): say why next time.
        q -x -c "SELECT * FROM outbox.worker_status" -c "SELECT * FROM outbox.backfill_status" >&2
        grep -v '^\s*$' "$CLUSTER_DIR/server.log" | tail -n 30 >&2
        show_worker
    }
sleep 2
read -r cascaded backfilled <<<"$(covered)"
# 501: a backfill batch of n ids spans n + 1, as Sentry's does.
check "half of the minute each: the cascade covered $cascaded ids, the backfill $backfilled" \
    [ "$cascaded $backfilled" = "500 501" ]
checks_done cascade_budget
