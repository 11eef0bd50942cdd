#!/usr/bin/env bash
# ALTER EXTENSION pg_outbox UPDATE from every earlier version gives the same
# objects as a fresh install, and keeps registrations and pending rows.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/cluster.sh"
trap cluster_stop EXIT
redis_start
cluster_start

source "$root/test/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
# Every object of the extension, described.
objects() {
    q -d "$1" <<'SQL'
SELECT md5(string_agg(d, E'\n' ORDER BY d)) FROM (
    SELECT pg_describe_object(classid, objid, objsubid) || ' ' ||
           coalesce(CASE WHEN classid = 'pg_proc'::regclass THEN pg_get_functiondef(objid) END, '') ||
           coalesce(CASE WHEN classid = 'pg_class'::regclass THEN
               (SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod), ',' ORDER BY attnum)
                  FROM pg_attribute WHERE attrelid = objid AND attnum > 0 AND NOT attisdropped) END, '') AS d
      FROM pg_depend
     WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
       AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_outbox')) o
SQL
}

versions=$(ls "$root"/extension/pg_outbox--*.sql | sed -n 's/.*pg_outbox--\([0-9.]*\)\.sql$/\1/p')
latest=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$root/extension/pg_outbox.control")
q -d postgres -c "CREATE DATABASE fresh" >/dev/null
q -d fresh -c "CREATE EXTENSION pg_outbox" >/dev/null
want=$(objects fresh)
for version in $versions; do
    [[ $version == "$latest" ]] && continue
    db="from_${version//./_}"
    q -d postgres -c "CREATE DATABASE $db" >/dev/null
    q -d "$db" >/dev/null <<SQL
CREATE EXTENSION pg_outbox VERSION '$version';
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE t (id int PRIMARY KEY, org int NOT NULL);
SELECT outbox.register_table('t', 'C', shard_column => 'org');
INSERT INTO t VALUES (1, 10);
ALTER EXTENSION pg_outbox UPDATE;
SQL
    check "$version -> $latest: the extension is at $latest" [ "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")" = "$latest" ]
    check "$version -> $latest: same objects as a fresh install" [ "$(objects "$db")" = "$want" ]
    q -d "$db" -c "INSERT INTO t VALUES (2, 20)" >/dev/null
    check "$version -> $latest: rows before and after the update are in the outbox" \
        [ "$(q -d "$db" -c "SELECT string_agg(object_identifier::text, ',' ORDER BY id) FROM outbox.cell_outbox")" = "1,2" ]
    q -d "$db" -c "SELECT outbox.set_replication_version('t', 2)" >/dev/null
    got=$(q -d "$db" -c "SELECT rows_written FROM outbox.process_backfill_batch('t', 10, true)")
    check "$version -> $latest: backfill works after the update ($got)" [ "$got" = 2 ]
done
checks_done upgrade
