#!/usr/bin/env bash
# No owner stalls control (issue 44; docs/relocation.md, "Moving an
# organization between cells"), on the three clusters of
# test/harness/move_cells.sh:
#   - a table owner's trigger in the target that sleeps a minute, fired by
#     the move's own import: the step fails in the cell at
#     outbox.owner_code_timeout, naming it, and the move says so;
#   - meanwhile control's handler applies another organization's change
#     from us within seconds: control's delivery does not wait on a cell's
#     move step (the steps run in the process "pg_outbox mover", apart from
#     the worker);
#   - the owner drops the trigger: the move completes, while an application
#     session in us sits idle in a transaction that wrote a table of no
#     organization: the fence waits only for transactions on the moving
#     tables (on 0.9.0 it waited for every transaction of the database:
#     the move stayed at in_flight as long as that session).
# On 0.9.0 the step waited outbox.link_timeout (30 s) in control's worker,
# whose delivery stopped as long, and the cell's backend slept on.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/test/harness/check.sh"
idle=
trap 'kill $idle 2>/dev/null; move_cells_stop' EXIT
# Every lock wait of 10 ms or more is logged, with the waiter's
# application_name (the last part's writer names itself).
move_cells_setup "log_lock_waits = on" "deadlock_timeout = 10ms" "log_min_messages = log" \
    "log_line_prefix = '%m [%p] %a '" || exit 1
on us -c "CREATE TABLE public.audit_note (id int); GRANT INSERT ON public.audit_note TO move_app" >/dev/null
# An application session idle in a transaction, for the whole move.
# (Its input ends when this script does: a plain sleep outlived the script
# and held the caller's output open for ten minutes.)
(echo "BEGIN; INSERT INTO public.audit_note VALUES (1);"
 while kill -0 $$ 2>/dev/null; do sleep 1; done) |
    ON_USER=move_app on us >/dev/null 2>&1 &
idle=$!

echo "A table owner's slow trigger in the target, fired by the move's import"
on eu >/dev/null <<'SQL'
CREATE FUNCTION public.slow_member() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(60);
    RETURN NULL;
END $$;
CREATE TRIGGER slow_member AFTER INSERT ON member
    FOR EACH STATEMENT EXECUTE FUNCTION public.slow_member();
SQL
rows_before=$(on us -c "$rows_of_1")
relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
check "the move's import in eu reaches the owner's trigger" \
    wait_on eu 120 "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'PgSleep'" t
sleep 1
on us -c "UPDATE project SET slug = 'while eu sleeps' WHERE id = 721" >/dev/null
check "meanwhile control's handler applies organization 2's change from us within 5 s" \
    wait_on control 5 "SELECT count(*) FROM applied WHERE payload->>'slug' = 'while eu sleeps'" 1 \
    || show_move "$relocation"
check "the step fails in eu at outbox.owner_code_timeout, and the move says so" \
    wait_on control 40 "SELECT error LIKE '%owner_code_timeout%' FROM outbox.relocations WHERE relocation = '$relocation'" t \
    || on control -c "SELECT error FROM outbox.relocations WHERE relocation = '$relocation'" >&2
check "  ... no backend of eu sleeps on in the owner's trigger after it" \
    wait_on eu 10 "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND now() - query_start > interval '8 s'" 0
check "  ... and the move waits, not cancelled" \
    test "$(on control -c "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'")" != cancelled
on eu -c "DROP TRIGGER slow_member ON member" >/dev/null
check "the owner drops the trigger: the move completes, a session idle in a transaction in us meanwhile" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'" complete \
    || show_move "$relocation"
check "  ... every row of organization 1 in eu, none left in us" \
    test "$(on eu -c "$rows_of_1"):$(on us -c "$rows_of_1")" = "$rows_before:0"
check "  ... that session still idle in its transaction" \
    test "$(on us -c "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND usename = 'move_app'")" = 1

echo "A cancel behind another tenant's long transaction (organization 2, held at its catch-up)"
hold_moves_at catch_up
relocation2=$(on control -c "SELECT outbox.relocate_organization(2, 'eu')")
check "the move of organization 2 holds at its catch-up" \
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$relocation2'" "paused catch_up"
# A transaction of organization 2's writer holds project for 4 s; the
# cancel comes meanwhile; then another write of it, to team.
(echo "BEGIN; UPDATE project SET slug = slug WHERE id = 721; SELECT pg_sleep(4); COMMIT;" |
    ON_USER=move_app on us >/dev/null 2>&1) &
long=$!
sleep 0.5
(on control -c "SELECT outbox.cancel_relocation('$relocation2')" >"$work/cancel" 2>&1) &
cancel=$!
sleep 0.5
started=$(date +%s%N)
PGAPPNAME=tenant2 ON_USER=move_app on us -c "UPDATE team SET name = 'during the cancel' WHERE id = 1" >/dev/null
waited=$((($(date +%s%N) - started) / 1000000))
wait "$long" "$cancel"
echo "# a write to team during the cancel waited $waited ms"
check "a write of another table during the cancel waits under a second (not the long transaction's 4 s)" \
    test "$waited" -lt 1000
