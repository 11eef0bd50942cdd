#!/usr/bin/env bash
# An organization of 100,000 rows exported from one cluster and imported
# into another with the commands of docs/relocation.md, the importing
# session killed (kill -9) in the middle of a chunk, the CALL repeated:
# every row there once (none twice, none missing), every reference inside
# the organization rewritten to the target's keys, the target's own rows
# untouched, capture fired for each imported row, the compare without a
# finding, and a cancel that leaves the target as it was.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
source_dir= source_port=
stop_both() {
    cluster_stop
    if [[ -n $source_dir ]]; then CLUSTER_DIR=$source_dir cluster_stop; fi
    rm -f "$export_file"
}
export_file=$(mktemp)
trap stop_both EXIT
relocation=5e1f0c1a-0000-4000-8000-000000000001

redis_start
cluster_start "outbox.worker_enabled = off"
source_dir=$CLUSTER_DIR source_port=$PGPORT
q >/dev/null -c "CREATE EXTENSION pg_outbox" -f "$root/test/harness/organization_schema.sql" \
    -f "$root/test/harness/organization_data.sql" || exit 1
# One environment makes the target's trigger sleep: the kill comes while
# its chunk is being written.
check "one environment is slow" test "$(q -c "UPDATE environment SET name = 'slow' WHERE id = (SELECT max(e.id) FROM environment e
        JOIN project p ON p.id = e.project_id WHERE p.organization_id = 1 AND p.id < 3000) RETURNING name")" = slow
CLUSTER_DIR=
cluster_start "outbox.worker_enabled = off"
# The target: the same tables, registered for capture, with an
# organization of its own whose keys the import must not reuse.
q >/dev/null -c "CREATE EXTENSION pg_outbox" -f "$root/test/harness/organization_schema.sql" || exit 1
q >/dev/null <<'SQL' || exit 1
SELECT outbox.register_scope('Organization', 0);
SELECT outbox.register_category('project_update', 'Organization', 0);
SELECT outbox.register_cell('us');
SELECT outbox.register_table('project', 'project_update', 'cell', shard_column => 'organization_id');
INSERT INTO organization (slug, plan_id) VALUES ('local', 1);
INSERT INTO project (organization_id, slug) SELECT 1, 'local ' || i FROM generate_series(1, 500) i;
CREATE FUNCTION slow_environment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name = 'slow' THEN PERFORM pg_catalog.pg_sleep(3); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow_environment BEFORE INSERT ON environment
    FOR EACH ROW EXECUTE FUNCTION slow_environment();
SQL
local_projects=$(q -c "SELECT string_agg(id || ':' || slug, ',' ORDER BY id) FROM project")

# The docs' commands: export in the source, load and import in the target.
PGPORT=$source_port PGHOST=$source_dir psql -X -v ON_ERROR_STOP=1 -c "COPY (SELECT '$relocation', e.* FROM outbox.export_organizations('{1}') e ORDER BY e.ordinal) TO STDOUT" >"$export_file"
rows=$(($(wc -l <"$export_file") - 1))
check "the export has about 100,000 rows ($rows)" test "$rows" -ge 95000
q -c "\\copy outbox.relocation_rows FROM '$export_file'" >/dev/null
t0=$(date +%s%N)
q -c "CALL outbox.import_organizations('$relocation')" >/dev/null &
importer=$!
pid=
for _ in $(seq 300); do
    pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE 'CALL outbox.import%'")
    [[ -n $pid ]] && break
    sleep 0.1
done
check "the import reaches the slow environment" test -n "$pid"
before=$(q -c "SELECT count(*) FROM outbox.import_chunks")
kill -9 "$pid"
wait "$importer"
for _ in $(seq 100); do q -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
echo "# killed the importing backend after $before chunks"
check "chunks were committed before the kill" test "$before" -gt 0
check "the state says importing, with the rows done" test "$(q -c "SELECT state, rows_done > 0, rows_total FROM outbox.relocations")" = "importing|t|$rows"
check "what the killed chunk wrote is gone" test "$(q -c "
    SELECT (SELECT count(*) FROM environment) = (SELECT coalesce(sum(rows_written), 0) FROM outbox.import_chunks WHERE table_key = 'environment' AND step = 'insert')")" = t

