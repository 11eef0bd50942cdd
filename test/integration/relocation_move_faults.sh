#!/usr/bin/env bash
# A move of an organization between cells through faults (docs/relocation.md),
# on the three clusters of test/harness/move_cells.sh, while a client writes
# to the organization at 100 writes a second and a prober asks both cells,
# over and over, whether they take a write of it:
#   - control's mover (which drives the move) killed with kill -9 during
#     the copy and again after the catch-up; the target shut down
#     (immediate) and the source's worker killed during the copy; the
#     target's worker killed during the import and the target shut down
#     again right after;
#     the source's cell stopped (immediate) during the catch-up, the move
#     paused and resumed meanwhile, control shut down and started again
#     while the source is down, then the source's worker killed and the
#     source stopped a second time;
#   - the move completes: every write acknowledged is in eu once, the rows
#     are those us had (field by field) with the client's on top, us holds
#     none, no tombstone reached control;
#   - at no moment did both cells take the organization's writes.
# kill -9 of a backend makes its cluster restart every session: the client
# and the prober connect again, and a write whose answer was lost is
# looked for before it is tried again.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
source "$root/test/harness/check.sh"
prober=
finish() {
    [[ -n $prober ]] && kill "$prober" 2>/dev/null
    move_cells_stop
}
trap finish EXIT
move_cells_setup || exit 1
fingerprint_before=$(on us -c "$fingerprint_of_1")
rows_before=$(on us -c "$rows_of_1")
# Chunks of 250 rows: each step takes long enough to be hit.
on control -c "ALTER SYSTEM SET outbox.relocation_chunk_rows = 250" -c "SELECT pg_reload_conf()" >/dev/null

worker_of() { on "$1" -c "SELECT pid FROM pg_stat_activity WHERE backend_type = '${2:-pg_outbox worker}'"; }
kill_worker() { # NAME [BACKEND_TYPE]: kill -9 its worker (or that process), then wait for the cluster to take sessions again
    local pid
    pid=$(worker_of "$1" "${2:-}")
    [[ -n $pid ]] && kill -9 "$pid"
    sleep 1
    wait_on "$1" 30 "SELECT 1" 1 >/dev/null 2>&1
}
step_of() { on control -c "SELECT step FROM outbox.relocations WHERE relocation = '$relocation'" 2>/dev/null; }
wait_step() { # STEP...: until the move reaches one of them
    local deadline=$((SECONDS + 120)) s
    while ((SECONDS < deadline)); do
        s=$(step_of)
        for want in "$@"; do [[ $s == "$want" ]] && return 0; done
        sleep 0.1
    done
    echo "  waited for step $*, last saw $s" >&2
    return 1
}

# The prober: each round asks eu, then us, to rename the organization to
# its own name in a transaction it rolls back.  A cell takes the write when
# the row is there and no error comes.  eu taking it and us after it would
# be two owners at once (us's fence comes before eu's lift).
cat >"$work/probe.py" <<'PY'
import os, time
import psycopg2
env = os.environ
conns = {}
out = open(env["LOG"], "a", buffering=1)
def takes(cell):
    try:
        if cell not in conns:
            conns[cell] = psycopg2.connect(env["CELL_DSN_" + cell].replace("move_app", "postgres"))
        conn = conns[cell]
        with conn.cursor() as c:
            c.execute("UPDATE organization SET slug = slug WHERE id = 1")
            n = c.rowcount
        conn.rollback()
        return "takes" if n == 1 else "absent"
    except psycopg2.OperationalError:
        conns.pop(cell, None)
        return "down"
    except psycopg2.InterfaceError:
        conns.pop(cell, None)
        return "down"
    except psycopg2.Error as e:
        try:
            conns[cell].rollback()
        except psycopg2.Error:
            conns.pop(cell, None)
        if e.pgcode is None:  # the connection went
            conns.pop(cell, None)
            return "down"
        return "refuses" if e.pgcode == "OBM01" else "error:" + e.pgcode
while not os.path.exists(env["STOP"]):
    out.write("%s %s\n" % (takes("eu"), takes("us")))
    time.sleep(0.005)
PY
(set -a; source "$work/env"; LOG=$work/probes STOP=$work/stop exec "$PYTHON" "$work/probe.py") \
    2>"$work/probe.err" &
prober=$!
start_writer 1:1 100
sleep 1

# The move holds itself (paused) the first time it reaches the import and
# the catch-up, so that the faults below hit those steps however fast the
# steps before them went.  A sequence per step counts, as below.
on control >/dev/null <<'SQL'
CREATE SEQUENCE public.hold_import;
CREATE SEQUENCE public.hold_catch_up;
CREATE FUNCTION public.hold_at_step() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public AS $$
BEGIN
    IF nextval(('public.hold_' || NEW.step)::regclass) = 1 THEN
        NEW.state := 'paused';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER hold_at_step BEFORE UPDATE ON outbox.organization_moves FOR EACH ROW
    WHEN (OLD.step <> NEW.step AND NEW.step IN ('import', 'catch_up')) EXECUTE FUNCTION public.hold_at_step();