check "  ... and waited on no lock for 10 ms (us's log_lock_waits: the cancel takes none)" \
    test "$(grep -c ' tenant2 .*still waiting' "${CELL_DIR[us]}/server.log")" = 0
check "  ... and the cancel completes once that transaction ends" \
    test "$(on control -c "SELECT state FROM outbox.relocations WHERE relocation = '$relocation2'")" = cancelled ||
    cat "$work/cancel" >&2

echo "A move's prepare while a transaction of the moving organization is open (organization 1 back to us)"
# Organization 1's transaction in eu inserts an event and stays open 3 s.
# The move of organization 1 from eu starts meanwhile, while organization
# 3's writer, named tenant3, writes event and organization every 20 ms.
#   - The move's triggers are in place in eu (the first move left them),
#     so the INSERT's statement found no move to log for.  On 0.9.0 the
#     prepare then took no lock and the export did not wait: the event,
#     committed after the export's snapshot, was in neither the export nor
#     the change log, and stayed behind in eu (the soak's lost write, seed
#     1930100516: its move then retried its delete for good, the event's
#     foreign key refusing its project's deletion).  The export waits for
#     that transaction now.
#   - On 0.9.0 the prepare installed the triggers when they were not in
#     place, its table locks queued 50 ms at a time behind such a
#     transaction, and tenant3's writes queued behind them (the issue's
#     goal: another tenant never waits on a move for 50 ms).  They are in
#     place ahead of any move now, and the prepare takes no lock.
on control -c "DROP TRIGGER hold_at_catch_up ON outbox.organization_moves" >/dev/null
eu_project=$(on eu -c "SELECT min(id) FROM project WHERE organization_id = 3")
(echo "BEGIN; INSERT INTO event (project_id, message) VALUES (2, 'open across the prepare'); SELECT pg_sleep(3); COMMIT;" |
    ON_USER=move_app on eu >/dev/null 2>&1) &
long=$!
sleep 0.3
(for _ in $(seq 150); do
    echo "BEGIN; INSERT INTO event (project_id, message) VALUES ($eu_project, 'tenant3');"
    echo "UPDATE organization SET slug = slug WHERE id = 3; COMMIT;"
    sleep 0.02
done | PGAPPNAME=tenant3 ON_USER=move_app on eu >"$work/tenant3" 2>&1) &
tenant3=$!
sleep 0.3
relocation3=$(on control -c "SELECT outbox.relocate_organization(1, 'us')")
wait "$long" "$tenant3"
check "tenant3's writes all committed" \
    test "$(on eu -c "SELECT count(*) FROM event WHERE message = 'tenant3'"):$(grep -c ERROR "$work/tenant3")" = 150:0
check "  ... and none waited on a lock for 10 ms (eu's log_lock_waits)" \
    test "$(grep -c ' tenant3 .*still waiting' "${CELL_DIR[eu]}/server.log")" = 0 ||
    grep ' tenant3 .*still waiting' "${CELL_DIR[eu]}/server.log" | head -5 >&2
check "the move of organization 1 back to us completes" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation3'" complete \
    || show_move "$relocation3"
check "  ... the event of the transaction open across its prepare is in us, and not left in eu" \
    test "$(on us -c "SELECT count(*) FROM event WHERE message = 'open across the prepare'"):$(on eu -c "SELECT count(*) FROM event WHERE message = 'open across the prepare'")" = 1:0

echo "A REPEATABLE READ writer whose snapshot is older than the fence (organization 1, us to eu again)"
# Its snapshot is taken before the move starts; it has only read, so the
# move does not wait for it.  Its write after the fence must be refused
# as any other: the move's triggers read the fence with the latest
# snapshot, not the writer's (else the write would pass after the last
# catch-up read the log, and stay behind in us).
hold_moves_at in_flight
(echo "\\set VERBOSITY verbose"
 echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM project WHERE organization_id = 1;"
 while [[ ! -e $work/rr_go ]]; do sleep 0.1; done
 echo "UPDATE project SET slug = 'repeatable read' WHERE id = 2;"
 echo "COMMIT;") | ON_USER=move_app on us >"$work/rr.out" 2>&1 &
rr=$!
sleep 1
relocation4=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
check "the move holds at in_flight, us fenced" \
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$relocation4'" "paused in_flight"
touch "$work/rr_go"
wait "$rr"
check "  ... the REPEATABLE READ transaction's write is refused (OBM01)" \
    grep -q "ERROR: *OBM01" "$work/rr.out" || cat "$work/rr.out" >&2
on control -c "DROP TRIGGER hold_at_in_flight ON outbox.organization_moves" >/dev/null
on control -c "SELECT outbox.resume_relocation('$relocation4')" >/dev/null
check "  ... the move completes" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation4'" complete
check "  ... and the refused name is in neither cell" \
    test "$(on eu -c "SELECT count(*) FROM project WHERE slug = 'repeatable read'"):$(on us -c "SELECT count(*) FROM project WHERE slug = 'repeatable read'")" = 0:0
checks_done relocation_stall
