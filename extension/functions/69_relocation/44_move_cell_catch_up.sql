-- Moving an organization: the source's side of the catch-up, the changes
-- its log holds and the transactions in flight at its fence (the log and
-- the other steps: 40_move_cell_log.sql, 41_move_cell_steps.sql; control
-- drives them through relocation_peer, 42_move_peer.sql).

-- extra (table key -> keys of rows to decide) with the keys of the rows
-- that refer, through a mapped reference, to the rows of parent whose
-- keys are changed (their membership changed).
CREATE OR REPLACE FUNCTION outbox._move_children(mv outbox.organization_moves, parent text,
                                                 changed bigint[], extra jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    child jsonb;
    ref jsonb;
BEGIN
    FOR child IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') e LOOP
        FOR ref IN SELECT x.value FROM jsonb_array_elements(child->'refs') x
                    WHERE x.value->>'parent' = parent AND x.value->>'kind' = 'map'
                      AND NOT (x.value->>'deferred')::boolean LOOP
            extra := jsonb_set(extra, ARRAY[child->>'model'],
                coalesce(extra->(child->>'model'), '[]') || to_jsonb(ARRAY(
                    SELECT (j #>> '{}')::bigint FROM unnest(outbox._run_as_table_owner(
                        (child->>'relid')::oid::regclass,
                        outbox._relocation_statement('keys_where', (child->>'relid')::oid::regclass,
                                                     child->>'pk', key_column => ref->>'column'),
                        ARRAY(SELECT to_jsonb(c) FROM unnest(changed) c))) j)));
        END LOOP;
    END LOOP;
    RETURN extra;
END
$$;

