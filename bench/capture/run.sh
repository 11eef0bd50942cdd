#!/usr/bin/env bash
# Capture benchmark: what does writing an outbox row per change cost, with
# pg_outbox's C++ trigger and with the alternatives one could write instead?
#
#   bash bench/capture/run.sh            # ROWS=200000 RUNS=5 PGBENCH_SECONDS=10
#   ROWS=20000 RUNS=2 PGBENCH_SECONDS=3 PGBENCH_ROUNDS=3 bash bench/capture/run.sh
#   SMOKE=1 bash bench/capture/run.sh    # seconds: the plumbing, not the figures
#
# Part 1 (bulk): for every variant, one INSERT ... SELECT of ROWS rows, one
# UPDATE of every row (a non-key column, so the shard does not change and
# every variant writes one outbox row per row), one DELETE of every row.
# Part 2 (pgbench): 2 clients inserting one row per transaction.
#
# Variants (all write the same outbox columns, payload NULL):
#   plain                no capture: the baseline.
#   pg_outbox            outbox.register_table(); C++ row trigger writing
#                        outbox.cell_outbox.
#   plpgsql_row          PL/pgSQL AFTER ... FOR EACH ROW trigger writing a copy
#                        of outbox.cell_outbox (LIKE ... INCLUDING ALL plus
#                        the same partitioning: same storage, its own sequence).
#   plpgsql_stmt         PL/pgSQL FOR EACH STATEMENT triggers with transition
#                        tables, one INSERT ... SELECT into such a copy.
#   plpgsql_row_sentry,  the same two, writing a "Sentry-shaped" outbox: primary
#   plpgsql_stmt_sentry  key on id, (shard_scope, shard_identifier, id) and
#                        (scheduled_for).
#   heap_only            plpgsql_stmt writing one plain table without any index
#                        or partitions: the floor of writing one extra row per
#                        change.
#   pgq                  PgQ's C trigger pgq.logutriga('bench').
#
# Writes bench/capture/results.md (and results_raw.tsv, the raw timings, and
# capture.png, their picture; under SMOKE, into a scratch directory) and
# prints the same Markdown to stdout.
set -euo pipefail

ROWS=${ROWS:-200000}
RUNS=${RUNS:-5}
PGBENCH_SECONDS=${PGBENCH_SECONDS:-10}
PGBENCH_ROUNDS=${PGBENCH_ROUNDS:-3}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$HERE/../.." && pwd)
# shellcheck source=../../test/harness/cluster.sh
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
if [[ -n ${SMOKE:-} ]]; then ROWS=2000 RUNS=1 PGBENCH_SECONDS=1 PGBENCH_ROUNDS=1; fi

WORK=$(mktemp -d /tmp/pg_outbox_bench.XXXXXX)
trap 'cluster_stop; rm -rf "$WORK"' EXIT
START_SECONDS=$SECONDS

BULK_VARIANTS=(plain pg_outbox plpgsql_row plpgsql_stmt plpgsql_row_sentry
               plpgsql_stmt_sentry heap_only pgq)
PGBENCH_VARIANTS=(plain pg_outbox plpgsql_row pgq)

log() { echo "[$(date -u +%T)] $*" >&2; }

# Quiet psql that stops at the first error; NOTICEs (DROP ... IF EXISTS)
# would only clutter the output we parse.
export PGOPTIONS='-c client_min_messages=warning'
q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

log "building and installing pg_outbox"
# Others edit the tree while this runs: note what was built.
TREE=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
install_extension "$root"

# Sizes only: the runs must not hit a timed checkpoint or a WAL-size
# checkpoint (we CHECKPOINT ourselves before each timed statement), and
# everything should fit in shared_buffers.  autovacuum is off because we
# VACUUM before each timed statement; a worker waking up in the middle of one
# variant's statement would only add noise on a 2-core machine.
# synchronous_commit stays on (the default).
cluster_start "$(printf '%s\n' \
    'shared_buffers = 1GB' \
    'max_wal_size = 4GB' \
    'checkpoint_timeout = 30min' \
    'autovacuum = off')"
log "cluster up on port $PGPORT ($CLUSTER_DIR)"