t1=$(date +%s%N)
q -c "CALL outbox.import_organizations('$relocation')" >/dev/null
t2=$(date +%s%N)
echo "# import: $(((t2 - t1) / 1000000)) ms for the rest after the kill"
check "the import is done" test "$(q -c "SELECT state, rows_done, rows_total FROM outbox.relocations")" = "imported|$rows|$rows"
check "the chunks cover every row once" test "$(q -c "
    SELECT sum(last_ordinal - first_ordinal + 1) = $rows AND count(*) = count(DISTINCT first_ordinal)
           AND NOT EXISTS (SELECT FROM outbox.import_chunks a JOIN outbox.import_chunks b
                             ON a.step = b.step AND a.first_ordinal < b.first_ordinal
                            AND b.first_ordinal <= a.last_ordinal)
      FROM outbox.import_chunks WHERE step = 'insert'")" = t
check "every row there once: counts per table as the manifest's" test "$(q -c "
    SELECT count(*) FROM outbox.relocation_rows s, jsonb_each_text(s.fields->'tables') t
     WHERE s.model = 'pg_outbox.manifest'
       AND t.value::bigint <> (SELECT count(*) FROM outbox.relocation_pk_map m WHERE m.table_key = t.key)")" = 0
check "the target holds the imported rows and its own" test "$(q -c "
    SELECT (SELECT count(*) FROM project) = 500 + (SELECT count(*) FROM outbox.relocation_pk_map WHERE table_key = 'project')
       AND (SELECT count(*) FROM event) = (SELECT count(*) FROM outbox.relocation_pk_map WHERE table_key = 'event')
       AND (SELECT count(*) FROM environment WHERE name = 'slow') = 1")" = t
check "the target's own rows are untouched" test "$(q -c "SELECT string_agg(id || ':' || slug, ',' ORDER BY id) FROM project WHERE organization_id = 1")" = "$local_projects"
new_org=$(q -c "SELECT new FROM outbox.relocation_pk_map WHERE table_key = 'organization'")
check "every reference inside the organization is rewritten" test "$(q -c "
    SELECT (SELECT count(*) FROM project p LEFT JOIN team t ON t.id = p.team_id LEFT JOIN project q ON q.id = p.parent_id
             WHERE p.organization_id = $new_org
               AND (t.organization_id IS DISTINCT FROM (CASE WHEN p.team_id IS NULL THEN NULL ELSE $new_org END)
                    OR q.organization_id IS DISTINCT FROM (CASE WHEN p.parent_id IS NULL THEN NULL ELSE $new_org END)))
         + (SELECT count(*) FROM dashboard d JOIN widget w ON w.id = d.default_widget_id WHERE w.dashboard_id <> d.id)
         + (SELECT count(*) FROM alert_rule a JOIN project p ON p.id = a.project_id LEFT JOIN member m ON m.id = a.owner_id
             WHERE p.organization_id <> $new_org OR m.organization_id <> $new_org)")" = 0
check "the cycles' columns are set" test "$(q -c "SELECT count(*) FROM dashboard WHERE default_widget_id IS NOT NULL")" = \
    "$(grep -c '"default_widget_id": [0-9]' "$export_file")"
check "capture fired for each imported project" test "$(q -c "
    SELECT count(DISTINCT object_identifier) FROM outbox.cell_outbox WHERE shard_identifier = $new_org")" = \
    "$(q -c "SELECT count(*) FROM project WHERE organization_id = $new_org")"
check "the users' ids are kept (this cell shares the source's control)" test "$(q -c "
    SELECT count(*) FROM member m JOIN outbox.relocation_pk_map k ON k.table_key = 'member' AND k.new = m.id
      JOIN outbox.relocation_rows s ON s.model = 'member' AND s.pk = k.old
     WHERE m.user_id <> (s.fields->>'user_id')::bigint")" = 0

t3=$(date +%s%N)
findings=$(q -c "SELECT count(*) FROM outbox.compare_relocation('$relocation')")
t4=$(date +%s%N)
echo "# compare: $(((t4 - t3) / 1000000)) ms"
check "the compare finds nothing" test "$findings" = 0
check "and the relocation is complete" test "$(q -c "SELECT state FROM outbox.relocations")" = complete
# A field an application trigger would have changed is found.
q -c "UPDATE widget SET title = 'edited' WHERE id = (SELECT max(id) FROM widget)" >/dev/null
check "a changed field is a finding, with its table and column" test \
    "$(q -c "SELECT table_key || '.' || column_name FROM outbox.compare_relocation('$relocation')")" = widget.title

