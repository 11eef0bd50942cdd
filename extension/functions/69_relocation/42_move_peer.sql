-- Moving an organization: the cell's one entry for control's link role.

-- Whether control recorded the move a prepare describes: asked of control
-- over this cell's own link (its server and user mapping, logged in there
-- as this cell's link role), never taken from the caller's word.  Whoever
-- holds control's link role here (a leaked password, a peer that is not
-- control) can no longer make a cell fence an organization, log its
-- changes or stage rows for a move control never decided (issue 44).
CREATE OR REPLACE FUNCTION outbox._move_recorded_by_control(link outbox.control_link, argument jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    record jsonb := outbox._move_control_record(link, argument->>'relocation');
BEGIN
    IF jsonb_typeof(record) IS DISTINCT FROM 'object'
       OR record->>'organization' IS DISTINCT FROM argument->>'organization'
       OR record->>'from' IS DISTINCT FROM argument->>'from'
       OR record->>'to' IS DISTINCT FROM argument->>'to'
       OR record->>'mode' IS DISTINCT FROM coalesce(argument->>'mode', 'move')
       OR record->>'state' IS DISTINCT FROM 'moving' THEN
        RAISE EXCEPTION 'relocation % is not a move control recorded', argument->>'relocation'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Asked: %s.  Control''s record: %s.', argument, record);
    END IF;
END
$$;

-- Control's record of relocation (relocation_peer 'record' on control, over
-- this cell's link); NULL when control knows no such move of this cell.
CREATE OR REPLACE FUNCTION outbox._move_control_record(link outbox.control_link, relocation text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN outbox._relocation_call(link.server, 'control', 'record',
        jsonb_build_object('relocation', relocation)::text)::jsonb;
EXCEPTION WHEN undefined_object THEN
    RETURN NULL;
END
$$;

-- Control's call into a cell: outbox.relocation_peer there.  Its entry in
-- C (relocation/move/peer_entry.cpp) checks the caller, finds the
-- operation (relocation/move/peer_protocol.cpp: which side of a move it is
-- for, and the statement that answers it), locks the move's row on that
-- side and bounds the owner code of the step.  Every operation but prepare
-- names a move this cell takes part in, on the side the operation is for;
-- a prepare is of a move control recorded (asked of control,
-- _move_recorded_by_control).  On control, the one operation is record,
-- for a cell's link role: control's record of a move that cell takes part
-- in (_move_record).  The answer is json, text that the caller parses:
-- a copy step's chunk goes out as it was built, where jsonb parsed it
-- first (half the source's time in the step, bench/relocation/move.sh).
CREATE OR REPLACE FUNCTION outbox.relocation_peer(protocol int, operation text, argument jsonb)
RETURNS json
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off -- as outbox.receive: a step's statements are short, compiling them is not
AS 'MODULE_PATHNAME', 'outbox_relocation_peer';

-- fence (source): the organization's writes here are refused from now on.
CREATE OR REPLACE FUNCTION outbox._move_fence(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE outbox.organization_moves o
       SET fenced = true, fenced_at = coalesce(o.fenced_at, clock_timestamp()), step = 'fenced',
           updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    -- Fenced by an earlier call whose answer control lost: since then.
    SELECT jsonb_build_object('fenced', true, 'since', CASE WHEN mv.fenced THEN mv.fenced_at END);
$$;

-- drained (source): how many of the outbox rows written before the fence
-- are still here; none left, the step is drained.
CREATE OR REPLACE FUNCTION outbox._move_drained(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mv.outbox_mark IS NULL THEN
        RAISE EXCEPTION 'relocation %: the source''s transactions in flight are not waited for yet',
            mv.relocation USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF mv.step NOT IN ('drained', 'deleting', 'deleted') AND NOT EXISTS (
        SELECT FROM outbox.cell_outbox b WHERE b.id <= mv.outbox_mark) THEN
        UPDATE outbox.organization_moves o SET step = 'drained', updated_at = clock_timestamp()
         WHERE o.relocation = mv.relocation;
    END IF;
    RETURN jsonb_build_object('left', (SELECT count(*) FROM outbox.cell_outbox b
                                        WHERE b.id <= mv.outbox_mark));
END
$$;

-- finish (source of a fork): the copy is done; the organization stays.
CREATE OR REPLACE FUNCTION outbox._move_finish(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mv.mode <> 'fork' THEN
        RAISE EXCEPTION 'relocation % is a move: its source finishes by deleting the organization',
            mv.relocation USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE outbox.organization_moves o
       SET state = 'complete', step = 'exported', updated_at = clock_timestamp(),
           finished_at = coalesce(o.finished_at, clock_timestamp())
     WHERE o.relocation = mv.relocation;
    DELETE FROM outbox.relocation_rows s WHERE s.relocation = mv.relocation;
    RETURN jsonb_build_object('finished', true);
END
$$;

-- cancel (either side, before the cutover; 41_move_cell_steps.sql).
CREATE OR REPLACE FUNCTION outbox._move_cancel_peer(relocation uuid) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    mv outbox.organization_moves;
BEGIN
    -- No lock on the tables: the move's triggers stay, idle, for the
    -- next move (issue 44: the cancel's DROP TRIGGER queued behind
    -- another tenant's transaction stopped every writer of the table).
    SELECT * INTO mv FROM outbox.organization_moves o
     WHERE o.relocation = relocation AND o.side <> 'control' FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('deleted', 0); -- never prepared here
    END IF;
    RETURN outbox._move_cancel_here(mv);
END
$$;

-- lift (target, at the switch): the fence lifts; the organization's
-- messages written here from then on wait until release.
-- scopes: the names of the scopes whose shard identifiers are
-- organizations (control's outbox.organization_scopes); none, every scope.
CREATE OR REPLACE FUNCTION outbox._move_lift(mv outbox.organization_moves, scopes jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The organization's messages written here from now on wait (its
    -- shards paused, in each scope of organizations, unless paused
    -- already) until release: control takes the source's first.  A
    -- user's shard whose id is the organization's is not held.
    IF mv.step <> 'lifted' THEN
        PERFORM outbox._move_walk_tombstones_again(mv);
        WITH held AS (
            INSERT INTO outbox.paused_shards (silo, shard_scope, shard_identifier)
            SELECT 'cell', s.id, mv.organization FROM outbox.scopes s
             WHERE coalesce(jsonb_array_length(scopes), 0) = 0 OR scopes ? s.name
            ON CONFLICT DO NOTHING RETURNING shard_scope)
        SELECT coalesce(mv.plan, '{}') || jsonb_build_object('held',
                   coalesce(jsonb_agg(h.shard_scope), '[]'))
          INTO mv.plan FROM held h;
    END IF;
    UPDATE outbox.organization_moves o
       SET fenced = false, state = 'complete', step = 'lifted', plan = mv.plan,
           lifted_at = coalesce(o.lifted_at, clock_timestamp()),
           finished_at = coalesce(o.finished_at, clock_timestamp()), updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN jsonb_build_object('lifted', true);
END
$$;

-- release (target, at the drain's end): its held messages go.
CREATE OR REPLACE FUNCTION outbox._move_release(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The source's messages are all delivered: the target's go too.
    IF mv.step <> 'lifted' THEN
        RAISE EXCEPTION 'relocation %: the target''s fence is not lifted yet', mv.relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    DELETE FROM outbox.paused_shards p
     WHERE p.silo = 'cell' AND p.shard_identifier = mv.organization AND p.cell_name = ''
       AND p.shard_scope IN (SELECT h::int FROM jsonb_array_elements_text(mv.plan->'held') h);
    UPDATE outbox.organization_moves o SET plan = o.plan - 'held', updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN jsonb_build_object('released', true);
END
$$;

-- On control, for cell (a cell's link role, outbox._link_peer): control's
-- record of a move that cell is the source or the target of.
CREATE OR REPLACE FUNCTION outbox._move_record(cell text, operation text, argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    answer jsonb;
    p_relocation uuid;
BEGIN
    IF operation IS DISTINCT FROM 'record' THEN
        RAISE EXCEPTION 'operation % is not one control answers (record is)',
            quote_literal(operation) USING ERRCODE = 'invalid_parameter_value';
    ELSIF jsonb_typeof(argument) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'argument must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    p_relocation := (argument->>'relocation')::uuid;
    PERFORM outbox._require(p_relocation, 'argument.relocation');
    SELECT jsonb_build_object('relocation', o.relocation, 'organization', o.organization,
                              'from', o.from_cell, 'to', o.to_cell, 'mode', o.mode,
                              'state', o.state, 'step', o.step) INTO answer
      FROM outbox.organization_moves o
     WHERE o.relocation = p_relocation AND o.side = 'control' AND cell IN (o.from_cell, o.to_cell);
    IF answer IS NULL THEN
        RAISE EXCEPTION 'relocation % is no move of cell %', argument->>'relocation', cell
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN answer;
END
$$;
