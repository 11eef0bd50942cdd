#!/usr/bin/env bash
# Separate clusters benchmark: messages per second from control to two
# cells (test/harness/cells.sh: three clusters on this machine, the links through
# postgres_fdw servers), until the cells' handlers have applied every one,
# against the control worker's local drain of as many messages with the
# same no-op PL/pgSQL handler, side by side in one run.  Each fill: 1,000
# shards x 100 rows of distinct objects (100,000 messages), for cell
# "local" (no server: drained in control) or half for "us", half for "eu".
#
#   bash bench/cells/run.sh        # RUNS=3 ROWS_PER_SHARD=100
#   SMOKE=1 bash bench/cells/run.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cells.sh"
source "$root/bench/smoke.sh"
RUNS=${RUNS:-3}
ROWS_PER_SHARD=${ROWS_PER_SHARD:-100}
if [[ -n ${SMOKE:-} ]]; then RUNS=1 ROWS_PER_SHARD=2; fi
trap cells_stop EXIT
install_extension "$root"
# The workers' default naptime (1 s): the fill wakes control's worker, and
# outbox.receive() a cell's.  (A 10 ms naptime, as this benchmark used
# before, made each idle worker take a third of a core on this machine.)
cells_start "shared_buffers = 512MB" "max_wal_size = 4GB" "autovacuum = off"
cells_setup
for name in "${CELL_NAMES[@]}"; do
    on "$name" >/dev/null <<'SQL'
SELECT outbox.register_category('BENCH', 'Organization', 5);
SELECT outbox.register_cell('local');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT outbox.register_handler('BENCH', 'noop(outbox.message)');
SQL
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
messages=$((1000 * ROWS_PER_SHARD))
fill() { # cell expression (r: row number)
    on control -c "INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier, payload, cell_name)
                   SELECT 0, s, 5, s * 100000 + r, jsonb_build_object('r', r), $1
                     FROM generate_series(1, 1000) s, generate_series(1, $ROWS_PER_SHARD) r ORDER BY r, s" \
               -c "SELECT outbox.wake_worker()" >/dev/null
}
# Waits until cell $1's handler has delivered $2 BENCH messages in all and
# its outbox has no control row left, polling inside one session (pg_sleep
# 20 ms): a new psql and backend for each look, as this benchmark did
# before, took a quarter of both cores while the links ran (perf, 2 cores).
# At most 300 s.
wait_delivered() {
    on "$1" -c "DO \$\$ DECLARE
        deadline constant timestamptz := clock_timestamp() + interval '300 s';
    BEGIN
        WHILE (SELECT delivered FROM outbox.stats WHERE category_name = 'BENCH') < $2
              OR EXISTS (SELECT FROM outbox.control_outbox) LOOP
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'waited 300 s';
            END IF;
            PERFORM pg_sleep(0.02);
        END LOOP; END \$\$" >/dev/null ||
        bench_fail "$1 has not delivered $2 BENCH messages, or has a control row left"
}
delivered() { on "$1" -c "SELECT delivered FROM outbox.stats WHERE category_name = 'BENCH'"; }
declare -A rate
for run in $(seq "$RUNS"); do
    local_before=$(delivered control)
    start=$(date +%s%N); fill "'local'"
    wait_delivered control $((local_before + messages))
    rate[local]+="$((messages * 1000 / $(ms_since "$start"))) "
    us_before=$(delivered us) eu_before=$(delivered eu)
    start=$(date +%s%N); fill "CASE WHEN s % 2 = 0 THEN 'us' ELSE 'eu' END"
    wait_delivered us $((us_before + messages / 2)) & us_wait=$!
    wait_delivered eu $((eu_before + messages / 2))
    wait $us_wait || exit 1 # it said why
    wait_delivered control 0
    rate[linked]+="$((messages * 1000 / $(ms_since "$start"))) "
    echo "run $run: local ${rate[local]}| linked ${rate[linked]}" >&2
done
applied=$(( $(on us -c "SELECT delivered FROM outbox.stats WHERE category_name = 'BENCH'") + $(on eu -c "SELECT delivered FROM outbox.stats WHERE category_name = 'BENCH'") ))
[[ $applied == $((RUNS * messages)) ]] || bench_fail "the cells delivered $applied, not $((RUNS * messages))"
med() { echo ${rate[$1]} | tr ' ' '\n' | median; }
{
echo "# pg_outbox separate clusters benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(on control -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/cells/run.sh\` RUNS=$RUNS"
echo
echo "Three clusters on this one machine; $messages messages (1,000 shards x $ROWS_PER_SHARD distinct objects) a fill, timed from"
echo "the fill (one INSERT into control's outbox) until each cluster's handler has counted its messages delivered and no row is left in any outbox (waits polled inside one session a cluster); no-op PL/pgSQL handler; medians of $RUNS runs."
echo
echo "| delivered | messages/s | vs local |"
echo "|---|---:|---:|"
echo "| by control's worker to its own handler (cell \`local\`, no server) | $(med local) | 1.00 |"
echo "| from control to cells us and eu (links), applied by the cells' workers | $(med linked) | $(awk -v a="$(med linked)" -v b="$(med local)" 'BEGIN{printf "%.2f", a/b}') |"
echo
echo "Runs: local ${rate[local]}; linked ${rate[linked]}."
} | tee "$(bench_results "$root/bench/cells/results.md")"