captured=$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier = $new_org")
projects=$(q -c "SELECT count(*) FROM project WHERE organization_id = $new_org")
with_parent=$(q -c "SELECT count(*) FROM project WHERE organization_id = $new_org AND parent_id IS NOT NULL")
deleted=$(q -c "SELECT outbox.cancel_relocation('$relocation')")
check "cancel removes every imported row ($deleted)" test "$deleted" = "$rows"
check "capture records the cancel's deletions of projects" test \
    "$(q -c "SELECT count(*) - $captured >= $projects FROM outbox.cell_outbox WHERE shard_identifier = $new_org")" = t
check "  ... and clears the cycles' columns of the rows that had one set only ($with_parent of $projects projects)" test \
    "$(q -c "SELECT count(*) - $captured FROM outbox.cell_outbox WHERE shard_identifier = $new_org")" = "$((projects + with_parent))"
check "and leaves the target as it was" test "$(q -c "
    SELECT (SELECT count(*) FROM organization) || ' ' || (SELECT count(*) FROM project) || ' '
           || (SELECT count(*) FROM event) || ' ' || (SELECT count(*) FROM dashboard)")" = "1 500 0 0"
check "the relocation is cancelled" test "$(q -c "SELECT state FROM outbox.relocations")" = cancelled

# Two sessions CALL the same import at once: each chunk is taken by one.
again=5e1f0c1a-0000-4000-8000-000000000002
sed "s/^$relocation/$again/" "$export_file" | q -c "\\copy outbox.relocation_rows FROM pstdin" >/dev/null
q -c "DROP TRIGGER slow_environment ON environment" >/dev/null
q -c "CALL outbox.import_organizations('$again')" >/dev/null &
first=$!
q -c "CALL outbox.import_organizations('$again')" >/dev/null
wait $first
check "two concurrent CALLs import it once" test "$(q -c "
    SELECT (SELECT state FROM outbox.relocations WHERE relocation = '$again') || ' '
           || (SELECT sum(last_ordinal - first_ordinal + 1) FROM outbox.import_chunks
                WHERE relocation = '$again' AND step = 'insert') || ' '
           || (SELECT count(*) FROM event) || ' '
           || (SELECT count(*) FROM outbox.relocation_pk_map WHERE relocation = '$again' AND table_key = 'event')")" \
    = "imported $rows $(grep -c $'\tevent\t' "$export_file") $(grep -c $'\tevent\t' "$export_file")"

# A pause stops a CALL under way at the end of its chunk; a CALL resumes.
paused=5e1f0c1a-0000-4000-8000-000000000003
q -c "SELECT outbox.cancel_relocation('$again')" >/dev/null
sed "s/^$relocation/$paused/" "$export_file" | q -c "\\copy outbox.relocation_rows FROM pstdin" >/dev/null
q -c "CALL outbox.import_organizations('$paused')" >"$export_file.call" 2>&1 &
caller=$!
for _ in $(seq 100); do
    [[ $(q -c "SELECT count(*) > 3 FROM outbox.import_chunks WHERE relocation = '$paused'") == t ]] && break
    sleep 0.05
done
q -c "SELECT outbox.pause_relocation('$paused')" >/dev/null
wait $caller
check "a pause ends the CALL under way, part of the way" test "$(q -c "
    SELECT state || ' ' || (rows_done < rows_total)::text FROM outbox.relocations WHERE relocation = '$paused'")" = "paused true"
check "saying so" grep -q "is paused; CALL the import again" "$export_file.call"
q -c "CALL outbox.import_organizations('$paused')" >/dev/null
check "a CALL resumes it to the end" test "$(q -c "
    SELECT state || ' ' || rows_done FROM outbox.relocations WHERE relocation = '$paused'")" = "imported $rows"
check "and the compare finds nothing" test "$(q -c "SELECT count(*) FROM outbox.compare_relocation('$paused')")" = 0
rm -f "$export_file.call"
checks_done relocation_import
