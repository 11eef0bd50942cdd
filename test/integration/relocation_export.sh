#!/usr/bin/env bash
# An organization of 100,000 rows over ten tables exported with the psql
# one-liner of docs/relocation.md while a client keeps adding projects and
# their environments to it: the file's manifest verifies (counts and
# checksum, recomputed after a COPY back in), every reference inside the
# file resolves (one snapshot: a row added after the export read the
# projects never appears without its project), nothing of the other
# organization comes along, and how long the export held its snapshot.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'kill $writer 2>/dev/null; cluster_stop' EXIT
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
writer=

redis_start
cluster_start "outbox.worker_enabled = off"
q >/dev/null -c "CREATE EXTENSION pg_outbox" -c "CREATE TABLE stop_writer ()" \
    -c "SELECT outbox.set_relocation_scope('stop_writer', '{Excluded}')" \
    -f "$root/test/harness/organization_schema.sql" -f "$root/test/harness/organization_data.sql"
rows=$(q -c "SELECT count(*) - 1 FROM outbox.export_organizations('{1}')")
check "the organization has about 100,000 rows ($rows)" test "$rows" -ge 95000
check "the model check has nothing to say" test -z "$(q -c "SELECT * FROM outbox.check_models()")"

# A client adds a project per transaction and moves an environment to it,
# all through the export: read with a snapshot of its own, the environment
# would refer to a project the export read before it existed.
q -c "DO \$\$ BEGIN FOR i IN 1..1000000 LOOP
        WITH p AS (INSERT INTO project (organization_id, slug) VALUES (1, 'new') RETURNING id)
        UPDATE environment SET project_id = (SELECT id FROM p)
         WHERE id = 3 * (1 + 2 * (i % 1999)) + 1; -- an environment of organization 1
        COMMIT; EXIT WHEN EXISTS (SELECT FROM stop_writer);
      END LOOP; END \$\$" >/dev/null &
writer=$!
sleep 0.5
export_file=$(mktemp)
start=$(q -c "SELECT clock_timestamp()")
t0=$(date +%s%N)
# The docs' one-liner.
psql -X -v ON_ERROR_STOP=1 -c "COPY (SELECT ordinal, model, pk, fields FROM outbox.export_organizations('{1}') ORDER BY ordinal) TO STDOUT" >"$export_file"
t1=$(date +%s%N)
end=$(q -c "SELECT clock_timestamp()")
q -c "INSERT INTO stop_writer DEFAULT VALUES" >/dev/null
wait $writer
echo "# export of $(wc -l <"$export_file") lines ($(du -h "$export_file" | cut -f1)) in $(((t1 - t0) / 1000000)) ms"
added=$(q -c "SELECT count(*) FROM project WHERE slug = 'new' AND created_at BETWEEN '$start' AND '$end'")
check "the client committed projects during the export ($added)" test "$added" -gt 0

q >/dev/null -c "CREATE TABLE loaded (ordinal bigint, model text, pk bigint, fields jsonb)"
q >/dev/null -c "\\copy loaded FROM '$export_file'"
verify="SELECT (SELECT encode(sha256(convert_to(string_agg(format(E'%s\t%s\t%s\t%s\n', ordinal, model, pk, fields), '' ORDER BY ordinal), 'UTF8')), 'hex')
                  FROM loaded WHERE model <> 'pg_outbox.manifest')
             = (SELECT fields->>'checksum' FROM loaded WHERE model = 'pg_outbox.manifest')
           AND NOT EXISTS (SELECT FROM loaded m, jsonb_each_text(m.fields->'tables') t
                            WHERE m.model = 'pg_outbox.manifest'
                              AND t.value::bigint <> (SELECT count(*) FROM loaded e WHERE e.model = t.key))"
check "the file's manifest verifies (checksum and counts)" test "$(q -c "$verify")" = t
check "every environment's project is in the file" test "$(q -c "
    SELECT count(*) FROM loaded e WHERE e.model = 'environment'
       AND NOT EXISTS (SELECT FROM loaded p WHERE p.model = 'project' AND p.pk = (e.fields->>'project_id')::bigint)")" = 0
check "every reference inside the file resolves" test "$(q -c "
    WITH fk AS (SELECT k.conrelid::regclass::text AS child, k.confrelid::regclass::text AS parent, a.attname::text AS col
                  FROM pg_constraint k JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
                 WHERE k.contype = 'f' AND k.conparentid = 0 AND k.confrelid <> 'plan'::regclass)
    SELECT count(*) FROM loaded c JOIN fk ON fk.child = c.model
     WHERE c.fields->>fk.col IS NOT NULL
       AND NOT EXISTS (SELECT FROM loaded p WHERE p.model = fk.parent AND p.pk = (c.fields->>fk.col)::bigint)")" = 0
check "nothing of the other organization" test "$(q -c "
    SELECT count(*) FROM loaded WHERE fields->>'organization_id' = '2'
        OR (model = 'organization' AND pk <> 1)")" = 0
q -c "UPDATE loaded SET fields = fields || '{\"slug\": \"evil\"}' WHERE ordinal = (SELECT min(ordinal) FROM loaded WHERE model = 'project')" >/dev/null
check "an edited row fails the checksum" test "$(q -c "$verify")" = f
rm -f "$export_file"
checks_done relocation_export
