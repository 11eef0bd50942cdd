#!/usr/bin/env bash
# Targeted re-sync benchmark (issue 49): rows/s of one organization's
# re-sync (ORG_ROWS rows over nine tables, found by the export's belonging
# walk, then sent in batches) against a whole-table backfill of the same
# nine tables (the organization's rows and as many of nine others), side by
# side in one run.  Both run their batches as the worker does, one
# transaction each, BATCH rows a batch, with the cursor in Redis; the
# re-sync's time includes finding its rows.  The goal: at least the
# backfill's rate per row.  Each contender runs first in a new psql
# session (RUNS times), then all again in one session that ran each once
# before (a second table).
#
#   bash bench/resync/run.sh          # ORG_ROWS=100000 RUNS=3 BATCH=10000
#   SMOKE=1 bash bench/resync/run.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/resync/results.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
ORG_ROWS=${ORG_ROWS:-100000}
RUNS=${RUNS:-3}
BATCH=${BATCH:-10000}
if [[ -n ${SMOKE:-} ]]; then
    ORG_ROWS=2000 RUNS=1 BATCH=500
fi
trap 'cluster_stop' EXIT

install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "checkpoint_timeout = 30min" \
    "autovacuum = off" "outbox.worker_enabled = off" "outbox.database_name = postgres"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
