#!/usr/bin/env bash
# A move you can trust with a real cell (issue 44; docs/relocation.md,
# "Moving an organization between cells"; SPEC sections 9 and 12), on the
# three clusters of test/harness/move_cells.sh, each case as the role that
# tries it:
#   - control's link role in a cell drives only moves control recorded: a
#     prepare of a made-up move, as source and as target, or of a recorded
#     move with another organization, is refused (42501) and changes
#     nothing (the cell asks control over its own link); every other
#     operation of a made-up move is refused (42704) and changes nothing;
#   - writes through a partition during a move: an UPDATE in the source
#     reaches the target, an INSERT in the fenced target and a TRUNCATE of
#     a partition are refused as through the parent; so are writes through
#     a partition attached while the move runs;
#   - the source's application role giving a row of the moving
#     organization the key of another organization's member in the target:
#     the catch-up refuses to overwrite it (the move waits, saying why),
#     and goes on once the row is gone from the source;
#   - a table owner's trigger in the target, fired by the move's own
#     import, renaming another organization: captured, control hears of it;
#   - a compromised target answering a fork's import with the source's
#     root: control refuses it and organization 2 stays where it lives;
#   - a compromised source's export (or control relaying one) whose root
#     is another organization, manifest and checksum made to match: the
#     target refuses it (42501) before it writes a row (organization 1's
#     move back to us);
#   - writers of two other tenants, one in each cell, and of the moving
#     organization, each a process of its own, through the whole move:
#     their longest waits;
#   - a stale client after the move gets OBM01 naming the new cell for a
#     write that names the moved organization: an INSERT or UPDATE whose
#     foreign key refers to it (not 23503), an UPDATE or DELETE of its rows
#     by organization or of the root by its key (not "0 rows"), while
#     organization 2's writes go on.
# Each check failed on 0.9.0 but the TRUNCATE of the parent, the INSERT
# through the parent and the move completing (the other tenant's writer in
# the source waited 469 ms: the export held the move's row FOR UPDATE,
# which every writer's change log entry waits for).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/test/harness/check.sh"
writers=
trap 'kill $writers 2>/dev/null; move_cells_stop' EXIT
# Every lock wait of 10 ms or more is logged, with the waiter's
# application_name (a writer's: "writer <org>:<project>"), and each DDL
# statement with its process (which a wait names as the holder).
move_cells_setup "log_lock_waits = on" "deadlock_timeout = 10ms" "log_min_messages = log" \
    "log_line_prefix = '%m [%p] %a '" "log_statement = ddl" "log_connections = on" || exit 1

as_link() { ON_USER=outbox_link_control state_of "$@"; }
new_uuid() { on control -c "SELECT gen_random_uuid()"; }

echo "Control's link role in a cell drives only the moves control recorded"
fake=$(new_uuid)
triggers_sql="SELECT string_agg(tgname || ' ' || tgrelid::regclass || ' ' || tgenabled::text, ',' ORDER BY oid) FROM pg_trigger WHERE tgname LIKE 'pg_outbox_move_%'"
triggers_before=$(on us -c "$triggers_sql")
check "a prepare of a move control never recorded is refused (42501)" \
    test "$(as_link us "SELECT outbox.relocation_peer(1, 'prepare', '{\"relocation\": \"$fake\", \"side\": \"source\", \"organization\": 2, \"from\": \"us\", \"to\": \"eu\"}')")" = 42501
check "  ... us recorded nothing of it and changed no trigger for it" \
    test "$(on us -c "SELECT count(*) FROM outbox.organization_moves WHERE relocation = '$fake'"):$(on us -c "$triggers_sql")" = "0:$triggers_before"
fake_target=$(new_uuid)
check "a prepare as the target of a made-up move is refused in eu (42501)" \
    test "$(as_link eu "SELECT outbox.relocation_peer(1, 'prepare', '{\"relocation\": \"$fake_target\", \"side\": \"target\", \"organization\": 7, \"from\": \"us\", \"to\": \"eu\"}')")" = 42501
check "  ... eu fences nothing for it" \
    test "$(on eu -c "SELECT count(*) FROM outbox.organization_moves WHERE relocation = '$fake_target'")" = 0