##############################################################################
# One-time setup: extensions, registry, the outbox copies and the PL/pgSQL
# capture functions.
##############################################################################
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
CREATE EXTENSION pgq;
CREATE SCHEMA bench;
SELECT outbox.register_scope('ORGANIZATION_SCOPE');
SELECT outbox.register_category('ORG_UPDATE', 'ORGANIZATION_SCOPE');
CREATE SEQUENCE bench.pgbench_ids;
SQL
SCOPE_ID=$(q -Atc "SELECT id FROM outbox.scopes WHERE name = 'ORGANIZATION_SCOPE'")
CATEGORY_ID=$(q -Atc "SELECT id FROM outbox.categories WHERE name = 'ORG_UPDATE'")

# An outbox table bench.$1 for the PL/pgSQL variants, with its own id
# sequence (LIKE would copy the default, i.e. pg_outbox's sequence).  $2 is
# the LIKE option.  With $3 = same, the copy also gets outbox.cell_outbox's
# partitioning (same key, same partition bounds; one level): together with
# INCLUDING ALL (its indexes) the copy is stored like pg_outbox's outbox,
# whatever that is today, so the comparison is trigger against trigger.
outbox_copy() {
    local tbl=$1 like=$2 partitions=${3:-}
    cat <<SQL
DO \$\$
DECLARE
    src constant regclass := 'outbox.cell_outbox';
    same constant boolean := '$partitions' = 'same'
                             AND (SELECT relkind FROM pg_class WHERE oid = src) = 'p';
    bound text;
    n int := 0;
BEGIN
    EXECUTE format('CREATE TABLE bench.$tbl (LIKE %s $like) %s', src,
                   CASE WHEN same THEN 'PARTITION BY ' || pg_get_partkeydef(src) ELSE '' END);
    CREATE SEQUENCE bench.${tbl}_id_seq OWNED BY bench.$tbl.id;
    ALTER TABLE bench.$tbl ALTER COLUMN id SET DEFAULT nextval('bench.${tbl}_id_seq');
    IF same THEN
        FOR bound IN SELECT pg_get_expr(c.relpartbound, c.oid)
                       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                      WHERE i.inhparent = src ORDER BY c.oid
        LOOP
            EXECUTE format('CREATE TABLE bench.${tbl}_%s PARTITION OF bench.$tbl %s', n, bound);
            n := n + 1;
        END LOOP;
    END IF;
END
\$\$;
SQL
}

# The capture functions writing outbox bench.$1.  Static SQL, one function per
# target table, so that PL/pgSQL caches the INSERT's plan (EXECUTE format()
# would re-plan on every row and make the PL/pgSQL variants look worse than a
# hand-written trigger would be).  Scope and category are constants, as a
# hand-written trigger would have them.
capture_functions() {
    local tbl=$1
    local cols="shard_scope, shard_identifier, category, object_identifier, payload,
                scheduled_from, scheduled_for, date_added"
    cat <<SQL
CREATE FUNCTION bench.row_$tbl() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO bench.$tbl ($cols)
        VALUES ($SCOPE_ID, OLD.organization_id, $CATEGORY_ID, OLD.id, NULL, now(), now(), now());
    ELSE
        INSERT INTO bench.$tbl ($cols)
        VALUES ($SCOPE_ID, NEW.organization_id, $CATEGORY_ID, NEW.id, NULL, now(), now(), now());
    END IF;
    RETURN NULL;
END
\$\$;
CREATE FUNCTION bench.stmt_new_$tbl() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO bench.$tbl ($cols)
    SELECT $SCOPE_ID, organization_id, $CATEGORY_ID, id, NULL, now(), now(), now() FROM new_rows;
    RETURN NULL;
END
\$\$;
CREATE FUNCTION bench.stmt_old_$tbl() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO bench.$tbl ($cols)
    SELECT $SCOPE_ID, organization_id, $CATEGORY_ID, id, NULL, now(), now(), now() FROM old_rows;
    RETURN NULL;
END
\$\$;
SQL
}

