------------------------------------------------------------------------------
-- On control: the move and its driver
------------------------------------------------------------------------------

-- The cell organization root_id lives in, checked as a move from there to
-- to_cell needs: on control, both cells linked.
CREATE OR REPLACE FUNCTION outbox._move_cells(root_id bigint, to_cell text) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    from_cell text;
BEGIN
    PERFORM outbox._require(root_id, 'root_id');
    PERFORM outbox._require(to_cell, 'to_cell');
    IF current_setting('outbox.silo_mode') <> 'control' THEN
        RAISE EXCEPTION 'organizations are moved from control, and this is %',
            CASE current_setting('outbox.silo_mode') WHEN 'cell' THEN 'a cell' ELSE 'a monolith' END
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT o.cell INTO from_cell FROM outbox.organization_cells o WHERE o.organization = root_id;
    IF from_cell IS NULL THEN
        RAISE EXCEPTION 'organization % has no cell in outbox.organization_cells', root_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'SELECT outbox.set_organization_cell(<organization>, <cell>);';
    ELSIF from_cell = to_cell THEN
        RAISE EXCEPTION 'organization % lives in cell % already', root_id, to_cell
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = to_cell) THEN
        RAISE EXCEPTION 'to_cell: cell % is not registered', quote_literal(to_cell)
            USING ERRCODE = 'undefined_object';
    END IF;
    IF EXISTS (SELECT FROM outbox.cells c WHERE c.name IN (from_cell, to_cell) AND c.server IS NULL) THEN
        RAISE EXCEPTION 'cell % is not linked', (SELECT c.name FROM outbox.cells c
                                                  WHERE c.name IN (from_cell, to_cell)
                                                    AND c.server IS NULL ORDER BY c.name LIMIT 1)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A move goes over the links: outbox.set_cell_server(cell, server, link_role).';
    END IF;
    RETURN from_cell;
END
$$;

-- The extension owner's, on control: moves organization root_id from the
-- cell outbox.organization_cells names to to_cell; returns the move's
-- relocation id (outbox.relocations shows it).  Control's worker does the
-- rest.  mode move keeps the primary keys; mode fork copies the
-- organization with new keys and keeps the source, as Sentry's relocation
-- does (docs/relocation.md).
CREATE OR REPLACE FUNCTION outbox.relocate_organization(root_id bigint, to_cell text,
    mode text DEFAULT 'move') RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    from_cell text;
    moving uuid;
    p_relocation uuid := gen_random_uuid();
BEGIN
    PERFORM outbox._require(mode, 'mode');
    IF mode NOT IN ('move', 'fork') THEN
        RAISE EXCEPTION 'mode must be move or fork, not %', quote_literal(mode)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    from_cell := outbox._move_cells(root_id, to_cell);
    SELECT o.relocation INTO moving FROM outbox.organization_moves o
     WHERE o.organization = root_id AND o.side = 'control'
       AND o.state NOT IN ('complete', 'cancelled');
    IF FOUND THEN
        RAISE EXCEPTION 'organization % is moving already (relocation %)', root_id, moving
            USING ERRCODE = 'object_in_use';
    END IF;
    INSERT INTO outbox.organization_moves (relocation, organization, side, mode, from_cell, to_cell,
                                           step)
    VALUES (p_relocation, root_id, 'control', mode, from_cell, to_cell, 'prepare');
    PERFORM outbox._wake_worker_at_commit();
    RETURN p_relocation;
END
$$;