# Every other operation of the peer function, with a made-up move, in
# either cell: refused (42704: no such move of this cell), and nothing
# written; a made-up operation: 22023; a cancel of a made-up move: nothing
# to cancel, nothing done.
state_sql="SELECT (SELECT count(*) FROM outbox.organization_moves) || '/' || (SELECT count(*) FROM outbox.move_changes)
             || '/' || (SELECT count(*) FROM outbox.relocation_rows) || '/' || (SELECT count(*) FROM outbox.move_members)
             || '/' || (SELECT count(*) FROM outbox.paused_shards) || '/' || (SELECT count(*) FROM organization)"
for cell in us eu; do
    before=$(on "$cell" -c "$state_sql")
    refused=
    for op in export chunk changes fence in_flight drained delete finish stage import apply lift release; do
        got=$(as_link "$cell" "SELECT outbox.relocation_peer(1, '$op', '{\"relocation\": \"$fake\", \"changes\": [], \"chunk\": {}}')")
        [[ $got == 42704 ]] || refused="$refused $op:$got"
    done
    check "in $cell, each step's operation of a made-up move is refused (42704)" test -z "$refused" ||
        echo "  not refused as 42704:$refused" >&2
    check "  ... a made-up operation too (22023)" \
        test "$(as_link "$cell" "SELECT outbox.relocation_peer(1, 'drop_everything', '{\"relocation\": \"$fake\"}')")" = 22023
    # Bad arguments, each refused with its SQLSTATE (and no crash: a uuid
    # copied as a varlena once killed the backend here).
    wrong=
    while IFS='|' read -r args want; do
        got=$(as_link "$cell" "SELECT outbox.relocation_peer($args)")
        [[ $got == "$want" ]] || wrong="$wrong [$args]:$got"
    done <<ARGS
NULL, 'export', '{"relocation": "$fake"}'|0A000
2, 'export', '{"relocation": "$fake"}'|0A000
1, 'export', NULL|22023
1, 'export', '[]'|22023
1, 'export', '"x"'|22023
1, 'export', '{}'|22004
1, 'export', '{"relocation": null}'|22004
1, 'export', '{"relocation": "nope"}'|22P02
1, 'export', '{"relocation": 5}'|22P02
1, NULL, '{"relocation": "$fake"}'|22023
1, 'taken', '{"relocation": "$fake", "keys": 5}'|22023
ARGS
    check "  ... bad arguments refused, each with its SQLSTATE" test -z "$wrong" ||
        echo "  refused otherwise:$wrong" >&2
    check "  ... a cancel of it does nothing" \
        test "$(ON_USER=outbox_link_control on "$cell" -c "SELECT outbox.relocation_peer(1, 'cancel', '{\"relocation\": \"$fake\"}')->>'deleted'")" = 0
    check "  ... and $cell's moves, change log, staging, members, paused shards and organizations are as they were" \
        test "$(on "$cell" -c "$state_sql")" = "$before"
done

echo "Writes through a partition while organization 1 moves"
# The move holds itself (paused) when it reaches its catch-up, before its
# fence, as relocation_move_faults.sh holds its moves: the target has the
# rows and is fenced, the source logs changes.
hold_moves_at catch_up
# Event 1 is project 2's, organization 1's; event_2 holds no row.
# Writers of organization 1 and of two other tenants, 2 in us and 3 in eu,
# each a process of its own, through the whole move: each write's wait in
# $work/latency.
eu_project=$(on eu -c "SELECT min(id) FROM project WHERE organization_id = 3")
writers=
for orgs in 1:2 2:721 3:$eu_project; do
    LATENCY=$work/latency start_writer "$orgs" 30
    writers="$writers $writer"
done
writer=
# The table owner's trigger in eu, fired by the move's own writes (the
# import of organization 1's members), renames organization 3: a change
# of another organization's row, which capture must tell control of.
on eu >/dev/null <<'SQL'
CREATE FUNCTION public.touch_organization_3() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.organization SET slug = 'touched by a move' WHERE id = 3;
    RETURN NULL;
END $$;
CREATE TRIGGER touch_organization_3 AFTER INSERT ON member
    FOR EACH STATEMENT EXECUTE FUNCTION public.touch_organization_3();
SQL
sleep 2
relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
check "the move holds at its catch-up, before its fence" \
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$relocation'" "paused catch_up" \
    || on control -c "SELECT error FROM outbox.relocations WHERE relocation = '$relocation'" >&2
