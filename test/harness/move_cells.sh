# Moving organizations between cells, the setup of the tests that do
# (test/integration/relocation_move*.sh): three clusters (cells.sh), the
# organization schema in us and eu (organization_schema.sql; capture of
# organization and project, whose messages control's handler records),
# control's link role allowed to drive moves, an application role
# move_app; organization 1 (about 20,000 rows) and 2 in us, 3 in eu, whose
# ids are from a range of its own (a move keeps primary keys); control
# placing them and referring to organization 1 across silos.  Source it
# with MOVE_ROOT set, then: move_cells_setup (or move_cells_schema, the
# same without rows); start_writer ORGS RATE
# (move_writer.py in the background, $writer, logging to $work/writes
# until $work/stop exists); hold_moves_at STEP; state_of NAME SQL; rows_of ORG, rows_of_1 and
# fingerprint_of_1 (SQL); move_cells_stop (the EXIT trap).

source "$(dirname "${BASH_SOURCE[0]}")/cells.sh"
PYTHON=/usr/bin/python3 # Debian's, with python3-psycopg2
work=$(mktemp -d)
writer=
move_cells_stop() {
    if [[ -n $writer ]]; then kill "$writer" 2>/dev/null; fi
    cells_stop
    rm -rf "$work"
    return 0 # an EXIT trap's status is the script's under set -e
}

# The clusters, the schema and the roles, without rows.
move_cells_schema() {
    cells_start "$@" || return 1
    CELLS_OWN_TABLES=1 cells_setup || return 1
    local cell
    for cell in control us eu; do
        on "$cell" -c "SELECT outbox.register_category('PROJECT_UPDATE', 'Organization', 5)" >/dev/null || return 1
    done
    on control -c "SELECT outbox.register_handler('PROJECT_UPDATE', 'apply(outbox.message)')" >/dev/null || return 1
    for cell in us eu; do
        on "$cell" -f "$MOVE_ROOT/test/harness/organization_schema.sql" >/dev/null || return 1
        on "$cell" >/dev/null <<'SQL' || return 1
SELECT outbox.register_table('organization', 'ORGANIZATION_UPDATE', 'cell', shard_column => 'id',
                             payload_columns => '{slug}');
SELECT outbox.register_table('project', 'PROJECT_UPDATE', 'cell', shard_column => 'organization_id',
                             payload_columns => '{slug}');
GRANT EXECUTE ON FUNCTION outbox.relocation_peer TO outbox_link_control;
CREATE ROLE move_app LOGIN;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO move_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO move_app;
SQL
    done
    # A cell asks control whether it recorded a move it is told to
    # prepare, logged in there as its own link role (docs/relocation.md).
    on control -c "GRANT EXECUTE ON FUNCTION outbox.relocation_peer TO outbox_link_us, outbox_link_eu" >/dev/null || return 1
    # Placed before any row is written: control takes a cell's messages
    # only for the organizations it places in that cell (issue 46), and a
    # refused batch backs the link off.
    on control -c "SELECT outbox.set_organization_cell(1, 'us'), outbox.set_organization_cell(2, 'us'),
                          outbox.set_organization_cell(3, 'eu')" >/dev/null || return 1
    cat >"$work/env" <<EOF
CONTROL_DSN='host=${CELL_DIR[control]} port=${CELL_PORT[control]} user=postgres dbname=postgres'
CELL_DSN_us='host=${CELL_DIR[us]} port=${CELL_PORT[us]} user=move_app dbname=postgres'
CELL_DSN_eu='host=${CELL_DIR[eu]} port=${CELL_PORT[eu]} user=move_app dbname=postgres'
EOF
}