SQL
held_at() { # STEP: the move holds there
    wait_on control 120 "SELECT state || ' ' || step FROM outbox.relocations WHERE relocation = '$relocation'" "paused $1"
}

relocation=$(on control -c "SELECT outbox.relocate_organization(1, 'eu')")
echo "control's mover killed during the copy"
check "the move copies" wait_step copy
kill_worker control 'pg_outbox mover'
done_then=$(on control -c "SELECT rows_done FROM outbox.relocations WHERE relocation = '$relocation'")
check "  ... and goes on copying after it" \
    wait_on control 60 "SELECT step <> 'copy' OR rows_done > $done_then FROM outbox.relocations WHERE relocation = '$relocation'" t
echo "the target shut down (immediate) in the middle of the copy, the source's worker killed"
cell_stop eu
kill_worker us
sleep 2
cell_start eu
done_then=$(on control -c "SELECT rows_done FROM outbox.relocations WHERE relocation = '$relocation'")
check "  ... the copy goes on once eu is back" \
    wait_on control 60 "SELECT step <> 'copy' OR rows_done > $done_then FROM outbox.relocations WHERE relocation = '$relocation'" t

echo "the target's worker killed during the import, then the target shut down"
check "the move imports (held there)" held_at import
# Many changes for the catch-up: every event of the organization written
# again as it is.
on us -c "UPDATE event e SET message = e.message FROM project p
           WHERE p.id = e.project_id AND p.organization_id = 1 AND e.message NOT LIKE 'w1-%'" >/dev/null
on control -c "SELECT outbox.resume_relocation('$relocation')" >/dev/null
kill_worker eu
cell_stop eu
sleep 2
cell_start eu
check "  ... and goes on to the catch-up once eu is back (held there)" held_at catch_up

echo "the source stopped during the catch-up"
check "  ... with changes left in us's change log" \
    test "$(step_of):$(on us -c "SELECT count(*) > 25 FROM outbox.move_changes WHERE relocation = '$relocation'")" = catch_up:t
cell_stop us
sleep 1
on control -c "SELECT outbox.resume_relocation('$relocation')" >/dev/null
check "  ... resumed with us down, it fails visibly and waits" \
    wait_on control 30 "SELECT error LIKE '%cell us%' FROM outbox.relocations WHERE relocation = '$relocation'" t
check "  ... still in the catch-up, still in us" \
    test "$(step_of):$(on control -c "SELECT outbox.organization_cell(1)")" = catch_up:us
# Faults that overlap (issue 44: the soak's lost write came after them):
# control shut down and started again while us is down, then us stopped
# a second time right after it came back.
cell_stop control
sleep 1
cell_start control
cell_start us
kill_worker us
cell_stop us
sleep 1
cell_start us
echo "control's mover killed again"
kill_worker control 'pg_outbox mover'
check "the move completes" \
    wait_on control 180 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation'" complete
on control -c "SELECT step, rows_done, rows_total, write_pause, error FROM outbox.relocations WHERE relocation = '$relocation'"
sleep 1
touch "$work/stop"
wait "$writer"
writer_rc=$?
writer=
wait "$prober"
prober=
check "the client ran to the end" test "$writer_rc" = 0
[[ $writer_rc == 0 ]] || tail -5 "$work/writer.err"

check "organization 1 lives in eu" test "$(on control -c "SELECT outbox.organization_cell(1)")" = eu
awk -F'\t' '$1 == 1 && $2 == "insert" {print $3 "\t" $4}' "$work/writes" | sort >"$work/acked"
awk -F'\t' '$1 == 1 && $2 == "delete" {print $3}' "$work/writes" | sort >"$work/deleted"
echo "  $(wc -l <"$work/acked") writes acknowledged"
check "every write acknowledged is in eu once, with its message" \
    test "$(comm -23 <(join -t $'\t' -v1 "$work/acked" "$work/deleted" | sort) \
        <(on eu -c "SELECT id || E'\t' || message FROM event WHERE message LIKE 'w1-%'" | sort) | wc -l)" = 0
check "  ... and none twice, nor one deleted" \
    test "$(on eu -c "SELECT count(*) FROM event WHERE message LIKE 'w1-%'"):$(on eu -c "SELECT count(DISTINCT message) FROM event WHERE message LIKE 'w1-%'")" = \
         "$(join -t $'\t' -v1 "$work/acked" "$work/deleted" | wc -l):$(join -t $'\t' -v1 "$work/acked" "$work/deleted" | wc -l)"