on control -c "DROP TRIGGER hold_at_catch_up ON outbox.organization_moves" >/dev/null
record() { # ROLE RELOCATION: what control answers that role about a move
    ON_USER=$1 on control -c "SELECT outbox.relocation_peer(1, 'record', '{\"relocation\": \"$2\"}')->>'organization'" 2>&1
}
check "control tells a cell of the move its record holds" \
    test "$(record outbox_link_us "$relocation")" = 1
check "  ... to a cell's link role only, not even to a superuser (42501)" \
    test "$(state_of control "SELECT outbox.relocation_peer(1, 'record', '{\"relocation\": \"$relocation\"}')")" = 42501
check "  ... and of no move it did not record (42704)" \
    test "$(ON_USER=outbox_link_us state_of control "SELECT outbox.relocation_peer(1, 'record', '{\"relocation\": \"$fake\"}')")" = 42704
check "  ... and of a bad call: a cell's operation (22023), no argument (22023), no relocation (22004)" \
    test "$(ON_USER=outbox_link_us state_of control "SELECT outbox.relocation_peer(1, 'export', '{\"relocation\": \"$fake\"}')")/$(
            ON_USER=outbox_link_us state_of control "SELECT outbox.relocation_peer(1, 'record', NULL)")/$(
            ON_USER=outbox_link_us state_of control "SELECT outbox.relocation_peer(1, 'record', '{}')")" = 22023/22023/22004
# A partition attached while the move runs, in both cells, carries the
# fence and the change log as the others do.  (Its FOREIGN KEY locks
# project against the writers for as long as it takes, and a TRUNCATE
# queues them behind it while it waits for their transactions: the
# window of the test's own statements, application_name test_ddl, is
# left out of the writers' waits below.)
ddl_from=$(date +%s.%N)
export PGAPPNAME=test_ddl
for cell in us eu; do
    on "$cell" -c "CREATE TABLE event_3 (LIKE event INCLUDING DEFAULTS);
                   ALTER TABLE event ATTACH PARTITION event_3 FOR VALUES FROM (100000000) TO (MAXVALUE);
                   GRANT SELECT, INSERT, UPDATE, DELETE ON event_3 TO move_app" >/dev/null
done
check "an INSERT through a partition attached during the move, in the fenced target: OBM01" \
    test "$(ON_USER=move_app state_of eu "INSERT INTO event_3 (id, project_id, message) VALUES (100000001, 2, 'fenced')")" = OBM01
check "an INSERT through it in the source is taken" \
    test "$(ON_USER=move_app state_of us "INSERT INTO event_3 (id, project_id, message) VALUES (100000002, 2, 'late partition')")" = ok
check "an UPDATE through a partition in the source is taken (organization 1 lives there)" \
    test "$(ON_USER=move_app state_of us "UPDATE event_1 SET message = 'through a partition' WHERE id = 1")" = ok
check "an INSERT through a partition in the fenced target is refused (OBM01)" \
    test "$(ON_USER=move_app state_of eu "INSERT INTO event_1 (id, project_id, message) VALUES (49990, 2, 'fenced')")" = OBM01
check "  ... as through the parent" \
    test "$(ON_USER=move_app state_of eu "INSERT INTO event (id, project_id, message) VALUES (49991, 2, 'fenced')")" = OBM01
check "TRUNCATE of the parent is refused in the source while it moves" \
    test "$(state_of us "TRUNCATE event")" != ok
check "  ... and of a partition too" \
    test "$(state_of us "TRUNCATE event_2")" != ok
unset PGAPPNAME
ddl_to=$(date +%s.%N)
# The source's application role gives a new member of organization 1 the
# key of organization 3's member in eu (on 0.9.0 the catch-up's upsert took
# that member over, without an outbox row).  (A captured table's row with
# that key would also reach control from us, which refuses it: the object
# lives in eu, issue 46.)
eu_member=$(on eu -c "INSERT INTO member (organization_id, user_id) VALUES (3, 7) RETURNING id")
check "the source's application role writes a member of organization 1 with the key of organization 3's member in eu" \
    test "$(ON_USER=move_app state_of us "INSERT INTO member (id, organization_id, user_id) VALUES ($eu_member, 1, 666)")" = ok
on control -c "SELECT outbox.resume_relocation('$relocation')" >/dev/null
check "the catch-up refuses to overwrite organization 3's member, and says so" \
    wait_on control 60 "SELECT error LIKE '%would overwrite row $eu_member of %' FROM outbox.relocations WHERE relocation = '$relocation'" t
