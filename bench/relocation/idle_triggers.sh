#!/usr/bin/env bash
# What the move's triggers cost a cell's writers when no move runs (issue
# 44): they are installed ahead of any move (docs/relocation.md, step
# prepare), so every statement on an Organization-scoped table fires them.
# One cluster in cell mode with the organization schema
# (test/harness/organization_schema.sql, project captured); pgbench, one
# client, each transaction an INSERT of an event and an UPDATE of its
# project.  Rounds alternate with the triggers in place and dropped (a
# cell with no move allows that), side by side in one run.
#
#   bash bench/relocation/idle_triggers.sh          # ROUNDS=3 SECONDS_PER_ROUND=20
#   SMOKE=1 bash bench/relocation/idle_triggers.sh  # 1 round of 1 s: the plumbing only
# Prints transactions per second of each round and the ratio of the medians.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
ROUNDS=${ROUNDS:-3}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-20}
if [[ -n ${SMOKE:-} ]]; then ROUNDS=1 SECONDS_PER_ROUND=1; fi
trap 'cluster_stop' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

install_extension "$root"
cluster_start "outbox.silo_mode = cell" "outbox.cursor_store = table" "fsync = off" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Organization', 0), outbox.register_scope('User', 1);
SELECT outbox.register_category('PROJECT_UPDATE', 'Organization', 5);
\i $root/test/harness/organization_schema.sql
SELECT outbox.register_table('project', 'PROJECT_UPDATE', 'cell', shard_column => 'organization_id',
                             payload_columns => '{slug}');
INSERT INTO organization VALUES (1, 'acme', 1);
INSERT INTO project (id, organization_id, slug) VALUES (1, 1, 'p1');
SQL
triggers() { psql -X -tA -c "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pg\_outbox\_move\_%'"; }
installed=$(triggers)
[[ $installed != 0 ]] || bench_fail "set_relocation_scope installed no move trigger"
cat >"$CLUSTER_DIR/write.sql" <<'SQL'
BEGIN;
INSERT INTO event (project_id, message) VALUES (1, 'x');
UPDATE project SET slug = slug WHERE id = 1;
COMMIT;
SQL
round() {
    local out
    out=$("$PG_BIN/pgbench" -n -c 1 -T "$SECONDS_PER_ROUND" -f "$CLUSTER_DIR/write.sql" 2>&1) ||
        bench_fail "pgbench failed: $(tail -3 <<<"$out")"
    sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out"
}
: >"$CLUSTER_DIR/with" && : >"$CLUSTER_DIR/without"
for r in $(seq "$ROUNDS"); do
    psql -X -q -v ON_ERROR_STOP=1 -c "SELECT outbox._move_install_triggers()" >/dev/null
    [[ $(triggers) == "$installed" ]] || bench_fail "the move triggers are not back"
    with=$(round)
    psql -X -q -tA -c "SELECT format('DROP TRIGGER %I ON %s;', tgname, tgrelid::regclass)
                         FROM pg_trigger WHERE tgname LIKE 'pg\_outbox\_move\_%'" |
        psql -X -q -v ON_ERROR_STOP=1 >/dev/null
    [[ $(triggers) == 0 ]] || bench_fail "the move triggers could not be dropped"
    without=$(round)
    [[ -n $with && -n $without ]] || bench_fail "pgbench gave no figure in round $r"
    echo "round $r: $with tps with the idle move triggers ($installed), $without without"
    echo "$with" >>"$CLUSTER_DIR/with"
    echo "$without" >>"$CLUSTER_DIR/without"
done
with=$(median <"$CLUSTER_DIR/with")
without=$(median <"$CLUSTER_DIR/without")
echo "medians: $with tps with, $without without: ratio $(awk -v a="$with" -v b="$without" 'BEGIN {printf "%.3f", a / b}')"
