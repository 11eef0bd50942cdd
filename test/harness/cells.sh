# Three throwaway clusters on this machine, linked as Sentry deploys its
# silos: a control database and two cells, "us" and "eu", each its own
# PostgreSQL with pg_outbox preloaded (outbox.silo_mode control or cell).
# Source it, then: cells_start; cells_setup; on NAME psql-args...;
# cells_stop (also run from the EXIT trap).  Used by test/demo-cells.sh,
# test/integration/cells.sh and bench/cells/run.sh.
#
# The links (docs/clusters.md): control reaches each cell through
# a postgres_fdw foreign server and a user mapping for the worker's role;
# each cell reaches control the same way.  Each peer logs in as a link role
# of its own: cell X as outbox_link_X on control, control as
# outbox_link_control on each cell.  Every database has the same registry
# (scopes, categories, cells; eu numbers its scopes otherwise); control has
# the control table auth_user, the cells the cell tables organization and
# member (member.user_id refers to auth_user across silos, CASCADE).
# Control knows the Organization scope and the organization root (issue 46):
# it takes a cell's message only for an organization that control places in
# that cell (cells_place).  The handlers record
# what they apply in the table applied.

source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

declare -A CELL_DIR CELL_PORT
CELL_NAMES=(control us eu)

cells_start() { # [extra postgresql.conf lines]
    local name
    for name in "${CELL_NAMES[@]}"; do
        local dir port mode=cell
        [[ $name == control ]] && mode=control
        dir=$(mktemp -d /tmp/pg_outbox_$name.XXXXXX)
        [[ $(id -u) == 0 ]] && chown postgres: "$dir"
        port=$(_free_port)
        CELL_DIR[$name]=$dir
        CELL_PORT[$name]=$port
        _as_db_user "$PG_BIN/initdb" -D "$dir/data" -U postgres --no-sync -A trust -E UTF8 \
            --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; return 1; }
        cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_outbox'
fsync = off
max_connections = 40
log_min_messages = warning
outbox.silo_mode = $mode
outbox.database_name = postgres
outbox.naptime = 100
outbox.cursor_store = table
$(printf '%s\n' "$@")
CONF
        cell_start "$name" || return 1
    done
}

cell_start() { # NAME
    _as_db_user env ${OUTBOX_SERVER_ENV:-} "$PG_BIN/pg_ctl" -D "${CELL_DIR[$1]}/data" \
        -l "${CELL_DIR[$1]}/server.log" -w start >/dev/null || { tail -20 "${CELL_DIR[$1]}/server.log"; return 1; }
}

cell_stop() { # NAME [MODE]: immediate by default, as a crash
    _as_db_user "$PG_BIN/pg_ctl" -D "${CELL_DIR[$1]}/data" -m "${2:-immediate}" stop >/dev/null 2>&1
}

cells_stop() {
    local name
    for name in "${CELL_NAMES[@]}"; do
        [[ -n ${CELL_DIR[$name]:-} && -d ${CELL_DIR[$name]} ]] || continue
        cell_stop "$name"
        report_crashes "${CELL_DIR[$name]}/server.log"
        if [[ -n ${OUTBOX_SANITIZER_LOG:-} ]]; then
            grep -h -A 30 -E 'runtime error:|ERROR: AddressSanitizer' "${CELL_DIR[$name]}/server.log" \
                >>"$OUTBOX_SANITIZER_LOG" 2>/dev/null || true
        fi
        [[ -n ${KEEP_CLUSTER:-} ]] || rm -rf "${CELL_DIR[$name]}"
    done
}

cells_place() { # CELL FIRST [LAST]: control places organizations FIRST..LAST in CELL
    on control -c "SELECT count(outbox.set_organization_cell(g, '$1')) FROM generate_series($2, ${3:-$2}) g" >/dev/null
}

on() { # NAME psql-args...: psql on that database, quiet, tuples only
    local name=$1
    shift
    psql -X -q -tA -v ON_ERROR_STOP=1 -h "${CELL_DIR[$name]}" -p "${CELL_PORT[$name]}" \
        -U "${ON_USER:-postgres}" -d postgres "$@"
}

# worker_set NAME on|off: outbox.worker_enabled there, and wait until its
# worker has taken it between two cycles (a reload alone leaves a cycle
# already under way to run, and the worker may take the signal late).
worker_set() { # NAME on|off
    on "$1" -c "ALTER SYSTEM SET outbox.worker_enabled = $2" -c "SELECT pg_reload_conf()" >/dev/null
    wait_on "$1" 60 "SELECT state FROM outbox.worker_status" "$([[ $2 == on ]] && echo running || echo disabled)"
}

