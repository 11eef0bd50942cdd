#!/usr/bin/env bash
# Issue 44, still failing on today's code: a stale client after a move
# (one that did not ask control where organization 1 lives) gets OBM01
# naming the new cell for a write that names the moved organization: an
# INSERT whose foreign key refers to it (today 23503), an UPDATE or DELETE
# of its rows by organization (today 0 rows, without a word).  Not run by
# run-tests.sh (docs/testing.md); it moves to test/integration/ with its
# fix.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/test/harness/check.sh"
trap move_cells_stop EXIT
move_cells_setup || exit 1

relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
check "organization 1 moves to eu" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'" complete
echo "A stale client writes to organization 1 in us after the move"
check "an INSERT whose foreign key refers to organization 1: OBM01, not 23503" \
    test "$(ON_USER=move_app state_of us "INSERT INTO project (organization_id, slug) VALUES (1, 'stale')")" = OBM01
check "an UPDATE of its rows by organization: OBM01, not 0 rows" \
    test "$(ON_USER=move_app state_of us "UPDATE project SET slug = 'stale' WHERE organization_id = 1")" = OBM01
check "a DELETE of its rows by organization: OBM01" \
    test "$(ON_USER=move_app state_of us "DELETE FROM member WHERE organization_id = 1")" = OBM01
check "organization 2's writes in us go on" \
    test "$(ON_USER=move_app state_of us "UPDATE project SET slug = slug WHERE organization_id = 2")" = ok

checks_done relocation_stale.sh