move_cells_setup() {
    move_cells_schema "$@" || return 1
    on us >/dev/null <<'SQL' || return 1
INSERT INTO organization VALUES (1, 'acme', 2), (2, 'globex', 1);
INSERT INTO team SELECT i, 1 + i % 2, 'team ' || i FROM generate_series(1, 40) i;
INSERT INTO project (id, organization_id, team_id, slug)
SELECT i, CASE WHEN i <= 720 THEN 1 ELSE 2 END, CASE WHEN i % 3 = 0 THEN NULL ELSE 2 + 2 * (i % 20) END, 'p' || i
  FROM generate_series(1, 800) i;
UPDATE project SET team_id = NULL WHERE organization_id = 2;
UPDATE project SET parent_id = id - 2 WHERE id > 2 AND id % 5 = 0 AND id <> 721 AND id <> 722;
INSERT INTO environment (project_id, name) SELECT p, e FROM generate_series(1, 800) p, unnest('{prod,dev}'::text[]) e;
INSERT INTO event SELECT i, 1 + i % 800, 'event ' || i FROM generate_series(1, 18000) i;
INSERT INTO member SELECT i, CASE WHEN i <= 300 THEN 1 ELSE 2 END, 100 + i FROM generate_series(1, 330) i;
INSERT INTO dashboard SELECT i, CASE WHEN i <= 90 THEN 1 ELSE 2 END, NULL FROM generate_series(1, 100) i;
INSERT INTO widget SELECT i, 1 + i % 100, 'w' || i FROM generate_series(1, 400) i;
UPDATE dashboard SET default_widget_id = id + 99 WHERE id % 2 = 0;
INSERT INTO alert_rule SELECT i, 1 + i % 800, CASE WHEN i % 2 = 0 AND 1 + i % 800 <= 720 THEN 1 + i % 300 END
  FROM generate_series(1, 1600) i;
SELECT setval(pg_get_serial_sequence(t, 'id'), 1000000)
  FROM unnest('{organization,team,project,environment,event,member,dashboard,widget,alert_rule}'::text[]) t;
SQL
    on eu >/dev/null <<'SQL' || return 1
SELECT setval(pg_get_serial_sequence(t, 'id'), 5000000)
  FROM unnest('{organization,team,project,environment,event,member,dashboard,widget,alert_rule}'::text[]) t;
INSERT INTO organization (id, slug, plan_id) VALUES (3, 'initech', 1);
INSERT INTO project (organization_id, slug) VALUES (3, 'eu-project');
SQL
    on control >/dev/null <<'SQL' || return 1
CREATE TABLE org_audit (id bigint PRIMARY KEY, organization_id bigint NOT NULL);
CREATE INDEX ON org_audit (organization_id);
SELECT outbox.register_foreign_key('org_audit', 'organization_id', 'organization', 'CASCADE');
INSERT INTO org_audit VALUES (1, 1), (2, 2);
SQL
}

# hold_moves_at STEP: control pauses each move as it reaches STEP (at
# catch_up: before its fence, the target has the rows and is fenced, the
# source logs changes); DROP TRIGGER hold_at_STEP ON
# outbox.organization_moves lets the next ones go on.
hold_moves_at() {
    on control >/dev/null <<SQL
CREATE OR REPLACE FUNCTION public.hold_move() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    NEW.state := 'paused';
    RETURN NEW;
END \$\$;
CREATE TRIGGER hold_at_$1 BEFORE UPDATE ON outbox.organization_moves FOR EACH ROW
    WHEN (OLD.step <> NEW.step AND NEW.step = '$1') EXECUTE FUNCTION public.hold_move();
SQL
}

start_writer() { # ORGS RATE (LATENCY=FILE: each write's wait, move_writer.py; its sessions' application_name: writer <ORGS>)
    (set -a; source "$work/env"; ORGS=$1 RATE=$2 LOG=$work/writes STOP=$work/stop LATENCY=${LATENCY:-} \
        PGAPPNAME="writer $1" \
        exec "$PYTHON" "$MOVE_ROOT/test/harness/move_writer.py") 2>>"$work/writer.err" &
    writer=$!
}

