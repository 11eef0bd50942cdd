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

-- _relocation_decide for a move driven from here.
CREATE OR REPLACE FUNCTION outbox._move_decide(mv outbox.organization_moves, operation text)
RETURNS text
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._relocation_decide(mv.mode, mv.relocation, mv.state, mv.step, mv.organization,
                                     mv.to_cell, operation)
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
        PERFORM outbox._import_decide(relocation, 'resume'); -- refused: its CALL resumes it
    END IF;
    mv.state := outbox._move_decide(mv, 'resume');
    UPDATE outbox.organization_moves o
       SET state = mv.state, retry_at = NULL, failures = 0, error = NULL,
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
    new_state text := outbox._move_decide(mv, 'cancel');
BEGIN
    PERFORM outbox._move_call(mv, mv.from_cell, 'cancel');
    deleted := (outbox._move_call(mv, mv.to_cell, 'cancel')->>'deleted')::bigint;
    UPDATE outbox.organization_moves o
       SET state = new_state, step = 'cancelled', fenced = false,
           updated_at = clock_timestamp(), finished_at = clock_timestamp()
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

-- copy: the source's chunk of ordinals first_row to last_row, staged in the
-- target; the target's answer, which says which ordinals it staged.  The
-- chunk goes through as the source's text, parsed in the target only (as
-- jsonb here, parsed, merged and written again, it cost a third of the
-- step: issue 45).  Checked to be one JSON value, so that nothing in it can
-- stand beside the relocation this side names, which comes last (jsonb
-- keeps a key's last value).
CREATE OR REPLACE FUNCTION outbox._move_relay_chunk(mv outbox.organization_moves,
                                                    first_row bigint, last_row bigint)
RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._relocation_call(t.server, mv.to_cell, 'stage',
               format('{"chunk": %s, "relocation": %s}', chunk::json,
                      to_json(mv.relocation::text)))::jsonb
      FROM outbox.cells s, outbox.cells t,
           outbox._relocation_call(s.server, mv.from_cell, 'chunk', jsonb_build_object(
               'first', first_row, 'last', last_row, 'relocation', mv.relocation)::text) chunk
     WHERE s.name = mv.from_cell AND t.name = mv.to_cell
$$;

-- check: whether the target took a key of the next page of the export
-- (ten chunks of ordinals from checked + 1): {"taken": true, "error": why}.
CREATE OR REPLACE FUNCTION outbox._move_check(mv outbox.organization_moves, checked bigint,
                                              chunk_rows bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_taken record;
BEGIN
    SELECT t->>'model' AS model, (t->>'taken')::bigint AS taken,
           (t->>'first_taken')::bigint AS first_taken INTO found_taken
      FROM jsonb_array_elements(outbox._move_call(mv, mv.to_cell, 'taken', jsonb_build_object('keys',
               outbox._move_call(mv, mv.from_cell, 'keys', jsonb_build_object(
                   'first', checked + 1, 'last', checked + 10 * chunk_rows))->'keys'))->'taken') t
     WHERE (t->>'taken')::bigint > 0 ORDER BY t->>'model' LIMIT 1;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('taken', false);
    END IF;
    RETURN jsonb_build_object('taken', true, 'error', outbox._move_taken_message(mv,
        found_taken.model, found_taken.taken, found_taken.first_taken));
END
$$;

-- The end of a fork, whose import answered with root: a new organization,
-- in the target, under the key the import gave its root; the source keeps
-- the original.  The target's word names a new organization only: one
-- control places already (the source's, or any other) is refused, as
-- control's records say (issue 44: a compromised target answered with the
-- source's root, and control routed it there).  A step tried again never
-- finds its own row: it rolled back with the step.
CREATE OR REPLACE FUNCTION outbox._move_fork_done(mv outbox.organization_moves, root jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(root) IS DISTINCT FROM 'number' OR EXISTS (
        SELECT FROM outbox.organization_cells o WHERE o.organization = (root #>> '{}')::bigint) THEN
        RAISE EXCEPTION 'relocation %: cell % answered the fork''s import with root %, which is no new organization',
            mv.relocation, mv.to_cell, coalesce(root::text, 'null')
            USING ERRCODE = 'protocol_violation';
    END IF;
    INSERT INTO outbox.organization_cells (organization, cell)
    VALUES ((root #>> '{}')::bigint, mv.to_cell);
    PERFORM outbox._move_call(mv, mv.from_cell, 'finish');
END
$$;

-- catch_up and last_catch_up: a batch of the source's changes applied in
-- the target (the batch before it acknowledged).  Answers the changes
-- left, applied and read (seqs), and the log entries to acknowledge next.
CREATE OR REPLACE FUNCTION outbox._move_catch_up(mv outbox.organization_moves, chunk_rows bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    answer jsonb := outbox._move_call(mv, mv.from_cell, 'changes', jsonb_build_object(
        'acknowledge', coalesce(mv.plan->'acknowledge', '[]'), 'limit', chunk_rows));
BEGIN
    IF jsonb_array_length(answer->'changes') > 0 THEN
        PERFORM outbox._move_call(mv, mv.to_cell, 'apply',
                                  jsonb_build_object('changes', answer->'changes'));
    END IF;
    RETURN jsonb_build_object('left', answer->'left', 'applied', jsonb_array_length(answer->'changes'),
                              'seqs', jsonb_array_length(answer->'seqs'),
                              'acknowledge', answer->'seqs');
END
$$;

-- switch: control places the organization in the target, which takes its
-- writes from now on and holds their messages until the drain's end (its
-- shards of each scope of organizations, control's organization_scopes).
CREATE OR REPLACE FUNCTION outbox._move_switch(mv outbox.organization_moves) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO outbox.organization_cells AS o (organization, cell)
    VALUES (mv.organization, mv.to_cell)
    ON CONFLICT ON CONSTRAINT organization_cells_pkey
        DO UPDATE SET cell = excluded.cell, updated_at = now()
        WHERE o.cell IS DISTINCT FROM excluded.cell;
    PERFORM outbox._move_call(mv, mv.to_cell, 'lift', jsonb_build_object('scopes',
        (SELECT coalesce(jsonb_agg(s.name), '[]') FROM outbox.organization_scopes o
           JOIN outbox.scopes s ON s.id = o.scope)));
END
$$;

-- Where a move goes after its step's answer: the step machine of
-- src/relocation/move/move_machine.hpp (the answer's scalars by the names
-- of its MoveAnswer).
CREATE OR REPLACE FUNCTION outbox._move_next(step text, mode text, chunk_rows bigint,
    rows_done bigint, rows_total bigint, checked bigint, answer jsonb, OUT next_step text,
    OUT outcome text, OUT next_rows_done bigint, OUT next_rows_total bigint,
    OUT next_checked bigint, OUT fenced boolean)
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'outbox__move_next';

-- The next step of mv (control's row, locked); returns whether there is
-- more to do at once.  The step's calls to the cells, then the machine's
-- transition (_move_next), then what that transition asks of the cells,
-- then the record.
CREATE OR REPLACE FUNCTION outbox._move_advance(mv outbox.organization_moves) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunk_rows bigint := current_setting('outbox.relocation_chunk_rows')::bigint;
    checked bigint := coalesce((mv.plan->>'checked')::bigint, 0);
    answer jsonb := '{}';
    t record;
BEGIN
    CASE mv.step
    WHEN 'prepare' THEN
        PERFORM outbox._move_call(mv, mv.to_cell, 'prepare', jsonb_build_object('side', 'target',
                    'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
                    'mode', mv.mode));
        PERFORM outbox._move_call(mv, mv.from_cell, 'prepare', jsonb_build_object('side', 'source',
                    'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
                    'mode', mv.mode));
    WHEN 'check' THEN
        answer := outbox._move_check(mv, checked, chunk_rows);
    WHEN 'copy' THEN
        -- Ten chunks a step, as check's pages: a step's round trips and
        -- commit cost as much as relaying 1,000 rows (bench/relocation/move.sh:
        -- the copy 2.8 s in steps of 1,000 rows, 1.7 s in steps of 10,000).
        -- The target stages any span; its import still goes chunk by chunk.
        answer := outbox._move_relay_chunk(mv, mv.rows_done + 1, mv.rows_done + 10 * chunk_rows);
    WHEN 'import' THEN
        answer := outbox._move_call(mv, mv.to_cell, 'import');
    WHEN 'catch_up', 'last_catch_up' THEN
        answer := outbox._move_catch_up(mv, chunk_rows);
        mv.changes := (answer->>'left')::bigint;
        mv.changes_applied := mv.changes_applied + (answer->>'applied')::bigint;
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('acknowledge', answer->'acknowledge');
    WHEN 'fence' THEN
        -- A step tried again after its answer was lost: the pause began at
        -- the first fence (the source's clock).
        mv.fenced_at := coalesce((outbox._move_call(mv, mv.from_cell, 'fence')->>'since')::timestamptz,
                                 clock_timestamp());
    WHEN 'switch' THEN
        PERFORM outbox._move_switch(mv);
        mv.lifted_at := clock_timestamp();
    ELSE -- export, in_flight, drain (its source's messages delivered?), delete
        answer := outbox._move_call(mv, mv.from_cell, CASE mv.step WHEN 'drain' THEN 'drained'
                                                           ELSE mv.step END,
                                    jsonb_build_object('limit', chunk_rows));
    END CASE;
    t := outbox._move_next(mv.step, mv.mode, chunk_rows, mv.rows_done, mv.rows_total, checked, answer);
    IF t.outcome = 'protocol_violation' THEN
        RAISE EXCEPTION 'relocation %: step % got an answer it cannot take: %', mv.relocation,
            mv.step, left(answer::text, 200) USING ERRCODE = 'protocol_violation';
    ELSIF t.outcome = 'failed' THEN
        UPDATE outbox.organization_moves o
           SET state = 'failed', updated_at = clock_timestamp(),
               error = format('check: %s', answer->>'error')
         WHERE o.relocation = mv.relocation;
        RETURN false;
    ELSIF t.outcome = 'wait' THEN
        PERFORM pg_sleep(CASE mv.step WHEN 'drain' THEN 0.01 ELSE 0.005 END);
    ELSIF mv.step = 'import' AND t.outcome = 'complete' THEN
        PERFORM outbox._move_fork_done(mv, answer->'root');
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('forked_as', answer->'root');
    ELSIF mv.step = 'drain' THEN
        PERFORM outbox._move_call(mv, mv.to_cell, 'release'); -- the target's messages go too
    END IF;
    UPDATE outbox.organization_moves o
       SET state = CASE t.outcome WHEN 'complete' THEN 'complete' ELSE o.state END,
           step = t.next_step, rows_done = t.next_rows_done, rows_total = t.next_rows_total,
           changes = mv.changes, changes_applied = mv.changes_applied, fenced = o.fenced OR t.fenced,
           plan = coalesce(mv.plan, '{}') || jsonb_build_object('checked', t.next_checked),
           fenced_at = mv.fenced_at, lifted_at = mv.lifted_at, updated_at = clock_timestamp(),
           finished_at = CASE t.outcome WHEN 'complete' THEN clock_timestamp() END
     WHERE o.relocation = mv.relocation;
    RETURN t.outcome IN ('next', 'wait');
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