{
    outbox_copy ob_row 'INCLUDING ALL' same
    outbox_copy ob_stmt 'INCLUDING ALL' same
    # Sentry-shaped: not partitioned, three btrees.
    for tbl in ob_row_sentry ob_stmt_sentry; do
        outbox_copy $tbl 'INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
        echo "ALTER TABLE bench.$tbl ADD PRIMARY KEY (id);"
        echo "CREATE INDEX ON bench.$tbl (shard_scope, shard_identifier, id);"
        echo "CREATE INDEX ON bench.$tbl (scheduled_for);"
    done
    outbox_copy ob_heap 'INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
    for tbl in ob_row ob_stmt ob_row_sentry ob_stmt_sentry ob_heap; do
        capture_functions $tbl
    done
} | q

# The outbox a variant writes, for the row-count checks.  pgq's event table
# changes with every create_queue, hence the lookup.
outbox_of() {
    case $1 in
        plain) echo "" ;;
        pg_outbox) echo "outbox.cell_outbox" ;;
        plpgsql_row) echo "bench.ob_row" ;;
        plpgsql_stmt) echo "bench.ob_stmt" ;;
        plpgsql_row_sentry) echo "bench.ob_row_sentry" ;;
        plpgsql_stmt_sentry) echo "bench.ob_stmt_sentry" ;;
        heap_only) echo "bench.ob_heap" ;;
        pgq) echo "(SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = 'bench')" ;;
    esac
}

# SQL giving variant $1 a fresh, empty source table bench.t_$1 with its
# capture attached, and an empty outbox.
setup_sql() {
    local v=$1 t=bench.t_$1 ob
    echo "DROP TABLE IF EXISTS $t;"
    if [[ $v == pgq ]]; then
        # An event table cannot simply be truncated under PgQ's bookkeeping:
        # drop the queue (and its event tables) and make a new one.
        echo "SELECT pgq.drop_queue('bench') FROM pgq.queue WHERE queue_name = 'bench';"
        echo "SELECT pgq.create_queue('bench');"
    fi
    echo "CREATE TABLE $t (id bigint PRIMARY KEY, organization_id bigint NOT NULL, name text, value int);"
    case $v in
        plain) ;;
        pg_outbox)
            echo "TRUNCATE outbox.cell_outbox RESTART IDENTITY;"
            echo "SELECT outbox.register_table('$t', 'ORG_UPDATE', shard_column => 'organization_id');"
            ;;
        plpgsql_row|plpgsql_row_sentry)
            ob=ob_row${v#plpgsql_row}
            echo "TRUNCATE bench.$ob RESTART IDENTITY;"
            echo "CREATE TRIGGER capture AFTER INSERT OR UPDATE OR DELETE ON $t
                  FOR EACH ROW EXECUTE FUNCTION bench.row_$ob();"
            ;;
        plpgsql_stmt|plpgsql_stmt_sentry|heap_only)
            ob=ob_stmt${v#plpgsql_stmt}
            [[ $v == heap_only ]] && ob=ob_heap
            echo "TRUNCATE bench.$ob RESTART IDENTITY;"
            # A trigger with transition tables can have only one event.
            echo "CREATE TRIGGER capture_ins AFTER INSERT ON $t REFERENCING NEW TABLE AS new_rows
                  FOR EACH STATEMENT EXECUTE FUNCTION bench.stmt_new_$ob();"
            echo "CREATE TRIGGER capture_upd AFTER UPDATE ON $t REFERENCING NEW TABLE AS new_rows
                  FOR EACH STATEMENT EXECUTE FUNCTION bench.stmt_new_$ob();"
            echo "CREATE TRIGGER capture_del AFTER DELETE ON $t REFERENCING OLD TABLE AS old_rows
                  FOR EACH STATEMENT EXECUTE FUNCTION bench.stmt_old_$ob();"
            ;;
        pgq)
            echo "CREATE TRIGGER capture AFTER INSERT OR UPDATE OR DELETE ON $t
                  FOR EACH ROW EXECUTE FUNCTION pgq.logutriga('bench');"
            ;;
    esac
}