check "  ... which is still organization 3's in eu" \
    test "$(on eu -c "SELECT organization_id || ' ' || user_id FROM member WHERE id = $eu_member")" = "3 7"
# The row goes in the source: the move goes on.
ON_USER=move_app on us -c "DELETE FROM member WHERE id = $eu_member" >/dev/null
check "the move completes" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'" complete ||
    on control -x -c "SELECT now(), * FROM outbox.organization_moves" >&2 # where it waits, for the next time
check "the UPDATE made through the partition is in eu" \
    test "$(on eu -c "SELECT message FROM event WHERE id = 1")" = "through a partition"
check "  ... and is in eu after the move" \
    test "$(on eu -c "SELECT message FROM event WHERE id = 100000002")" = "late partition"
check "the trigger's rename of organization 3, fired by the move's import, reached control" \
    wait_on control 60 "SELECT count(*) > 0 FROM applied WHERE object = 3 AND payload->>'slug' = 'touched by a move'" t
check "organization 3's member is still its own in eu" \
    test "$(on eu -c "SELECT organization_id || ' ' || user_id FROM member WHERE id = $eu_member")" = "3 7"
sleep 2
touch "$work/stop"
wait $writers
# A write's line: organization, wait (s), when it ended (epoch s).  The
# writes that waited across the test's own partition DDL do not count.
longest() {
    awk -v org="$1" -v from="$ddl_from" -v to="$ddl_to" \
        '$1 == org && !($3 >= from && $3 - $2 <= to) && $2 > m { m = $2 } END { printf "%d", m * 1000 }' \
        "$work/latency"
}
echo "# longest waits through the move (ms): organization 1 (moving) $(longest 1)," \
     "2 (us) $(longest 2), 3 (eu) $(longest 3); left out, across the test's DDL:" \
     "$(awk -v from="$ddl_from" -v to="$ddl_to" '$3 >= from && $3 - $2 <= to' "$work/latency" | wc -l) writes"
# Each lock wait of the other tenants' writers, the table, and what its
# holder ran as DDL (the test's own partition and trigger, or the move's).
for cell in us eu; do
    grep -h -A1 'writer [23]:.*still waiting' "${CELL_DIR[$cell]}/server.log" | head -6 |
        while IFS= read -r line; do
            if [[ $line =~ on\ relation\ ([0-9]+) ]]; then
                line="$line (table $(on "$cell" -c "SELECT ${BASH_REMATCH[1]}::regclass"))"
            elif [[ $line =~ holding\ the\ lock:\ ([0-9,\ ]+) ]]; then
                for pid in ${BASH_REMATCH[1]//,/ }; do
                    line="$line; $pid ran: $(grep -h "\[$pid\].*statement:" "${CELL_DIR[$cell]}/server.log" | sed 's/.*statement: //' | head -2 | tr '\n' ' ')"
                done
            fi
            echo "# $cell: $line"
        done
done
# move_waits CELL: the lock waits of 10 ms or more of the other tenants'
# writers there that the test's own statements do not explain.  A wait
# names every holder of the lock, in any mode, and the waiters ahead: the
# test's DDL or TRUNCATE among them is the cause (each of its sessions is
# known by its application_name, test_ddl, in its connection's line).
move_waits() {
    local log=${CELL_DIR[$1]}/server.log
    grep -A1 'writer [23]:.*still waiting' "$log" |
        sed -n 's/.*holding the lock: \([0-9, ]*\)\. Wait queue: \([0-9, ]*\)\..*/\1, \2/p' |
        awk -v own="$(grep 'connection authorized:.*application_name=test_ddl' "$log" |
            sed -n 's/^[^[]*\[\([0-9]*\)\].*/\1/p' | tr '\n' ' ')" '
            BEGIN { split(own, d, " "); for (i in d) is_own[d[i]] = 1 }
            { n = split($0, h, /, */); explained = 0
              for (i = 1; i <= n; i++) if (h[i] in is_own) explained = 1
              if (!explained) waits++ }
            END { print waits + 0 }'
}
check "another tenant's writer in the source waits on no lock of the move for 10 ms" \
    test "$(move_waits us)" = 0
check "  ... nor in the target" \
    test "$(move_waits eu)" = 0
