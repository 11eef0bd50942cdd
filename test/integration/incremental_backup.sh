#!/usr/bin/env bash
# PostgreSQL 17's incremental backups (issue 48): a full base backup while
# outbox rows wait, more changes and a backfill's cursor after it, then an
# incremental backup, combined with pg_combinebackup and started as a new
# server with the worker on: every waiting outbox row and the backfill's
# cursor (in the table store) are there, the worker delivers every change,
# and capture works.  On 15 (no incremental backup) it says so and checks nothing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/test/harness/check.sh"
if ((PG_MAJOR < 17)); then
    echo "# PostgreSQL $PG_MAJOR has no incremental backup: nothing to check"
    exit 0
fi
restored=
cleanup() {
    [[ -n $restored ]] && _as_db_user "$PG_BIN/pg_ctl" -D "$restored" -m immediate stop >/dev/null 2>&1
    cluster_stop
}
trap cleanup EXIT
install_extension "$root"
redis_start
cluster_start "summarize_wal = on" "outbox.worker_enabled = off" "outbox.database_name = postgres" \
    "outbox.cursor_store = table" \
    "outbox.naptime = 50"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
CREATE TABLE org (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE replica (id bigint PRIMARY KEY, name text);
CREATE FUNCTION replicate(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO replica SELECT o.id, o.name FROM org o WHERE o.id = m.object_identifier
    ON CONFLICT (id) DO UPDATE SET name = excluded.name;
END $$;
SELECT outbox.register_handler('org_update', 'replicate(outbox.message)');
SELECT outbox.register_table('org', 'org_update');
INSERT INTO org SELECT g, 'org ' || g FROM generate_series(1, 1000) g;
SQL
backups=$CLUSTER_DIR/backups
mkdir "$backups" && chown postgres: "$backups" 2>/dev/null
_as_db_user "$PG_BIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$backups/full" -c fast
q -c "INSERT INTO org SELECT g, 'org ' || g FROM generate_series(1001, 2000) g" \
    -c "UPDATE org SET name = name || ' renamed' WHERE id <= 10" \
    -c "SELECT outbox.set_option('outbox_replication.org.replication_version', '2')" \
    -c "SELECT outbox.process_backfill_batch('org', 300, true)" >/dev/null
waiting=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
cursor=$(q -c "SELECT cursor_lower_bound FROM outbox.backfill_status WHERE table_key = 'org'")
_as_db_user "$PG_BIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$backups/incremental" \
    -c fast --incremental="$backups/full/backup_manifest"
check "pg_basebackup --incremental after the full backup" test -f "$backups/incremental/backup_manifest"
_as_db_user "$PG_BIN/pg_combinebackup" "$backups/full" "$backups/incremental" -o "$backups/combined"
check "pg_combinebackup combines them" test -f "$backups/combined/PG_VERSION"

# The original stopped (one server on its Redis prefix), the combined one
# started on its own port, its worker switched on once its state is read.
_as_db_user "$PG_BIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast stop >/dev/null
restored=$backups/combined
port=$(_free_port)
_as_db_user "$PG_BIN/pg_ctl" -D "$restored" -l "$backups/restored.log" -w \
    -o "-p $port" start >/dev/null
export PGPORT=$port
check "the restored server holds the $waiting waiting outbox rows" \
    test "$(q -c "SELECT count(*) FROM outbox.cell_outbox")" = "$waiting"
check "and the backfill's cursor ($cursor)" \
    test "$(q -c "SELECT cursor_lower_bound FROM outbox.backfill_status WHERE table_key = 'org'")" = "$cursor"
q -c "ALTER SYSTEM SET outbox.worker_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
check "the worker delivers all 2,000 rows" wait_for 60 "SELECT count(*) FROM replica" 2000
check "with the renames" wait_for 30 "SELECT count(*) FROM replica WHERE name LIKE '% renamed'" 10
q -c "INSERT INTO org VALUES (5000, 'after the restore')" >/dev/null
check "capture works on the restored server" \
    wait_for 30 "SELECT count(*) FROM replica WHERE id = 5000" 1
checks_done incremental_backup