# SQL failing (ON_ERROR_STOP) unless variant $1's outbox holds $2 rows, i.e.
# one per changed row so far.  For pg_outbox also check what the rows say
# after the INSERT ($3 = insert): right scope, category and shard, one row per
# inserted id.
check_sql() {
    local v=$1 expected=$2 after=$3 ob
    ob=$(outbox_of "$v")
    [[ -z $ob ]] && return 0
    # The table name as an SQL expression: pgq's is a subquery already.
    [[ $v == pgq ]] || ob="'$ob'"
    cat <<SQL
DO \$\$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s', $ob) INTO n;
    IF n <> $expected THEN
        RAISE EXCEPTION 'variant $v: outbox has % rows after $after, expected $expected', n;
    END IF;
END
\$\$;
SQL
    if [[ $v == pg_outbox && $after == insert ]]; then
        cat <<SQL
DO \$\$
DECLARE
    good bigint;
    ids bigint;
BEGIN
    SELECT count(*) FILTER (WHERE shard_scope = $SCOPE_ID AND category = $CATEGORY_ID
                              AND shard_identifier = object_identifier % 1000),
           count(DISTINCT object_identifier)
      INTO good, ids
      FROM outbox.cell_outbox;
    IF good <> $expected OR ids <> $expected THEN
        RAISE EXCEPTION 'variant pg_outbox: after insert % rows have the right scope/category/shard and % distinct ids, expected $expected of both', good, ids;
    END IF;
END
\$\$;
SQL
    fi
}

##############################################################################
# Part 1: bulk statements.
##############################################################################
RAW=$WORK/raw.tsv
: >"$RAW"

declare -A STATEMENT=(
    [insert]="INSERT INTO bench.t_%s SELECT g, g %% 1000, 'name ' || g, g FROM generate_series(1, $ROWS) g;"
    [update]="UPDATE bench.t_%s SET value = value + 1;"
    [delete]="DELETE FROM bench.t_%s;"
)