-- changes (source): forgets the change log entries the target applied
-- (acknowledge), then reads the next ones: each changed row of the
-- organization as it is now, or its deletion (gone, or no longer the
-- organization's).  Membership as the export has it, incrementally: a row
-- is the organization's when it is the root or one of its references leads
-- to a row that is; tables in export order, so a parent is decided before
-- its children, and a row whose membership changed brings the rows that
-- refer to it along.  A row once a member stays in move_members (present
-- false when it left): a batch read again gives the same deletions.
CREATE OR REPLACE FUNCTION outbox._move_changes(mv outbox.organization_moves, argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    batch_limit int := coalesce((argument->>'limit')::int, 1000);
    seqs bigint[];
    entry jsonb;
    ref jsonb;
    pks bigint[];
    rows_now jsonb;
    k bigint;
    r jsonb;
    member boolean;
    was boolean;
    changed bigint[];
    out jsonb := '[]';
    extra jsonb := '{}'; -- table key -> keys of rows to decide, found through their parents
    left_over bigint;
BEGIN
    DELETE FROM outbox.move_changes c
     WHERE c.relocation = mv.relocation
       AND c.seq = ANY (ARRAY(SELECT jsonb_array_elements_text(argument->'acknowledge')::bigint));
    seqs := ARRAY(SELECT c.seq FROM outbox.move_changes c WHERE c.relocation = mv.relocation
                   ORDER BY c.seq LIMIT batch_limit);
    FOR entry IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') WITH ORDINALITY e(value, n)
                  ORDER BY e.n LOOP
        pks := ARRAY(SELECT DISTINCT u.k FROM (
                        SELECT c.pk AS k FROM outbox.move_changes c
                         WHERE c.relocation = mv.relocation AND c.seq = ANY (seqs)
                           AND c.model = entry->>'model'
                        UNION
                        SELECT jsonb_array_elements_text(extra->(entry->>'model'))::bigint) u);
        CONTINUE WHEN cardinality(pks) = 0;
        rows_now := outbox._move_rows(entry, pks);
        changed := '{}';
        FOREACH k IN ARRAY pks LOOP
            r := rows_now->(k::text);
            member := false;
            IF r IS NOT NULL THEN
                member := entry->>'model' = mv.plan->>'root' AND k = mv.organization;
                FOR ref IN SELECT x.value FROM jsonb_array_elements(entry->'refs') x LOOP
                    EXIT WHEN member;
                    CONTINUE WHEN ref->>'kind' <> 'map' OR (ref->>'deferred')::boolean
                                  OR r->>(ref->>'column') IS NULL;
                    member := EXISTS (SELECT FROM outbox.move_members mm
                                       WHERE mm.relocation = mv.relocation
                                         AND mm.model = ref->>'parent'
                                         AND mm.pk = (r->>(ref->>'column'))::bigint AND mm.present);
                END LOOP;
            END IF;
            SELECT mm.present INTO was FROM outbox.move_members mm
             WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model' AND mm.pk = k;
            IF member THEN
                out := out || jsonb_build_array(jsonb_build_object(
                    'model', entry->>'model', 'pk', k, 'fields', r - (entry->>'pk')));
                INSERT INTO outbox.move_members AS mm (relocation, model, pk, present)
                VALUES (mv.relocation, entry->>'model', k, true)
                ON CONFLICT (relocation, model, pk) DO UPDATE SET present = true;
            ELSIF was IS NOT NULL THEN
                out := out || jsonb_build_array(jsonb_build_object(
                    'model', entry->>'model', 'pk', k, 'fields', NULL));
                UPDATE outbox.move_members mm SET present = false
                 WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model' AND mm.pk = k;
            END IF;
            IF member IS DISTINCT FROM coalesce(was, false) THEN
                changed := changed || k;
            END IF;
        END LOOP;
        CONTINUE WHEN cardinality(changed) = 0;
        extra := outbox._move_children(mv, entry->>'model', changed, extra);
    END LOOP;
    SELECT count(*) - cardinality(seqs) INTO left_over FROM outbox.move_changes c
     WHERE c.relocation = mv.relocation;
    RETURN jsonb_build_object('changes', out, 'seqs', to_jsonb(seqs), 'left', left_over);
END
$$;

-- The transactions that hold a writer's lock on a table that carries the
-- move's triggers (a partition included), this one aside.  Readers
-- (ACCESS SHARE, ROW SHARE) and VACUUM and ANALYZE (SHARE UPDATE
-- EXCLUSIVE) write no row.  Not every transaction of the database, as
-- before (issue 44: the worker's link round, which reads the tables, or
-- another tenant's idle transaction held the write pause).
CREATE OR REPLACE FUNCTION outbox._move_writers() RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(SELECT DISTINCT l.virtualtransaction FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.granted
                    AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'ShareUpdateExclusiveLock')
                    AND l.pid IS DISTINCT FROM pg_backend_pid()
                    AND l.database = (SELECT d.oid FROM pg_database d
                                       WHERE d.datname = current_database())
                    AND l.relation IN (SELECT m.rel FROM outbox._move_triggers() m))
$$;

-- How many of those transactions (virtual ids) still run.
CREATE OR REPLACE FUNCTION outbox._move_running(transactions text[]) RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*)::int FROM pg_locks l
     WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid = ANY (transactions)
$$;

-- in_flight (source, fenced): the transactions running when first asked
-- (after the fence committed), and how many of them still run.
CREATE OR REPLACE FUNCTION outbox._move_in_flight(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    running text[] := mv.in_flight;
    waiting int;
BEGIN
    IF NOT mv.fenced THEN
        RAISE EXCEPTION 'relocation %: the source is not fenced yet', mv.relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF running IS NULL THEN
        -- One that wrote the organization's rows may have checked the
        -- fence before it committed (pg_outbox's worker's cascade too).
        -- Any other takes its lock after the fence, and its triggers then
        -- read the fence with the latest snapshot (move_trigger.cpp),
        -- whatever its isolation level: it is refused.
        running := outbox._move_writers();
        UPDATE outbox.organization_moves o SET in_flight = running, step = 'in_flight'
         WHERE o.relocation = mv.relocation;
    END IF;
    waiting := outbox._move_running(running);
    IF waiting = 0 AND mv.outbox_mark IS NULL THEN
        -- Every write of the organization here has committed: its outbox
        -- rows are at most this one.  The worker delivers them at once.
        UPDATE outbox.organization_moves o
           SET outbox_mark = coalesce((SELECT max(b.id) FROM outbox.cell_outbox b), 0)
         WHERE o.relocation = mv.relocation;
        PERFORM outbox._wake_worker_at_commit();
    END IF;
    RETURN jsonb_build_object('waiting', waiting);
END
$$;