check "eu holds the rows us had, and the client's" \
    test "$(on eu -c "$rows_of_1")" = $((rows_before + $(wc -l <"$work/acked") - $(wc -l <"$work/deleted")))
check "  ... the same rows, field by field" \
    test "$(on eu -c "$fingerprint_of_1")" = "$fingerprint_before"
check "us holds none of them" test "$(on us -c "$rows_of_1")" = 0
check "no tombstone of organization 1 reached control" \
    test "$(on control -c "SELECT count(*) FROM outbox.control_tombstone WHERE object_identifier = 1")" = 0
echo "  probes: $(sort "$work/probes" | uniq -c | sort -rn | tr '\n' ';')"
check "the prober saw us take the organization's writes, and then eu" \
    test "$(grep -c ' takes$' "$work/probes")" -gt 0 -a "$(grep -c '^takes ' "$work/probes")" -gt 0
check "  ... and never both at once" \
    test "$(grep -c '^takes takes' "$work/probes")" = 0
# Control's step transactions lost once each after the cells did their
# part (as when control's mover dies between a cell's answer and its own
# commit): a trigger on control's row fails the step's update once per
# listed transition, and the step is tried again a second later.  A
# sequence per transition counts, since the failure rolls back whatever
# else the trigger would write.
on control >/dev/null <<'SQL'
CREATE TABLE public.step_faults (old_step text, new_step text, fault regclass,
                                 PRIMARY KEY (old_step, new_step));
CREATE FUNCTION public.lose_step() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public AS $$
DECLARE
    f regclass;
BEGIN
    SELECT s.fault INTO f FROM public.step_faults s WHERE s.old_step = OLD.step AND s.new_step = NEW.step;
    IF f IS NOT NULL AND nextval(f) = 1 THEN
        RAISE EXCEPTION 'control lost the answer of step %', OLD.step;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER lose_step BEFORE UPDATE ON outbox.organization_moves FOR EACH ROW
    EXECUTE FUNCTION public.lose_step();
CREATE FUNCTION public.fault(old_step text, new_step text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE public.%I', 'fault_' || old_step || '_' || new_step);
    INSERT INTO public.step_faults VALUES (old_step, new_step, ('public.fault_' || old_step || '_' || new_step)::regclass);
END $$;
SQL
fired() { # OLD NEW: the fault fired and the step was tried again
    test "$(on control -c "SELECT last_value >= 2 FROM public.fault_$1_$2")" = t
}

echo "control's fence step lost after us fenced (organization 2): the pause counts from the first fence"
on control -c "SELECT public.fault('fence', 'in_flight')" >/dev/null
rows_2=$(on us -c "$(rows_of 2)")
relocation2=$(on control -c "SELECT outbox.relocate_organization(2, 'eu')")
check "the move completes" \
    wait_on control 120 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation2'" complete
check "  ... its fence step failed once, and was tried again" fired fence in_flight
check "  ... its write pause counts from us's first fence: over the second before the retry" \
    test "$(on control -c "SELECT write_pause >= interval '1 second' FROM outbox.relocations WHERE relocation = '$relocation2'")" = t ||
    on control -c "SELECT write_pause FROM outbox.relocations WHERE relocation = '$relocation2'" >&2
check "  ... every row of organization 2 in eu" test "$(on eu -c "$(rows_of 2)")" = "$rows_2"

echo "every step of a move lost once on control (organization 2, back from eu to us)"
transitions="prepare:export export:check check:copy copy:import import:import import:catch_up
    catch_up:fence in_flight:last_catch_up last_catch_up:switch switch:drain drain:delete delete:done"
for t in $transitions; do
    on control -c "SELECT public.fault('${t%:*}', '${t#*:}')" >/dev/null
done
on control -c "SELECT setval('public.fault_fence_in_flight', 1, false)" >/dev/null # again, too
relocation3=$(on control -c "SELECT outbox.relocate_organization(2, 'us')")
check "the move completes" \
    wait_on control 180 "SELECT state FROM outbox.relocations WHERE relocation = '$relocation3'" complete ||
    on control -c "SELECT step, error FROM outbox.relocations WHERE relocation = '$relocation3'" >&2
lost=0
for t in $transitions fence:in_flight; do
    fired "${t%:*}" "${t#*:}" || { echo "  step ${t%:*} (to ${t#*:}) was not lost" >&2; lost=1; }
done
check "  ... each of its 13 steps lost once, and done again" test "$lost" = 0
check "  ... organization 2 lives in us, every row of it there and none in eu" \
    test "$(on control -c "SELECT outbox.organization_cell(2)"):$(on us -c "$(rows_of 2)"):$(on eu -c "$(rows_of 2)")" = "us:$rows_2:0"

checks_done relocation_move_faults.sh
