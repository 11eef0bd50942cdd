#!/usr/bin/env bash
# A user deleted in control while an organization with a member of that
# user moves between cells (found by the soak, test/soak/soak.sh, seed 7):
# the target recorded the user's tombstone and walked it before the
# organization's rows came, finding no member; the source's cascade had not
# run before its fence, which then refused it; the member arrived in the
# target after the target's walk, an orphan for good (and came back with
# the organization on its way home).  A target now walks again, after its
# cutover, the tombstones that the rows it received refer to.
#
# Made deterministic: eu's row walk is past the ids the move brings (its
# own rows come from a higher range), us's worker is off until the move is
# over (its cascade cannot run before), and the move holds itself before
# the import until eu's cascade has walked the tombstone.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/test/harness/check.sh"
trap move_cells_stop EXIT
move_cells_setup || exit 1
on control -c "INSERT INTO auth_user SELECT i, 'user ' || i FROM generate_series(101, 430) i" >/dev/null || exit 1
for cell in us eu; do
    on "$cell" >/dev/null <<'SQL' || exit 1
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
SQL
done
# A member of organization 1 that no alert rule refers to (one that does
# cannot be deleted: the cascade fails, visibly) and its user; and another.
read -r member user < <(on us -F ' ' -c "SELECT m.id, m.user_id FROM member m WHERE m.organization_id = 1
    AND NOT EXISTS (SELECT FROM alert_rule a WHERE a.owner_id = m.id) ORDER BY m.id LIMIT 1")
members_of_1=$(on us -c "SELECT count(*) FROM member WHERE organization_id = 1")
check "us holds member $member of organization 1, user $user's, and $members_of_1 in all" \
    test "$(on us -c "SELECT organization_id FROM member WHERE id = $member")" = 1
# eu's row walk has passed a member of its own organization 3, from eu's
# id range, far above us's: the members imported later come in below it,
# where that walk will not look again.
eu_member=$(on eu -c "INSERT INTO member (organization_id, user_id) VALUES (3, 430) RETURNING id")
check "eu's cascade walks its rows past its own member $eu_member" \
    wait_on eu 60 "SELECT row_watermark >= $eu_member FROM outbox.foreign_keys WHERE column_name = 'user_id'" t
worker_set us off
on control >/dev/null <<'SQL'
CREATE SEQUENCE public.hold_import;
CREATE FUNCTION public.hold_at_step() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public AS $$
BEGIN
    IF nextval('public.hold_import') = 1 THEN
        NEW.state := 'paused';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER hold_at_step BEFORE UPDATE ON outbox.organization_moves FOR EACH ROW
    WHEN (OLD.step <> NEW.step AND NEW.step = 'import') EXECUTE FUNCTION public.hold_at_step();
SQL
relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
check "the move of organization 1 to eu holds before its import" \
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$relocation'" "paused import"
on control -c "DELETE FROM auth_user WHERE id = $user" >/dev/null
check "eu records user $user's tombstone" \
    wait_on eu 60 "SELECT count(*) FROM outbox.cell_tombstone WHERE table_name = 'auth_user' AND object_identifier = $user" 1
check "  ... and its cascade walks past it, finding no member of it in eu" \
    wait_on eu 60 "SELECT pending_tombstones || ' ' || state FROM outbox.foreign_keys WHERE column_name = 'user_id'" "0 idle"
check "us still holds member $member: its cascade has not run (its worker is off)" \
    test "$(on us -c "SELECT count(*) FROM member WHERE id = $member")" = 1
on control -c "SELECT outbox.resume_relocation('$relocation')" >/dev/null
check "the move completes" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'" complete
on us -c "ALTER SYSTEM RESET outbox.worker_enabled" -c "SELECT pg_reload_conf()" >/dev/null
check "us holds nothing of organization 1" \
    test "$(on us -c "SELECT count(*) FROM member WHERE organization_id = 1")" = 0
check "eu cascades user $user's member it received (the old code kept it for good)" \
    wait_on eu 60 "SELECT count(*) FROM member WHERE user_id = $user" 0
check "  ... and keeps the other members of organization 1" \
    test "$(on eu -c "SELECT count(*) FROM member WHERE organization_id = 1")" = $((members_of_1 - 1))
check "  ... its cascade idle again" \
    wait_on eu 30 "SELECT pending_tombstones || ' ' || state FROM outbox.foreign_keys WHERE column_name = 'user_id'" "0 idle"
checks_done relocation_cascade.sh