# The issue's goal is 50 ms for another tenant; the bound here is generous
# for a shared 2-core machine (bench/relocation/tenants.sh measures), and
# three times that under the sanitizers, which slow every backend: there a
# write waited 277 ms for no lock at all (the check above is the precise one).
scale=${OUTBOX_SANITIZE:+3}
scale=${scale:-1}
check "another tenant's writer in the source never waits for $((200 * scale)) ms through the move" \
    test "$(longest 2)" -lt $((200 * scale))
check "  ... nor in the target" \
    test "$(longest 3)" -lt $((200 * scale))
# The issue's goal for the moving organization's own writer is 200 ms in
# all, at the cutover; the bound here is generous for a shared machine.
check "the moving organization's writer waits under $((500 * scale)) ms for any write (refusals included)" \
    test "$(longest 1)" -lt $((500 * scale))

echo "A stale client writes to organization 1 in us after the move"
check "an INSERT whose foreign key refers to organization 1: OBM01, not 23503" \
    test "$(ON_USER=move_app state_of us "INSERT INTO project (organization_id, slug) VALUES (1, 'stale')")" = OBM01
check "  ... and an UPDATE that moves a row into it" \
    test "$(ON_USER=move_app state_of us "UPDATE project SET organization_id = 1 WHERE id = 721")" = OBM01
check "an UPDATE of its rows by organization: OBM01, not 0 rows" \
    test "$(ON_USER=move_app state_of us "UPDATE project SET slug = 'stale' WHERE organization_id = 1")" = OBM01
check "a DELETE of its rows by organization: OBM01" \
    test "$(ON_USER=move_app state_of us "DELETE FROM member WHERE organization_id = 1")" = OBM01
check "  ... among others (IN), and with the key as a parameter" \
    test "$(ON_USER=move_app state_of us "DELETE FROM member WHERE organization_id IN (1, 2) AND user_id = 0"):$(ON_USER=move_app on us -c "DO \$\$ BEGIN EXECUTE 'UPDATE dashboard SET default_widget_id = NULL WHERE organization_id = \$1' USING 1::bigint; RAISE NOTICE 'ok'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$\$" 2>&1 | sed 's/.*NOTICE: *//')" = OBM01:OBM01
check "an UPDATE of the root by its key: OBM01" \
    test "$(ON_USER=move_app state_of us "UPDATE organization SET slug = 'stale' WHERE id = 1")" = OBM01
check "organization 2's writes in us go on" \
    test "$(ON_USER=move_app state_of us "UPDATE project SET slug = slug WHERE organization_id = 2"):$(ON_USER=move_app state_of us "DELETE FROM member WHERE organization_id = 2 AND user_id = 0"):$(ON_USER=move_app state_of us "INSERT INTO project (organization_id, slug) VALUES (2, 'fresh')")" = ok:ok:ok