# The milliseconds of each statement of a psql session (psql's \timing,
# commits included), one a line: the statements alone, without starting
# psql and connecting (about 40 ms here), which the re-sync, two statements
# whose results the script reads between them, would otherwise pay twice.
timed() { # SQL on stdin
    { echo '\timing on'; cat; } | q | awk '/^Time: / {printf "%d\n", $2}' ||
        bench_fail "a timed psql session failed"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
rate() { awk -v n="$1" -v ms="$2" 'BEGIN{printf "%d", n / (ms > 0 ? ms : 1) * 1000}'; }

# Organization 1 has ORG_ROWS rows: itself and ORG_ROWS / 8 in each of the
# eight other tables; organizations 2 to 10 share as many again.  Four
# tables refer to the organization, four to a project or a dashboard.
per=$((ORG_ROWS / 8))
q >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Organization', 0);
SELECT outbox.register_category('ORG_' || t, 'Organization', n::int - 1)
  FROM unnest(ARRAY['organization', 'project', 'team', 'member', 'dashboard', 'environment',
                    'release', 'rule', 'widget']) WITH ORDINALITY u(t, n);
CREATE TABLE organization (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE project (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES organization, name text);
CREATE TABLE team (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES organization, name text);
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES organization, email text);
CREATE TABLE dashboard (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES organization, title text);
CREATE TABLE environment (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES project, name text);
CREATE TABLE release (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES project, version text);
CREATE TABLE rule (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES project, label text);
CREATE TABLE widget (id bigint PRIMARY KEY, dashboard_id bigint NOT NULL REFERENCES dashboard, kind text);
INSERT INTO organization SELECT g, 'org ' || g FROM generate_series(1, 10) g;
-- Ids 1..per are organization 1's; per+1..2*per the nine others'.
INSERT INTO project SELECT g, CASE WHEN g <= $per THEN 1 ELSE 2 + g % 9 END, 'p' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO team SELECT g, CASE WHEN g <= $per THEN 1 ELSE 2 + g % 9 END, 't' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO member SELECT g, CASE WHEN g <= $per THEN 1 ELSE 2 + g % 9 END, 'm' || g || '@example.com' FROM generate_series(1, 2 * $per) g;
INSERT INTO dashboard SELECT g, CASE WHEN g <= $per THEN 1 ELSE 2 + g % 9 END, 'd' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO environment SELECT g, g, 'e' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO release SELECT g, g, 'r' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO rule SELECT g, g, 'l' || g FROM generate_series(1, 2 * $per) g;
INSERT INTO widget SELECT g, g, 'w' || g FROM generate_series(1, 2 * $per) g;
CREATE INDEX ON project (org_id);
CREATE INDEX ON team (org_id);
CREATE INDEX ON member (org_id);
CREATE INDEX ON dashboard (org_id);
CREATE INDEX ON environment (project_id);
CREATE INDEX ON release (project_id);
CREATE INDEX ON rule (project_id);
CREATE INDEX ON widget (dashboard_id);
SELECT outbox.register_table(t, 'ORG_' || t,
           shard_column => CASE WHEN t IN ('project', 'team', 'member', 'dashboard')
                                THEN 'org_id' END)
  FROM unnest(ARRAY['organization', 'project', 'team', 'member', 'dashboard', 'environment',
                    'release', 'rule', 'widget']) t;
SELECT outbox.set_relocation_scope(t::regclass, '{Organization}')
  FROM unnest(ARRAY['organization', 'project', 'team', 'member', 'dashboard', 'environment',
                    'release', 'rule', 'widget']) t;
SELECT outbox.set_relocation_root('Organization', 'organization');
-- Both contenders: one batch per transaction, as the worker runs them
-- (the backfill with force_synchronous: the gates open).
CREATE PROCEDURE backfill_all(batch int) LANGUAGE plpgsql AS \$\$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT relid FROM outbox.registered_tables ORDER BY table_key LOOP
        WHILE outbox.process_backfill_batch(t, batch, true) IS NOT NULL LOOP
            COMMIT;
        END LOOP;
    END LOOP;
END \$\$;
CREATE PROCEDURE resync_batches(job bigint, batch int) LANGUAGE plpgsql AS \$\$
BEGIN
    WHILE outbox.process_resync_batch(job, batch) IS NOT NULL LOOP
        COMMIT;
    END LOOP;
END \$\$;
TRUNCATE outbox.cell_outbox;
VACUUM ANALYZE;
SQL
org_rows=$(q -c "SELECT 1 + 4 * $per + (SELECT count(*) FROM environment e JOIN project p ON p.id = e.project_id WHERE p.org_id = 1)
                  + (SELECT count(*) FROM release e JOIN project p ON p.id = e.project_id WHERE p.org_id = 1)
                  + (SELECT count(*) FROM rule e JOIN project p ON p.id = e.project_id WHERE p.org_id = 1)
                  + (SELECT count(*) FROM widget w JOIN dashboard d ON d.id = w.dashboard_id WHERE d.org_id = 1)")
all_rows=$(q -c "SELECT (SELECT count(*) FROM organization) + 8 * 2 * $per")

declare -A ms
# The outbox emptied as the worker leaves it, its rows deleted and vacuumed
# away, not truncated: TRUNCATE gave its partitions new files, and the first
# rows each contender wrote created their free space maps, 16 files, inside
# its timed run.  There ext4 searches for an inode that was not deleted
# recently: right after the run before removed its cluster, that took up
# to a fifth of the re-sync's batches (perf), and the runs' ratios spread
# from 0.85 to 0.97 (0.95 to 0.98 emptied so).
empty_outbox="DELETE FROM outbox.cell_outbox; VACUUM outbox.cell_outbox;"
reset() { q <<<"$empty_outbox CHECKPOINT;" >/dev/null; redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; }
written() { q -c "SELECT count(*) FROM outbox.cell_outbox"; }
for run in $(seq "$RUNS"); do
    reset
    ms[backfill]+=" $(timed <<<"CALL backfill_all($BATCH);")"
    got=$(written)
    [[ $got == "$all_rows" ]] || bench_fail "the backfill wrote $got outbox rows, not $all_rows"
    reset
    read -r find batches < <(timed <<<"SELECT outbox.resync_organization(1) AS job \\gset
CALL resync_batches(:job, $BATCH);" | paste -sd' ')
    [[ -n $batches ]] || bench_fail "the re-sync's statements were not both timed"
    ms[find]+=" $find"
    ms[batches]+=" $batches"
    ms[resync]+=" $((find + batches))"
    got=$(written)
    [[ $got == "$org_rows" ]] || bench_fail "the re-sync wrote $got outbox rows, not $org_rows"
done
# The same again in one psql session that has run each once before: what
# a worker's backend, long lived, pays, without a new backend's first
# touches of shared buffers and catalogs (perf: a quarter of the cold
# find's samples were page faults).  Each contender's outbox rows are
# counted in the session: a division by zero stops it when they are wrong.
warm_sql() {
    echo "SET client_min_messages = warning;"
    for run in $(seq 0 "$RUNS"); do
        echo "$empty_outbox"
        echo "\\! redis-cli -p $REDIS_PORT FLUSHALL > /dev/null"
        echo "CALL backfill_all($BATCH);"
        echo "SELECT 1 / (count(*) = $all_rows)::int FROM outbox.cell_outbox;"
        echo "$empty_outbox"
        echo "SELECT outbox.resync_organization(1) AS job \\gset"
        echo "CALL resync_batches(:job, $BATCH);"
        echo "SELECT 1 / (count(*) = $org_rows)::int FROM outbox.cell_outbox;"
    done
}
# Nine statements a run (emptying the outbox is two): SET, then the first
# run (its warm-up) dropped.
warm=$(warm_sql | timed | tail -n +2 | paste -d' ' - - - - - - - - - | tail -n +2)
[[ $(echo "$warm" | wc -l) == "$RUNS" ]] || bench_fail "the warm session timed $(echo "$warm" | wc -l) runs, not $RUNS"
w_back=$(echo "$warm" | awk '{print $3}' | median)
w_resync=$(echo "$warm" | awk '{print $7 + $8}' | median)
r_wback=$(rate "$all_rows" "$w_back")
r_wresync=$(rate "$org_rows" "$w_resync")

m_back=$(echo ${ms[backfill]} | tr ' ' '\n' | median)
m_resync=$(echo ${ms[resync]} | tr ' ' '\n' | median)
m_find=$(echo ${ms[find]} | tr ' ' '\n' | median)
m_batches=$(echo ${ms[batches]} | tr ' ' '\n' | median)
r_batches=$(rate "$org_rows" "$m_batches")
r_back=$(rate "$all_rows" "$m_back")
r_resync=$(rate "$org_rows" "$m_resync")
{
echo "# pg_outbox targeted re-sync benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/resync/run.sh\` ORG_ROWS=$ORG_ROWS RUNS=$RUNS BATCH=$BATCH"
echo
echo "| what | rows | ms (median of $RUNS) | rows/s | vs the backfill |"
echo "|---|---:|---:|---:|---:|"
echo "| whole-table backfill of the nine tables | $all_rows | $m_back | $r_back | 1.00 |"
echo "| re-sync of organization 1 over the nine tables, all of it | $org_rows | $m_resync | $r_resync | $(awk -v a="$r_resync" -v b="$r_back" 'BEGIN{printf "%.2f", a/b}') |"
echo "| of which finding its rows (resync_organization) | | $m_find | | |"
echo "| of which sending them (its batches alone) | $org_rows | $m_batches | $r_batches | $(awk -v a="$r_batches" -v b="$r_back" 'BEGIN{printf "%.2f", a/b}') |"
echo
echo "In one session that ran each once before (a long-lived backend, as the worker's), medians of $RUNS:"
echo
echo "| what | rows | ms | rows/s | vs the backfill |"
echo "|---|---:|---:|---:|---:|"
echo "| whole-table backfill, warm | $all_rows | $w_back | $r_wback | 1.00 |"
echo "| re-sync of organization 1, finding its rows included, warm | $org_rows | $w_resync | $r_wresync | $(awk -v a="$r_wresync" -v b="$r_wback" 'BEGIN{printf "%.2f", a/b}') |"
} | tee "$(bench_results "$root/bench/resync/results.md")"
