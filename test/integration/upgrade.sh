#!/usr/bin/env bash
# Every released version, installed from its own full script (CREATE
# EXTENSION ... VERSION; make builds each from extension/released/ as it was
# released), upgraded with ALTER EXTENSION UPDATE (to the current version
# through the upgrade script make generates from extension/upgrade/ and
# extension/functions/), must equal a fresh install of the current version
# (extension/tables/ and extension/functions/): functions with every attribute, tables and their columns,
# constraints and indexes, views, types, sequences, grants, event triggers and
# what pg_dump keeps.  Registrations and pending rows survive the update.
# Last, the comparison is shown to fail on a deliberate mismatch of each kind.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
redis_start
cluster_start

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
# The extension described, one sorted line per property (ACLs sorted too: a
# grant's position in an ACL depends on the order of the GRANTs).
describe() {
    q -d "$1" <<'SQL'
WITH members AS (
    SELECT d.classid, d.objid, d.objsubid FROM pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_outbox')),
acl(oid, class, text) AS (
    SELECT p.oid, 'pg_proc'::regclass, (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a) FROM pg_proc p
    UNION ALL
    SELECT c.oid, 'pg_class'::regclass, (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(c.relacl) a) FROM pg_class c
    UNION ALL
    SELECT t.oid, 'pg_type'::regclass, (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(t.typacl) a) FROM pg_type t)
SELECT line FROM (
    SELECT 'member ' || pg_describe_object(m.classid, m.objid, m.objsubid) AS line FROM members m
    UNION ALL
    SELECT format('function %s owner %s acl %s%s%s', p.oid::regprocedure, p.proowner::regrole,
                  coalesce(a.text, 'default'), E'\n', pg_get_functiondef(p.oid))
      FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
      LEFT JOIN acl a ON a.class = 'pg_proc'::regclass AND a.oid = p.oid
    UNION ALL
    SELECT format('relation %s kind %s persistence %s owner %s acl %s options %s partition %s %s',
                  c.oid::regclass, c.relkind, c.relpersistence, c.relowner::regrole,
                  coalesce(a.text, 'default'), c.reloptions, pg_get_partkeydef(c.oid),
                  pg_get_expr(c.relpartbound, c.oid))
           || coalesce(E'\n  view ' || pg_get_viewdef(c.oid), '')
           || coalesce((SELECT string_agg(format(E'\n  column %s %s not null %s default %s',
                                                 t.attname, format_type(t.atttypid, t.atttypmod),
                                                 t.attnotnull, pg_get_expr(d.adbin, d.adrelid)),
                                          '' ORDER BY t.attnum)
                          FROM pg_attribute t
                          LEFT JOIN pg_attrdef d ON d.adrelid = t.attrelid AND d.adnum = t.attnum
                         WHERE t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped), '')
           || coalesce((SELECT string_agg(E'\n  constraint ' || k.conname || ' ' || pg_get_constraintdef(k.oid), '' ORDER BY k.conname)
                          FROM pg_constraint k WHERE k.conrelid = c.oid), '')
           || coalesce((SELECT string_agg(E'\n  index ' || pg_get_indexdef(i.indexrelid), '' ORDER BY i.indexrelid::regclass::text)
                          FROM pg_index i WHERE i.indrelid = c.oid), '')
           || coalesce((SELECT format(E'\n  sequence %s %s %s %s %s', s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqcache, s.seqcycle)
                          FROM pg_sequence s WHERE s.seqrelid = c.oid), '')
      FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
      LEFT JOIN acl a ON a.class = 'pg_class'::regclass AND a.oid = c.oid
    UNION ALL
    SELECT format('type %s owner %s acl %s', t.oid::regtype, t.typowner::regrole, coalesce(a.text, 'default'))
           || coalesce((SELECT string_agg(format(E'\n  attribute %s %s', x.attname, format_type(x.atttypid, x.atttypmod)), '' ORDER BY x.attnum)
                          FROM pg_attribute x WHERE x.attrelid = t.typrelid AND x.attnum > 0), '')
      FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
      LEFT JOIN acl a ON a.class = 'pg_type'::regclass AND a.oid = t.oid
    UNION ALL
    SELECT format('event trigger %s on %s enabled %s tags %s function %s owner %s', e.evtname,
                  e.evtevent, e.evtenabled, e.evttags, e.evtfoid::regprocedure, e.evtowner::regrole)
      FROM members m JOIN pg_event_trigger e ON m.classid = 'pg_event_trigger'::regclass AND e.oid = m.objid
    UNION ALL
    SELECT 'schema acl ' || (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(n.nspacl) a)
      FROM pg_namespace n WHERE n.nspname = 'outbox'
    UNION ALL
    SELECT 'pg_dump keeps ' || c::regclass || ' where ' || coalesce(w, '')
      FROM pg_extension x, unnest(x.extconfig, x.extcondition) AS u(c, w)
     WHERE x.extname = 'pg_outbox'
) o ORDER BY line;
SQL
}

versions=$(ls "$root"/extension/pg_outbox--*.sql | sed -n 's/.*pg_outbox--\([0-9.]*\)\.sql$/\1/p' | sort -V)
latest=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$root/extension/pg_outbox.control")
check "full scripts of 0.1.0 to 0.8.0 and of $latest are installed" \
    [ "$(echo $versions)" = "0.1.0 0.2.0 0.3.0 0.4.0 0.5.0 0.6.0 0.7.0 0.8.0 $latest" ]
q -d postgres -c "CREATE DATABASE fresh" >/dev/null
q -d fresh -c "CREATE EXTENSION pg_outbox" >/dev/null
describe fresh >"$CLUSTER_DIR/fresh.txt"
check "a fresh install is described ($(wc -l <"$CLUSTER_DIR/fresh.txt") lines)" \
    grep -q "^event trigger outbox_ddl_command_end" "$CLUSTER_DIR/fresh.txt"
for version in $versions; do
    [[ $version == "$latest" ]] && continue
    db="from_${version//./_}"
    q -d postgres -c "CREATE DATABASE $db" -c "ALTER DATABASE $db SET outbox.redis_key_prefix = '$db:'" >/dev/null
    out=$(q -d "$db" <<SQL
CREATE EXTENSION pg_outbox VERSION '$version';
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE t (id int PRIMARY KEY, org int NOT NULL);
SELECT outbox.register_table('t', 'C', shard_column => 'org', table_key => '$db');
INSERT INTO t VALUES (1, 10);
ALTER EXTENSION pg_outbox UPDATE;
SQL
)
    check "$version -> $latest: ALTER EXTENSION UPDATE ran" [ -z "$(grep ERROR <<<"$out")" ]
    check "$version -> $latest: the extension is at $latest" [ "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")" = "$latest" ]
    describe "$db" >"$CLUSTER_DIR/$db.txt"
    if ! diff -u "$CLUSTER_DIR/fresh.txt" "$CLUSTER_DIR/$db.txt" >"$CLUSTER_DIR/$db.diff"; then
        head -n 60 "$CLUSTER_DIR/$db.diff"
    fi
    check "$version -> $latest: same catalog as a fresh install" [ ! -s "$CLUSTER_DIR/$db.diff" ]
    q -d "$db" -c "INSERT INTO t VALUES (2, 20)" >/dev/null
    check "$version -> $latest: rows before and after the update are in the outbox" \
        [ "$(q -d "$db" -c "SELECT string_agg(object_identifier::text, ',' ORDER BY id) FROM outbox.cell_outbox")" = "1,2" ]
    q -d "$db" -c "SELECT outbox.set_replication_version('t', 2)" >/dev/null
    got=$(q -d "$db" -c "SELECT rows_written FROM outbox.process_backfill_batch('t', 10, true)")
    check "$version -> $latest: backfill works after the update ($got)" [ "$got" = 2 ]
done

# The comparison can fail: one deliberate mismatch of each kind it covers.
tamper() { # DESCRIPTION SQL
    q -d postgres -c "DROP DATABASE IF EXISTS tampered" -c "CREATE DATABASE tampered" >/dev/null
    q -d tampered -c "CREATE EXTENSION pg_outbox" -c "$2" >/dev/null
    describe tampered >"$CLUSTER_DIR/tampered.txt"
    check "a mismatch is found: $1" bash -c "! diff -q '$CLUSTER_DIR/fresh.txt' '$CLUSTER_DIR/tampered.txt' >/dev/null"
}
tamper "a grant" "GRANT EXECUTE ON FUNCTION outbox.drain(text) TO PUBLIC"
tamper "a function attribute" "ALTER FUNCTION outbox.get_option(text) SECURITY INVOKER"
tamper "a function body" "CREATE OR REPLACE FUNCTION outbox._check_id(id int, arg_name text) RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS 'BEGIN END'"
tamper "an event trigger" "ALTER EVENT TRIGGER outbox_sql_drop DISABLE"
tamper "a column default" "ALTER TABLE outbox.shard_errors ALTER COLUMN cell_name SET DEFAULT 'x'"
tamper "a view" "CREATE OR REPLACE VIEW outbox.backfill_status AS SELECT * FROM outbox._backfill_status() WHERE true"
tamper "an index" "CREATE INDEX ON outbox.options (value)"
tamper "the schema's grants" "GRANT CREATE ON SCHEMA outbox TO PUBLIC"
tamper "what pg_dump keeps" "UPDATE pg_catalog.pg_extension SET extcondition = array_replace(extcondition, '', 'WHERE false') WHERE extname = 'pg_outbox'"
checks_done upgrade