echo "A compromised target answers a fork's import with the source's root"
on eu >/dev/null <<'SQL'
ALTER FUNCTION outbox.relocation_peer(int, text, jsonb) RENAME TO relocation_peer_honest;
CREATE FUNCTION outbox.relocation_peer(protocol int, operation text, argument jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    answer jsonb := outbox.relocation_peer_honest(protocol, operation, argument);
BEGIN
    IF operation = 'import' AND NOT (answer->>'more')::boolean THEN
        answer := answer || '{"root": 2}';
    END IF;
    RETURN answer;
END $$;
GRANT EXECUTE ON FUNCTION outbox.relocation_peer(int, text, jsonb) TO outbox_link_control;
SQL
fork=$(on control -c "SELECT outbox.relocate_organization(2, 'eu', 'fork')")
check "control refuses the answer: root 2 is no new organization" \
    wait_on control 120 "SELECT error LIKE '%no new organization%' FROM outbox.relocations WHERE relocation = '$fork'" t
check "  ... and organization 2 still lives in us" \
    test "$(on control -c "SELECT outbox.organization_cell(2)")" = us
check "  ... eu holds the fork's copy until the cancel" \
    test "$(on eu -c "SELECT count(*) FROM organization WHERE slug = 'globex'")" = 1
check "the fork is cancelled (as control's record says it is not done), and its copy leaves eu" \
    test "$(on control -c "SELECT outbox.cancel_relocation('$fork') IS NOT NULL"):$(on eu -c "SELECT count(*) FROM organization WHERE slug = 'globex'")" = t:0
on eu >/dev/null <<'SQL'
DROP FUNCTION outbox.relocation_peer(int, text, jsonb);
ALTER FUNCTION outbox.relocation_peer_honest(int, text, jsonb) RENAME TO relocation_peer;
SQL

echo "A compromised source's export, relayed by control, with another root"
# Organization 1's move back to us holds before its import; its staged
# export in us then says root 999, manifest and checksum made to match, as
# a source that lies (or a control that relays a lie) would send it.
hold_moves_at import
moved=$(on control -c "SELECT outbox.relocate_organization(1, 'us')")
check "organization 1's move back to us holds before its import" \
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$moved'" "paused import"
on us >/dev/null <<SQL
UPDATE outbox.relocation_rows SET pk = 999 WHERE relocation = '$moved' AND model = 'organization';
UPDATE outbox.relocation_rows m
   SET fields = jsonb_set(jsonb_set(m.fields, '{roots}', '[999]'), '{checksum}', to_jsonb((
       SELECT encode(sha256(convert_to(string_agg(format(E'%s\\t%s\\t%s\\t%s\\n', s.ordinal, s.model, s.pk, s.fields),
                                                  '' ORDER BY s.ordinal), 'UTF8')), 'hex')
         FROM outbox.relocation_rows s WHERE s.relocation = '$moved' AND s.model <> 'pg_outbox.manifest')))
 WHERE m.relocation = '$moved' AND m.model = 'pg_outbox.manifest';
SQL
on control -c "DROP TRIGGER hold_at_import ON outbox.organization_moves; SELECT outbox.resume_relocation('$moved')" >/dev/null
check "us refuses the export before writing a row: its root is 999, not organization 1 (42501)" \
    wait_on control 60 "SELECT error LIKE '%roots are {999}, not organization 1%' FROM outbox.relocations WHERE relocation = '$moved'" t
check "  ... us holds no organization 999" \
    test "$(on us -c "SELECT count(*) FROM organization WHERE id = 999")" = 0
on control -c "SELECT outbox.cancel_relocation('$moved')" >/dev/null
check "  ... cancelled: organization 1 lives in eu, none of it in us" \
    test "$(on control -c "SELECT outbox.organization_cell(1)"):$(on us -c "SELECT count(*) FROM project WHERE organization_id = 1")" = eu:0

echo "A compromised source answers the copy with a chunk that is not JSON"
# Control passes a chunk on to the target as the source's text
# (_move_relay_chunk): one JSON value, or the step fails there, before the
# target reads a byte of it; the relocation the target stages under is
# control's, whatever the chunk says.
on us >/dev/null <<SQL
ALTER FUNCTION outbox.relocation_peer(int, text, jsonb) RENAME TO relocation_peer_honest;
CREATE FUNCTION outbox.relocation_peer(protocol int, operation text, argument jsonb) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS \$\$
DECLARE
    answer text := outbox.relocation_peer_honest(protocol, operation, argument)::text;
BEGIN
    IF operation = 'chunk' THEN
        answer := answer || ', "relocation": "$fake"';
    END IF;
    RETURN answer;
END \$\$;
GRANT EXECUTE ON FUNCTION outbox.relocation_peer(int, text, jsonb) TO outbox_link_control;
SQL
lying=$(on control -c "SELECT outbox.relocate_organization(2, 'eu')")
check "the copy fails at control, saying the chunk is not JSON" \
    wait_on control 120 "SELECT step || ' ' || (error LIKE '%invalid input syntax for type json%') FROM outbox.relocations WHERE relocation = '$lying'" "copy true"
check "  ... eu staged nothing, under either relocation" \
    test "$(on eu -c "SELECT count(*) FROM outbox.relocation_rows WHERE relocation IN ('$lying', '$fake')")" = 0
on us >/dev/null <<'SQL'
DROP FUNCTION outbox.relocation_peer(int, text, jsonb);
ALTER FUNCTION outbox.relocation_peer_honest(int, text, jsonb) RENAME TO relocation_peer;
SQL
check "  ... the honest source again: the copy goes on, and the move ends with organization 2 in eu" \
    wait_on control 180 "SELECT state || ' ' || outbox.organization_cell(2) FROM outbox.relocations WHERE relocation = '$lying'" "complete eu"

checks_done relocation_trust.sh
