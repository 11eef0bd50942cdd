#!/usr/bin/env bash
# Moving an organization between cells: outbox.relocate_organization under
# a client's writes, side by side in each run with the cold way an operator
# would take without it (the organization's writes stopped, part 1's export
# to a file, part 2's import in the other cell, organization_cells
# switched).  Three clusters on this machine (test/harness/cells.sh):
# control, us and eu; us holds two organizations of about 100,000 rows each
# (test/harness/organization_*.sql).  The online move takes organization 1
# while test/harness/move_writer.py writes to it at RATE writes a second
# (200), routing by outbox.organization_cell(), and organization 2's
# writer, another tenant of us, writes beside it at the same rate; the
# cold way then takes organization 2.
#
#   bash bench/relocation/move.sh        # RUNS=1 RATE=200
#   SMOKE=1 bash bench/relocation/move.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/relocation/move-results.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/bench/smoke.sh"
RUNS=${RUNS:-1}
RATE=${RATE:-200}
SCALE=1 # organization_data.sql's sizes
BEFORE_S=3 AFTER_S=2 # the writers' seconds before the online move and after it
# organization_data.sql multiplies its sizes by the psql variable scale as
# written (N * :scale): 1/100 keeps each a whole number, about 1,000 rows an
# organization.
if [[ -n ${SMOKE:-} ]]; then RUNS=1 SCALE=1/100 BEFORE_S=1 AFTER_S=1; fi
writers=
# writer= too: move_cells_stop's kill of a writer already gone would end
# the trap (set -e) before it stops the clusters.
trap 'kill $writers 2>/dev/null || true; writer=; move_cells_stop' EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Whole milliseconds: the table sums them in shell arithmetic (an even RUNS gave
# a half, which it refused).
median() { sort -n | awk '{a[NR]=$1} END {printf "%d\n", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

install_extension "$root"

for run in $(seq "$RUNS"); do
    move_cells_schema "shared_buffers = 512MB" "max_wal_size = 4GB" || exit 1
    on us -v scale="$SCALE" -f "$root/test/harness/organization_data.sql" >/dev/null
    on eu -c "SELECT setval(pg_get_serial_sequence(t, 'id'), 5000000)
                FROM unnest('{organization,team,project,environment,event,member,dashboard,widget,alert_rule}'::text[]) t" >/dev/null
    on control -c "SELECT outbox.set_organization_cell(1, 'us'), outbox.set_organization_cell(2, 'us')" >/dev/null
    rows_1=$(on us -c "$(rows_of 1)")
    rows_2=$(on us -c "$(rows_of 2)")

    # Online: organization 1 under RATE writes a second (to its project 2),
    # and organization 2, another tenant of us, under as many from a
    # process of its own: each write's wait in $work/latency.
    rm -f "$work/stop" "$work/writes" "$work/latency"
    LATENCY=$work/latency start_writer 1:2 "$RATE"
    writer_1=$writer
    LATENCY=$work/latency start_writer "2:$(on us -c "SELECT min(id) FROM project WHERE organization_id = 2")" "$RATE"
    writers="$writer_1 $writer"
    sleep $BEFORE_S
    start=$(now_ms)
    relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')") || bench_fail "relocate_organization failed"
    max_lag=0
    : >"$work/steps"
    deadline=$((SECONDS + 600)) # the move took 72 s at full size
    while true; do
        row=$(on control -c "SELECT state, step, coalesce(lag, 0) FROM outbox.relocations WHERE relocation = '$relocation'") ||
            bench_fail "psql failed polling the move"
        IFS='|' read -r state step lag <<<"$row"
        echo "$(now_ms) $step" >>"$work/steps"
        [[ $state == complete ]] && break
        ((SECONDS < deadline)) || bench_fail "the move is not complete after 600 s: $state at $step"
        [[ $step == catch_up ]] && ((lag > max_lag)) && max_lag=$lag
        sleep 0.1
    done
    online_ms=$(($(now_ms) - start))
    # How long each step took, as the polls saw it.
    steps=$(awk -v t0="$start" '{if ($2 != last) {if (last != "") printf "%s %d ms, ", last, $1 - from; last = $2; from = $1}}' "$work/steps")
    sleep $AFTER_S
    touch "$work/stop"
    for w in $writers; do
        wait $w || bench_fail "a writer failed: $(tail -3 "$work/writer.err")"
    done
    writers= writer=
    longest() { awk -v org="$1" '$1 == org && $2 > m { m = $2 } END { printf "%d", m * 1000 }' "$work/latency"; }
    wait_1=$(longest 1)
    wait_2=$(longest 2)
    # Organization 2's writes in us before the cold way takes it.
    on us -c "DELETE FROM event WHERE message LIKE 'w2-%'" >/dev/null
    pause_ms=$(on control -c "SELECT round(extract(epoch FROM write_pause) * 1000) FROM outbox.relocations WHERE relocation = '$relocation'")
    copy_done_ms=$(on control -c "SELECT round(extract(epoch FROM fenced_at - started_at) * 1000) FROM outbox.organization_moves WHERE relocation = '$relocation'")
    switched_ms=$(on control -c "SELECT round(extract(epoch FROM lifted_at - started_at) * 1000) FROM outbox.organization_moves WHERE relocation = '$relocation'")
    # Organization 1's writer's (organization 2's writes stay in us).
    writes=$(awk -F'\t' '$1 == 1 && $2 == "insert"' "$work/writes" | wc -l)
    longest_retry_ms=$(awk -F'\t' '$1 == 1 && $2 == "refused" {if ($3 > m) m = $3} END {printf "%d", m * 1000}' "$work/writes")
    missing=$(comm -23 <(comm -23 <(awk -F'\t' '$1 == 1 && $2 == "insert" {print $3}' "$work/writes" | sort) \
                                  <(awk -F'\t' '$1 == 1 && $2 == "delete" {print $3}' "$work/writes" | sort)) \
                       <(on eu -c "SELECT id FROM event WHERE message LIKE 'w1-%'" | sort) | wc -l)
    ((missing == 0)) || bench_fail "$missing acknowledged writes of organization 1 missing in eu"

    # Cold: organization 2, its writes stopped, exported, loaded and
    # imported in eu (new keys: part 2's import), then switched.
    cold_relocation=$(on control -c "SELECT gen_random_uuid()")
    start=$(now_ms)
    on us -c "COPY (SELECT '$cold_relocation', e.* FROM outbox.export_organizations('{2}') e ORDER BY e.ordinal) TO STDOUT" >"$work/export.tsv" ||
        bench_fail "the cold export failed"
    export_ms=$(($(now_ms) - start))
    on eu -c "COPY outbox.relocation_rows FROM STDIN" <"$work/export.tsv" || bench_fail "the cold load failed"
    load_ms=$(($(now_ms) - start - export_ms))
    on eu -c "CALL outbox.import_organizations('$cold_relocation')" || bench_fail "the cold import failed"
    import_ms=$(($(now_ms) - start - export_ms - load_ms))
    on control -c "SELECT outbox.set_organization_cell(2, 'eu')" >/dev/null || bench_fail "the cold switch failed"
    cold_ms=$(($(now_ms) - start))

    echo "$steps" >"$work/steps_$run"
    # The online move's copy and import steps (as the polls saw them).
    step_ms() { echo "$steps" | tr ',' '\n' | awk -v s="$1" '$1 == s {print $2}'; }
    copy_step_ms=$(step_ms copy)
    import_step_ms=$(step_ms import)
    echo "$rows_1 $rows_2 $online_ms $pause_ms $copy_done_ms $max_lag $writes $longest_retry_ms $missing $export_ms $load_ms $import_ms $cold_ms $switched_ms $wait_1 $wait_2 ${copy_step_ms:-0} ${import_step_ms:-0}" >>"$work/runs"
    cells_stop
    rm -f "$work/env"
done

read -r rows_1 rows_2 _ <"$work/runs"
col() { awk -v c="$1" '{print $c}' "$work/runs" | median; }
online=$(col 3) pause=$(col 4) copied=$(col 5) lag=$(col 6) writes=$(col 7) retry=$(col 8) missing=$(col 9)
export_ms=$(col 10) load=$(col 11) import=$(col 12) cold=$(col 13) switched=$(col 14)
wait_1=$(col 15) wait_2=$(col 16) copy_step=$(col 17) import_step=$(col 18)
rows_moved=$((copy_step + import_step)) rows_cold=$((load + import))
version=$(awk -F"'" '/default_version/ {print $2}' "$root/extension/pg_outbox.control")
machine="$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(awk '/MemTotal/ {printf "%d GiB", $2/1048576}' /proc/meminfo) | $("$PG_BIN/postgres" --version | awk '{print "PostgreSQL " $3}') | pg_outbox $version"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
table="# Moving an organization between cells

$machine | \`bash bench/relocation/move.sh\` RUNS=$RUNS RATE=$RATE

Three clusters on this machine (control, us, eu). Organization 1 ($rows_1 rows over nine tables) moved online from us to eu by \`outbox.relocate_organization\` while a client writes to it at $RATE writes a second; organization 2 ($rows_2 rows) moved the cold way, its writes stopped throughout. Medians of $RUNS runs, both ways in every run; times by the client's clock, the write pause by control's (\`outbox.relocations.write_pause\`: from the source's fence to the target's lift).

| | online (\`relocate_organization\`) | cold (writes stopped: export, load, import, switch) | online / cold |
|---|---:|---:|---:|
| organization's writes refused for | **$pause ms** (longest client retry $retry ms) | **$cold ms** | **$(ratio "$pause" "$cold")** |
| start to the organization living in eu (its writes taken there) | $switched ms | $cold ms | $(ratio "$switched" "$cold") |
| of which before the fence (prepare, export, copy, import, catch-up) | $copied ms | | |
| start to the move complete (the organization's rows deleted from us) | $online ms | | |
| largest catch-up lag seen (changes left to apply) | $lag | | |
| client writes acknowledged during the run | $writes, $missing missing in eu | none (stopped) | |
| longest wait of one write, the moving organization's writer (from its first try to its commit, refusals included) | $wait_1 ms | its writes stopped for $cold ms | $(ratio "$wait_1" "$cold") |
| longest wait of one write, another organization's writer in us (a process of its own, $RATE writes a second) | $wait_2 ms | | |
| cold phases | | export $export_ms ms, load $load ms, import $import ms | |
| the rows into eu: online the steps copy ($copy_step ms) and import ($import_step ms), keys kept, under the writes; cold the load and the import, new keys | $rows_moved ms | $rows_cold ms | $(ratio "$rows_moved" "$rows_cold") |

Steps of the online move (last run, as control's relocations view showed them every 0.1 s): $(cat "$work/steps_$RUNS")

The online move keeps the keys and removes the organization from us afterwards (its delete step is in the total); the cold way's import takes new keys, as part 2's import does, and leaves the organization's rows in us for the operator to delete (not in its time)."
echo "$table"
echo "$table" >"$(bench_results "$root/bench/relocation/move-results.md")"