# wait_on NAME SECONDS SQL EXPECTED: polls that database every 0.2 s until
# the SQL returns EXPECTED.
wait_on() { # NAME SECONDS SQL EXPECTED
    local name=$1 deadline=$((SECONDS + $2)) got
    while ((SECONDS < deadline)); do
        got=$(on "$name" -c "$3" 2>&1)
        [[ $got == "$4" ]] && return 0
        sleep 0.2
    done
    echo "  $name: waited $2 s for '$4', last saw '$got'" >&2
    return 1
}

cells_setup() {
    local name
    for name in "${CELL_NAMES[@]}"; do
        # Cell eu numbers the scopes its own way: they travel by name.
        local org_scope=0 user_scope=1
        [[ $name == eu ]] && org_scope=7 user_scope=3
        on "$name" -v org_scope=$org_scope -v user_scope=$user_scope >/dev/null <<'SQL' || return 1
CREATE EXTENSION pg_outbox;
CREATE EXTENSION postgres_fdw;
SELECT outbox.register_scope('Organization', :org_scope);
SELECT outbox.register_scope('User', :user_scope);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'Organization', 0);
SELECT outbox.register_category('USER_UPDATE', 'User', 1);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('eu');
CREATE TABLE applied (n bigserial, category int, object bigint, payload jsonb, cell text,
                      at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION apply(m outbox.message) RETURNS void LANGUAGE sql AS $$
    INSERT INTO applied (category, object, payload, cell)
    VALUES (m.category, m.object_identifier, m.payload, m.cell_name) $$;
SQL
    done
    on control >/dev/null <<SQL || return 1
CREATE TABLE auth_user (id bigint PRIMARY KEY, name text NOT NULL);
SELECT outbox.register_table('auth_user', 'USER_UPDATE', 'control', shard_column => 'id',
                             payload_columns => '{name}');
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'apply(outbox.message)');
CREATE SERVER cell_us FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '${CELL_PORT[us]}', dbname 'postgres');
CREATE SERVER cell_eu FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '${CELL_PORT[eu]}', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER cell_us OPTIONS (user 'outbox_link_control');
CREATE USER MAPPING FOR postgres SERVER cell_eu OPTIONS (user 'outbox_link_control');
CREATE ROLE outbox_link_us LOGIN;
CREATE ROLE outbox_link_eu LOGIN;
GRANT USAGE ON SCHEMA outbox TO outbox_link_us, outbox_link_eu;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO outbox_link_us, outbox_link_eu;
SELECT outbox.set_cell_server('us', 'cell_us', 'outbox_link_us');
SELECT outbox.set_cell_server('eu', 'cell_eu', 'outbox_link_eu');
-- What control needs to tell whose a cell's message is (issue 46): the
-- cells' shards of scope Organization are organizations, and the
-- organization table is their root.  A test places the organizations it
-- writes with cells_place.
SELECT outbox.set_organization_scope('Organization');
SELECT outbox.set_organization_root('ORGANIZATION_UPDATE', 'organization');
SQL
    for name in us eu; do
        # CELLS_OWN_TABLES: the caller creates the cells' tables itself.
        [[ -n ${CELLS_OWN_TABLES:-} ]] || on "$name" >/dev/null <<SQL || return 1
CREATE TABLE organization (id bigint PRIMARY KEY, name text NOT NULL);
SELECT outbox.register_table('organization', 'ORGANIZATION_UPDATE', 'cell', shard_column => 'id',
                             payload_columns => '{name}');
CREATE TABLE member (id bigint PRIMARY KEY, user_id bigint NOT NULL, organization_id bigint NOT NULL);
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
SQL
        on "$name" >/dev/null <<SQL || return 1
SELECT outbox.register_handler('USER_UPDATE', 'apply(outbox.message)');
CREATE SERVER control_db FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '${CELL_PORT[control]}', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER control_db OPTIONS (user 'outbox_link_$name');
CREATE ROLE outbox_link_control LOGIN;
GRANT USAGE ON SCHEMA outbox TO outbox_link_control;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO outbox_link_control;
SELECT outbox.link_control('control_db', '$name', 'outbox_link_control');
SQL
    done
}
