#!/usr/bin/env bash
# The registry, options and undelivered outbox rows survive pg_dump and
# pg_restore, the restore itself writes no outbox rows, and capture works in
# the restored database.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
cluster_start

q() { psql -X -q -v ON_ERROR_STOP=1 -tA "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

q -d postgres -c "CREATE DATABASE src"
q -d src >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORG_UPDATE', 'ORGANIZATION_SCOPE', 4);
SELECT outbox.register_category('TOKEN_UPDATE', 'ORGANIZATION_SCOPE', 5);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');
CREATE TABLE orgs (id bigint PRIMARY KEY, org_id bigint NOT NULL, name text);
SELECT outbox.register_table('orgs', 'ORG_UPDATE', shard_column => 'org_id',
                             payload_columns => '{name}', replication_version => 2);
CREATE TABLE tokens (id int PRIMARY KEY, cell text NOT NULL);
SELECT outbox.register_table('tokens', 'TOKEN_UPDATE', 'control', cell_column => 'cell',
                             table_key => 'api_tokens');
CREATE TABLE parts (id int PRIMARY KEY) PARTITION BY RANGE (id);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (100);
CREATE TABLE parts_2 PARTITION OF parts FOR VALUES FROM (100) TO (200);
SELECT outbox.register_table('parts', 'ORG_UPDATE');
SELECT outbox.set_option('outbox_replication.orgs.replication_version', '2');
INSERT INTO orgs SELECT g, g % 3, 'org ' || g FROM generate_series(1, 10) g;
INSERT INTO tokens VALUES (1, 'us'), (2, 'de');
INSERT INTO parts VALUES (1), (150);
SQL

fingerprint() {
    q -d "$1" <<'SQL'
SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
    SELECT 'scope ' || s::text AS x FROM outbox.scopes s
    UNION ALL SELECT 'category ' || c::text FROM outbox.categories c
    UNION ALL SELECT 'cell ' || c::text FROM outbox.cells c
    UNION ALL SELECT 'table ' || t::text FROM outbox.tables t
    UNION ALL SELECT 'option ' || o::text FROM outbox.options o
    UNION ALL SELECT 'cell_outbox ' || o::text FROM outbox.cell_outbox o
    UNION ALL SELECT 'control_outbox ' || o::text FROM outbox.control_outbox o
    UNION ALL SELECT 'trigger ' || tgrelid::regclass || ' ' || tgname || ' ' || tgenabled::text
      FROM pg_trigger WHERE tgname LIKE 'outbox%') f
SQL
}

before=$(fingerprint src)
dump=$CLUSTER_DIR/src.dump
pg_dump -Fc -d src -f "$dump"
q -d postgres -c "CREATE DATABASE dst"
pg_restore --exit-on-error -d dst "$dump" || fail "pg_restore failed"
after=$(fingerprint dst)
[[ $before == "$after" ]] || fail "registry, options, outbox rows or triggers differ after restore"
echo "restored state matches ($after)"

# Capture works in the restored database, ids continue after the old ones.
cell_max=$(q -d dst -c "SELECT max(id) FROM outbox.cell_outbox")
control_max=$(q -d dst -c "SELECT max(id) FROM outbox.control_outbox")
q -d dst <<'SQL'
INSERT INTO orgs VALUES (11, 7, 'after restore');
UPDATE tokens SET cell = 'us' WHERE id = 2;
INSERT INTO parts VALUES (160);
TRUNCATE parts_1;
SQL
got=$(q -d dst -c "SELECT count(*) FROM outbox.cell_outbox WHERE object_identifier = 11 AND shard_identifier = 7 AND category = 4 AND payload = '{\"name\": \"after restore\"}' AND id > $cell_max")
[[ $got == 1 ]] || fail "no outbox row for the insert after restore ($got)"
got=$(q -d dst -c "SELECT string_agg(cell_name, ',' ORDER BY cell_name) FROM outbox.control_outbox WHERE object_identifier = 2 AND id > $control_max")
[[ $got == "de,us" ]] || fail "control capture after restore wrote '$got'"
got=$(q -d dst -c "SELECT string_agg(object_identifier::text, ',' ORDER BY id) FROM outbox.cell_outbox WHERE category = 4 AND object_identifier IN (1, 160) AND shard_identifier = object_identifier AND id > $cell_max")
[[ $got == "160,1" ]] || fail "partition capture after restore wrote '$got'"
echo "capture works after restore"
