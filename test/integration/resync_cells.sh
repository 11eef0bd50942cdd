#!/usr/bin/env bash
# Targeted re-sync across clusters (issue 49; test/harness/cells.sh: one
# control, cells us and eu, linked):
#   1. on control, a re-sync of User-scoped rows reaches every cell as
#      ordinary control-silo messages through the links, with their
#      current payload, and no other row is sent;
#   2. run in cell eu, a re-sync of one organization reaches control
#      through eu's link, and no other organization is sent;
#   3. a cell refuses to re-sync an organization that is moving, naming
#      the move.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cells.sh"
trap cells_stop EXIT
source "$root/test/harness/check.sh"
cells_start || exit 1
cells_setup || { echo "setup failed"; exit 1; }
q() { on control "$@"; } # wait_for polls control

on control -c "INSERT INTO auth_user SELECT g, 'user ' || g FROM generate_series(1, 50) g"
cells_place us 1 10
cells_place eu 1001 1010
on us -c "INSERT INTO organization SELECT g, 'us org ' || g FROM generate_series(1, 10) g"
on eu -c "INSERT INTO organization SELECT g, 'eu org ' || g FROM generate_series(1001, 1010) g"
for cell in us eu; do
    check "control's users reach cell $cell" wait_on $cell 60 \
        "SELECT count(*) FROM applied WHERE category = 1" 50
done
check "the cells' organizations reach control" wait_on control 60 \
    "SELECT count(*) FROM applied WHERE category = 0" 20

# 1. Control: users 7 and 8 renamed (captured: nothing bypasses capture),
# delivered, then sent again by a re-sync: each cell gets each once more,
# with the current name, and nothing else.
on control -c "UPDATE auth_user SET name = 'renamed ' || id WHERE id IN (7, 8)"
for cell in us eu; do
    check "the rename reached $cell" wait_on "$cell" 60 \
        "SELECT count(*) FROM applied WHERE category = 1" 52
done
job=$(on control -c "SELECT outbox.resync('auth_user', '{7, 8}')")
check "control's job is done: a row for each user and cell" wait_on control 60 \
    "SELECT state || ' ' || outbox_rows FROM outbox.resyncs WHERE job = $job" "done 4"
for cell in us eu; do
    check "cell $cell got users 7 and 8 again, as control-silo messages for it" wait_on "$cell" 60 \
        "SELECT string_agg(object || ':' || (payload->>'name') || ':' || cell, ',' ORDER BY object)
           FROM applied WHERE category = 1 AND n > 52" \
        "7:renamed 7:$cell,8:renamed 8:$cell"
done
sleep 1
for cell in us eu; do
    check "and no other user in $cell" \
        [ "$(on "$cell" -c "SELECT count(*) FROM applied WHERE category = 1")" = 54 ]
done

# 2. Cell eu, with its relocation scopes declared: organization 1003 sent
# again by a re-sync of that organization reaches control.
on eu >/dev/null <<'SQL'
SELECT outbox.set_relocation_scope('organization', '{Organization}');
SELECT outbox.set_relocation_root('Organization', 'organization');
SQL
job=$(on eu -c "SELECT outbox.resync_organization(1003)")
check "eu's job is done" wait_on eu 60 \
    "SELECT state || ' ' || rows_total FROM outbox.resyncs WHERE job = $job" "done 1"
check "control got organization 1003 again, through eu's link" wait_on control 60 \
    "SELECT count(*) || ' ' || max(payload->>'name') FROM applied WHERE category = 0 AND object = 1003" \
    "2 eu org 1003"
sleep 1
check "and no other organization" \
    [ "$(on control -c "SELECT count(*) FROM applied WHERE category = 0")" = 21 ]

# 3. A move of organization 1004 under way in eu (its source side): refused.
on eu -c "INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step)
          VALUES ('00000000-0000-0000-0000-000000001004', 1004, 'source', 'eu', 'us', 'catch_up')" >/dev/null
out=$(on eu -c "SELECT outbox.resync_organization(1004)" 2>&1)
check "a moving organization is refused, naming the move" grep -q \
    "organization 1004 is moving: move 00000000-0000-0000-0000-000000001004 from cell eu to cell us" <<<"$out"
checks_done resync_cells