-- The extension owner's, on control: a dry run of moving organization
-- root_id to to_cell, up front: per Organization-scoped table, the
-- organization's rows in its cell now and how many of their primary keys
-- to_cell has taken (a move keeping them would be refused: the move checks
-- the same before it copies anything).  Exports the organization in its
-- cell, in this call.
CREATE OR REPLACE FUNCTION outbox.plan_relocation(root_id bigint, to_cell text)
RETURNS TABLE (model text, "rows" bigint, taken bigint, first_taken bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    from_cell text := outbox._move_cells(root_id, to_cell);
    dry_run jsonb := jsonb_build_object('relocation', gen_random_uuid(), 'organization', root_id);
    keys jsonb;
BEGIN
    keys := outbox._relocation_call((SELECT c.server FROM outbox.cells c WHERE c.name = from_cell),
                                    from_cell, 'keys', dry_run::text)::jsonb->'keys';
    RETURN QUERY
    SELECT t->>'model', (t->>'rows')::bigint, (t->>'taken')::bigint, (t->>'first_taken')::bigint
      FROM jsonb_array_elements(outbox._relocation_call(
               (SELECT c.server FROM outbox.cells c WHERE c.name = to_cell), to_cell, 'taken',
               (dry_run || jsonb_build_object('keys', keys))::text)::jsonb->'taken') t
     ORDER BY 1;
END
$$;

-- The move relocation on control, locked (a step under way holds the row:
-- this waits for it); NULL when it is no move driven from here.
CREATE OR REPLACE FUNCTION outbox._move_locked(p_relocation uuid)
RETURNS outbox.organization_moves
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM outbox.organization_moves o
     WHERE o.relocation = p_relocation AND o.side = 'control' FOR UPDATE
$$;

-- pause_relocation of a move: before its fence only (a pause after it would
-- hold the organization's writes).
CREATE OR REPLACE FUNCTION outbox._pause_move(mv outbox.organization_moves) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mv.state <> 'moving' THEN
        RAISE EXCEPTION 'relocation % is %: only a move under way can be paused', mv.relocation,
            mv.state USING ERRCODE = 'object_not_in_prerequisite_state';
    ELSIF mv.step NOT IN ('prepare', 'export', 'check', 'copy', 'import', 'catch_up') THEN
        RAISE EXCEPTION 'relocation % is at step %, past its fence: a pause would hold organization %''s writes',
            mv.relocation, mv.step, mv.organization
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait for the move to end, or cancel it before its switch.';
    END IF;
    UPDATE outbox.organization_moves o SET state = 'paused', updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
END
$$;

-- The extension owner's: a paused move goes on (control's worker takes it
-- up at once, its failures forgotten).
CREATE OR REPLACE FUNCTION outbox.resume_relocation(relocation uuid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    mv outbox.organization_moves;
BEGIN
    PERFORM outbox._require(relocation, 'relocation');
    mv := outbox._move_locked(relocation);
    IF mv.relocation IS NULL THEN
        RAISE EXCEPTION 'relocation % is no move driven from here', relocation
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An import resumes with CALL outbox.import_organizations (or import_users) again.';
    ELSIF mv.state NOT IN ('paused', 'failed') THEN
        RAISE EXCEPTION 'relocation % is %: only a paused or failed move can be resumed', relocation,
            mv.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE outbox.organization_moves o
       SET state = 'moving', retry_at = NULL, failures = 0, error = NULL,
           updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    PERFORM outbox._wake_worker_at_commit();
END
$$;

-- cancel_relocation of a move, before its switch: the source first (its
-- fence lifts: the organization's writes go on there, where
-- organization_cells still places it), then the target (what it received
-- goes, its fence last).  From the caller's session, through the links'
-- servers and the caller's user mappings; an error leaves the move as it
-- was at the cell that raised it, and a second cancel finishes it.
CREATE OR REPLACE FUNCTION outbox._cancel_move(mv outbox.organization_moves) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF mv.state = 'cancelled' THEN
        RAISE EXCEPTION 'relocation % is already cancelled', mv.relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    ELSIF mv.state = 'complete' OR mv.step IN ('switch', 'drain', 'delete', 'done') THEN
        RAISE EXCEPTION 'relocation % is past its cutover: organization % lives in cell % now',
            mv.relocation, mv.organization, mv.to_cell
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Move it back with outbox.relocate_organization.';
    END IF;
    PERFORM outbox._move_call(mv, mv.from_cell, 'cancel');
    deleted := (outbox._move_call(mv, mv.to_cell, 'cancel')->>'deleted')::bigint;
    UPDATE outbox.organization_moves o
       SET state = 'cancelled', step = 'cancelled', fenced = false, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN deleted;
END
$$;

-- One call into a cell of the move (its answer parsed).
CREATE OR REPLACE FUNCTION outbox._move_call(mv outbox.organization_moves, cell text,
    operation text, argument jsonb DEFAULT '{}') RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._relocation_call(c.server, cell, operation,
               (argument || jsonb_build_object('relocation', mv.relocation))::text)::jsonb
      FROM outbox.cells c WHERE c.name = cell
$$;

-- The next step of mv (control's row, locked); returns whether there is
-- more to do at once.
CREATE OR REPLACE FUNCTION outbox._move_advance(mv outbox.organization_moves) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunk_rows bigint := current_setting('outbox.relocation_chunk_rows')::bigint;
    answer jsonb;
    next_step text := mv.step;
    n bigint;
    found_taken record;
BEGIN
    CASE mv.step
    WHEN 'prepare' THEN
        PERFORM outbox._move_call(mv, mv.to_cell, 'prepare', jsonb_build_object(
            'side', 'target', 'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
            'mode', mv.mode));
        PERFORM outbox._move_call(mv, mv.from_cell, 'prepare', jsonb_build_object(
            'side', 'source', 'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
            'mode', mv.mode));
        next_step := 'export';
    WHEN 'export' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'export');
        mv.rows_total := (answer->>'rows')::bigint;
        next_step := CASE mv.mode WHEN 'move' THEN 'check' ELSE 'copy' END;
    WHEN 'check' THEN
        -- Before anything is copied: the target has none of the keys.  A
        -- key taken there fails the move, for the operator to cancel (or,
        -- the row gone, resume).
        n := coalesce((mv.plan->>'checked')::bigint, 0);
        answer := outbox._move_call(mv, mv.to_cell, 'taken', jsonb_build_object('keys',
            outbox._move_call(mv, mv.from_cell, 'keys', jsonb_build_object(
                'first', n + 1, 'last', n + 10 * chunk_rows))->'keys'));
        SELECT t->>'model' AS model, (t->>'taken')::bigint AS taken,
               (t->>'first_taken')::bigint AS first_taken INTO found_taken
          FROM jsonb_array_elements(answer->'taken') t
         WHERE (t->>'taken')::bigint > 0 ORDER BY t->>'model' LIMIT 1;
        IF FOUND THEN
            UPDATE outbox.organization_moves o
               SET state = 'failed', updated_at = clock_timestamp(),
                   error = format('check: %s', outbox._move_taken_message(mv, found_taken.model,
                                      found_taken.taken, found_taken.first_taken))
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('checked', n + 10 * chunk_rows);
        IF n + 10 * chunk_rows >= mv.rows_total THEN
            next_step := 'copy';
        END IF;
    WHEN 'copy' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'chunk', jsonb_build_object(
            'first', mv.rows_done + 1, 'last', mv.rows_done + chunk_rows));
        n := jsonb_array_length(answer->'rows');
        IF n = 0 OR (answer->'rows'->0->>0)::bigint <> mv.rows_done + 1 THEN
            RAISE EXCEPTION 'relocation %: cell % sent no row % of its export', mv.relocation,
                mv.from_cell, mv.rows_done + 1 USING ERRCODE = 'protocol_violation';
        END IF;
        PERFORM outbox._move_call(mv, mv.to_cell, 'stage', jsonb_build_object('rows', answer->'rows'));
        mv.rows_done := mv.rows_done + n;
        IF mv.rows_done >= mv.rows_total THEN
            next_step := 'import';
        END IF;
    WHEN 'import' THEN
        answer := outbox._move_call(mv, mv.to_cell, 'import');
        IF (answer->>'more')::boolean THEN
            NULL;
        ELSIF mv.mode = 'move' THEN
            next_step := 'catch_up';
        ELSE
            -- A fork is a new organization, in the target, under the key
            -- the import gave its root; the source keeps the original.
            -- The target's word names a new organization only: one control
            -- places already (the source's, or any other) is refused, as
            -- control's records say (issue 44: a compromised target
            -- answered with the source's root, and control routed it
            -- there).  A step tried again never finds its own row: it
            -- rolled back with the step.
            IF jsonb_typeof(answer->'root') IS DISTINCT FROM 'number' OR EXISTS (
                SELECT FROM outbox.organization_cells o
                 WHERE o.organization = (answer->>'root')::bigint) THEN
                RAISE EXCEPTION 'relocation %: cell % answered the fork''s import with root %, which is no new organization',
                    mv.relocation, mv.to_cell, coalesce(answer->>'root', 'null')
                    USING ERRCODE = 'protocol_violation';
            END IF;
            INSERT INTO outbox.organization_cells (organization, cell)
            VALUES ((answer->>'root')::bigint, mv.to_cell);
            PERFORM outbox._move_call(mv, mv.from_cell, 'finish');
            UPDATE outbox.organization_moves o
               SET state = 'complete', step = 'done', rows_done = mv.rows_done,
                   plan = coalesce(o.plan, '{}') || jsonb_build_object('forked_as', answer->'root'),
                   updated_at = clock_timestamp(), finished_at = clock_timestamp()
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
    WHEN 'catch_up', 'last_catch_up' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'changes', jsonb_build_object(
            'acknowledge', coalesce(mv.plan->'acknowledge', '[]'), 'limit', chunk_rows));
        IF jsonb_array_length(answer->'changes') > 0 THEN
            PERFORM outbox._move_call(mv, mv.to_cell, 'apply',
                                      jsonb_build_object('changes', answer->'changes'));
        END IF;
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('acknowledge', answer->'seqs');
        mv.changes := (answer->>'left')::bigint;
        mv.changes_applied := mv.changes_applied + jsonb_array_length(answer->'changes');
        IF mv.step = 'catch_up' AND mv.changes <= greatest(chunk_rows / 10, 1) THEN
            next_step := 'fence';
        ELSIF mv.step = 'last_catch_up' AND mv.changes = 0
              AND jsonb_array_length(answer->'seqs') = 0 THEN
            next_step := 'switch';
        END IF;
    WHEN 'fence' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'fence');
        -- A step tried again after its answer was lost: the pause began at
        -- the first fence (the source's clock).
        mv.fenced_at := coalesce((answer->>'since')::timestamptz, clock_timestamp());
        next_step := 'in_flight';
    WHEN 'in_flight' THEN
        IF (outbox._move_call(mv, mv.from_cell, 'in_flight')->>'waiting')::int = 0 THEN
            next_step := 'last_catch_up';
        ELSE
            PERFORM pg_sleep(0.005);
        END IF;
    WHEN 'switch' THEN
        INSERT INTO outbox.organization_cells AS o (organization, cell)
        VALUES (mv.organization, mv.to_cell)
        ON CONFLICT ON CONSTRAINT organization_cells_pkey
            DO UPDATE SET cell = excluded.cell, updated_at = now()
            WHERE o.cell IS DISTINCT FROM excluded.cell;
        -- The target takes the writes from now on; it holds their messages
        -- until the drain's end.
        PERFORM outbox._move_call(mv, mv.to_cell, 'lift');
        mv.lifted_at := clock_timestamp();
        next_step := 'drain';
    WHEN 'drain' THEN
        -- The source's worker delivers them (woken when its transactions in
        -- flight were over); look again shortly.  Then the target's go.
        IF (outbox._move_call(mv, mv.from_cell, 'drained')->>'left')::bigint = 0 THEN
            PERFORM outbox._move_call(mv, mv.to_cell, 'release');
            next_step := 'delete';
            mv.rows_done := 0;
        ELSE
            PERFORM pg_sleep(0.01);
        END IF;
    WHEN 'delete' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'delete', jsonb_build_object('limit', chunk_rows));
        mv.rows_done := mv.rows_done + (answer->>'deleted')::bigint;
        IF (answer->>'done')::boolean THEN
            UPDATE outbox.organization_moves o
               SET state = 'complete', step = 'done', rows_done = mv.rows_done,
                   updated_at = clock_timestamp(), finished_at = clock_timestamp()
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
    END CASE;
    UPDATE outbox.organization_moves o
       SET step = next_step, rows_done = mv.rows_done, rows_total = mv.rows_total,
           changes = mv.changes, changes_applied = mv.changes_applied, plan = mv.plan,
           fenced = o.fenced OR next_step IN ('in_flight', 'last_catch_up', 'switch'),
           fenced_at = mv.fenced_at, lifted_at = mv.lifted_at, updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN true;