# One run of variant $1 in round $2: fresh table, then each statement in its
# own transaction (psql autocommit; \timing covers execution and commit, as
# seen by the client over a Unix socket).  Before each: VACUUM ANALYZE (hint
# bits, visibility map and statistics in the same state for every variant)
# and CHECKPOINT (every variant starts from clean buffers and pays the same
# full-page writes).
bulk_run() {
    local v=$1 round=$2 op n=0 out=$WORK/bulk.out
    {
        setup_sql "$v"
        for op in insert update delete; do
            n=$((n + ROWS))
            echo "VACUUM ANALYZE bench.t_$v;"
            echo "CHECKPOINT;"
            printf '%s\n' '\timing on'
            # shellcheck disable=SC2059
            printf "${STATEMENT[$op]}\n" "$v"
            printf '%s\n' '\timing off'
            check_sql "$v" "$n" "$op"
        done
    } | q >"$out" 2>&1 || {
        cat "$out" >&2
        bench_fail "variant $v failed in round $round"
    }
    # psql prints "Time: 123.456 ms" (plus "(00:01.235)" above one second).
    mapfile -t times < <(awk '/^Time:/ {print $2}' "$out")
    if [[ ${#times[@]} -ne 3 ]]; then
        cat "$out" >&2
        bench_fail "expected 3 timings for $v, got ${#times[@]}"
    fi
    printf 'bulk\t%s\t%s\t%s\t%s\n' \
        "$round" "$v" insert "${times[0]}" \
        "$round" "$v" update "${times[1]}" \
        "$round" "$v" delete "${times[2]}" >>"$RAW"
    log "bulk round $round $v: insert ${times[0]} ms, update ${times[1]} ms, delete ${times[2]} ms"
}

# Round-robin, and each round starts one variant later, so that neither the
# machine's noise nor the position in the round favours a variant.
rotated() { # rotated OFFSET ITEM...
    local k=$1 i
    shift
    local items=("$@")
    for ((i = 0; i < ${#items[@]}; i++)); do
        echo "${items[(i + k) % ${#items[@]}]}"
    done
}

for ((round = 1; round <= RUNS; round++)); do
    for v in $(rotated "$round" "${BULK_VARIANTS[@]}"); do
        bulk_run "$v" "$round"
    done
done

##############################################################################
# Part 2: pgbench, 2 clients, one single-row INSERT per transaction.
##############################################################################
pgbench_run() {
    local v=$1 round=$2 out=$WORK/pgbench.out script=$WORK/pgbench_$1.sql tps ob
    cat >"$script" <<SQL
\set org random(0, 999)
INSERT INTO bench.t_$v (id, organization_id, name, value)
VALUES (nextval('bench.pgbench_ids'), :org, 'name', 1);
SQL
    { setup_sql "$v"; echo "VACUUM ANALYZE bench.t_$v;"; echo "CHECKPOINT;"; } | q >/dev/null
    "$PG_BIN/pgbench" -n -c 2 -j 2 -T "$PGBENCH_SECONDS" -f "$script" >"$out" 2>&1 || {
        cat "$out" >&2
        bench_fail "pgbench $v failed in round $round"
    }
    tps=$(awk '/^tps = / {print $3; exit}' "$out")
    # Every committed insert must have written exactly one outbox row.
    ob=$(outbox_of "$v")
    if [[ -n $ob ]]; then
        [[ $v == pgq ]] && ob=$(q -Atc "$ob")
        read -r rows outbox_rows < <(q -Atc \
            "SELECT (SELECT count(*) FROM bench.t_$v), (SELECT count(*) FROM $ob)" | tr '|' ' ')
        if [[ $rows != "$outbox_rows" ]]; then
            bench_fail "pgbench $v: $rows rows inserted but $outbox_rows outbox rows"
        fi
    fi
    printf 'pgbench\t%s\t%s\ttps\t%s\n' "$round" "$v" "$tps" >>"$RAW"
    log "pgbench round $round $v: $tps tps"
}

for ((round = 1; round <= PGBENCH_ROUNDS; round++)); do
    for v in $(rotated "$round" "${PGBENCH_VARIANTS[@]}"); do
        pgbench_run "$v" "$round"
    done
done

##############################################################################
# Report.
##############################################################################
# How each outbox was stored (partitioning, indexes), since that drives the
# cost.
LAYOUT=$WORK/layout.tsv
q -AtF $'\t' >"$LAYOUT" <<'SQL'
SELECT c.relname,
       CASE WHEN c.relkind = 'p'
            THEN format('%s, %s partitions', pg_get_partkeydef(c.oid),
                        (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid))
            ELSE 'not partitioned' END,
       coalesce((SELECT string_agg(pg_get_indexdef(i.indexrelid), '; ' ORDER BY i.indexrelid)
                   FROM pg_index i WHERE i.indrelid = c.oid), 'no index')
  FROM pg_class c
 WHERE c.oid IN ('outbox.cell_outbox'::regclass, 'bench.ob_row'::regclass,
                 'bench.ob_stmt'::regclass, 'bench.ob_row_sentry'::regclass,
                 'bench.ob_stmt_sentry'::regclass, 'bench.ob_heap'::regclass,
                 (SELECT queue_data_pfx || '_0' FROM pgq.queue WHERE queue_name = 'bench')::regclass)
 ORDER BY c.relname;
SQL

PG_VERSION=$(q -Atc 'SHOW server_version')
EXT_VERSION=$(q -Atc "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")
MEM=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
HEADER="$(date -u) | nproc $(nproc) | memory $MEM | PostgreSQL $PG_VERSION | pg_outbox $EXT_VERSION (tree $TREE)"
WALL=$((SECONDS - START_SECONDS))

OUT=$(bench_results_dir "$HERE")
cp "$RAW" "$OUT/results_raw.tsv"
python3 "$HERE/report.py" "$RAW" "$LAYOUT" \
    --header "$HEADER" --rows "$ROWS" --runs "$RUNS" \
    --pgbench-seconds "$PGBENCH_SECONDS" --pgbench-rounds "$PGBENCH_ROUNDS" \
    --wall "$WALL" >"$OUT/results.md"
cat "$OUT/results.md"
/usr/bin/python3 "$root/bench/plot.py" capture "$OUT"
log "done in ${WALL}s; wrote $OUT/results.md"
