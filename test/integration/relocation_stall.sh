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
move_cells_setup || exit 1
on us -c "CREATE TABLE public.audit_note (id int); GRANT INSERT ON public.audit_note TO move_app" >/dev/null
# An application session idle in a transaction, for the whole move.
(echo "BEGIN; INSERT INTO public.audit_note VALUES (1);"; sleep 600) |
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
ON_USER=move_app on us -c "UPDATE team SET name = 'during the cancel' WHERE id = 1" >/dev/null
waited=$((($(date +%s%N) - started) / 1000000))
wait "$long" "$cancel"
echo "# a write to team during the cancel waited $waited ms"
check "a write of another table during the cancel waits under a second (not the long transaction's 4 s)" \
    test "$waited" -lt 1000
check "  ... and the cancel completes once that transaction ends" \
    test "$(on control -c "SELECT state FROM outbox.relocations WHERE relocation = '$relocation2'")" = cancelled ||
    cat "$work/cancel" >&2
checks_done relocation_stall