END
$$;

-- Control's mover (worker/mover.cpp): the next step of a move that is due, in this
-- transaction (committed durably: a switch lost in a crash would be done
-- again, but only after it was acknowledged to nobody).  A failed step is
-- tried again after 1 s, 2 s, ... a minute, its error in
-- outbox.relocations.  Returns whether to go on at once.
CREATE OR REPLACE FUNCTION outbox._move_step() RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mv outbox.organization_moves;
    more boolean;
    message text;
BEGIN
    SELECT * INTO mv FROM outbox.organization_moves o
     WHERE o.side = 'control' AND o.state = 'moving'
       AND (o.retry_at IS NULL OR o.retry_at <= clock_timestamp())
     ORDER BY o.updated_at LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    BEGIN
        more := outbox._move_advance(mv);
        IF mv.failures > 0 THEN
            UPDATE outbox.organization_moves o SET error = NULL, failures = 0, retry_at = NULL
             WHERE o.relocation = mv.relocation;
        END IF;
    -- query_canceled too: a cell's owner code past outbox.owner_code_timeout
    -- comes back as 57014, which OTHERS leaves out (the mover's transaction
    -- then failed whole, with no backoff and no error shown).
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
        UPDATE outbox.organization_moves o
           SET error = format('%s: %s', o.step, message), failures = o.failures + 1,
               retry_at = clock_timestamp() + least(60, 2 ^ least(o.failures, 6)) * interval '1 second',
               updated_at = clock_timestamp()
         WHERE o.relocation = mv.relocation;
        more := false;
    END;
    RETURN more;
END
$$;