# show_move RELOCATION: what a move that waited in vain was doing, on
# stderr: control's row of it, the source's and target's, the source's
# outbox by shard, its paused shards, each worker's and link's status.
show_move() {
    {
        on control -c "SELECT 'control: ' || row_to_json(o)::text FROM outbox.organization_moves o WHERE relocation = '$1'"
        local name
        for name in us eu; do
            on "$name" -c "SELECT '$name: ' || row_to_json(o)::text FROM outbox.organization_moves o WHERE relocation = '$1'"
            on "$name" -c "SELECT format('$name outbox: shard %s/%s category %s: %s rows, ids %s-%s, due in %s', shard_scope, shard_identifier, category, count(*), min(id), max(id), min(scheduled_for) - now()) FROM outbox.cell_outbox GROUP BY shard_scope, shard_identifier, category"
            on "$name" -c "SELECT '$name paused: ' || row_to_json(p)::text FROM outbox.paused_shards p"
            on "$name" -c "SELECT '$name worker_status: ' || row_to_json(w)::text FROM outbox.worker_status w"
            on "$name" -c "SELECT '$name link_status: ' || row_to_json(s)::text FROM outbox.link_status s"
        done
        on control -c "SELECT 'control worker_status: ' || row_to_json(w)::text FROM outbox.worker_status w"
        date -u '+clock: %H:%M:%S.%N'
    } >&2 2>&1
    return 0
}

state_of() { # NAME SQL: the SQLSTATE the statement raises there, or ok
    on "$1" -c "DO \$do\$ BEGIN EXECUTE \$q\$$2\$q\$; RAISE NOTICE 'ok';
                EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$do\$" 2>&1 |
        sed 's/.*NOTICE: *//'
}

rows_of() { # ORG: the SQL that counts the organization's rows, as the export finds them
    echo "SELECT (SELECT count(*) FROM organization WHERE id = $1)
      + (SELECT count(*) FROM team WHERE organization_id = $1)
      + (SELECT count(*) FROM project WHERE organization_id = $1)
      + (SELECT count(*) FROM environment e JOIN project p ON p.id = e.project_id WHERE p.organization_id = $1)
      + (SELECT count(*) FROM event e JOIN project p ON p.id = e.project_id WHERE p.organization_id = $1)
      + (SELECT count(*) FROM member WHERE organization_id = $1)
      + (SELECT count(*) FROM dashboard WHERE organization_id = $1)
      + (SELECT count(*) FROM widget w JOIN dashboard d ON d.id = w.dashboard_id WHERE d.organization_id = $1)
      + (SELECT count(*) FROM alert_rule a JOIN project p ON p.id = a.project_id WHERE p.organization_id = $1)"
}
rows_of_1=$(rows_of 1)
# What the client does not touch, to compare after a move.
fingerprint_of_1="SELECT md5(string_agg(r, ',' ORDER BY r)) FROM (
    SELECT 'o' || o::text AS r FROM organization o WHERE id = 1
    UNION ALL SELECT 't' || t::text FROM team t WHERE organization_id = 1
    UNION ALL SELECT 'p' || p::text FROM project p WHERE organization_id = 1 AND id <> 1
    UNION ALL SELECT 'e' || e::text FROM environment e JOIN project p ON p.id = e.project_id WHERE p.organization_id = 1
    UNION ALL SELECT 'v' || e::text FROM event e JOIN project p ON p.id = e.project_id
               WHERE p.organization_id = 1 AND e.message NOT LIKE 'w1-%'
    UNION ALL SELECT 'm' || m::text FROM member m WHERE organization_id = 1
    UNION ALL SELECT 'd' || d::text FROM dashboard d WHERE organization_id = 1
    UNION ALL SELECT 'w' || w::text FROM widget w JOIN dashboard d ON d.id = w.dashboard_id WHERE d.organization_id = 1
    UNION ALL SELECT 'a' || a::text FROM alert_rule a JOIN project p ON p.id = a.project_id WHERE p.organization_id = 1) x"
