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

-- Control's call into a cell: outbox.relocation_peer there, whose entry in
-- C (relocation/move/peer_entry.cpp) bounds the owner code of the step
-- and calls this.  Every operation but prepare names a move this cell
-- takes part in, on the side the operation is for; a prepare is of a move
-- control recorded (asked of control, _move_recorded_by_control).  On
-- control, the one operation is record, for a cell's link role: control's
-- record of a move that cell takes part in.
CREATE OR REPLACE FUNCTION outbox.relocation_peer(protocol int, operation text, argument jsonb)
RETURNS jsonb
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_relocation_peer';

CREATE OR REPLACE FUNCTION outbox._relocation_peer(protocol int, operation text, argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    link outbox.control_link;
    mv outbox.organization_moves;
    p_relocation uuid;
    wanted text;
BEGIN
    IF protocol IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'relocation protocol % is not supported here (this side speaks 1)',
            coalesce(protocol::text, 'NULL') USING ERRCODE = 'feature_not_supported';
    END IF;
    IF current_setting('outbox.silo_mode') = 'control' THEN
        RETURN outbox._move_record(outbox._link_peer(1), operation, argument);
    END IF;
    SELECT * INTO link FROM outbox.control_link;
    IF current_setting('outbox.silo_mode') <> 'cell' OR NOT FOUND
       OR link.link_role <> session_user THEN
        RAISE EXCEPTION 'role % is not the link role of this cell''s control', quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- By identity too: dropped and created again, or a superuser now.
    PERFORM outbox._link_peer(1);
    IF jsonb_typeof(argument) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'argument must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    p_relocation := (argument->>'relocation')::uuid;
    PERFORM outbox._require(p_relocation, 'argument.relocation');
    IF operation = 'prepare' THEN
        IF NOT EXISTS (SELECT FROM outbox.organization_moves o WHERE o.relocation = p_relocation) THEN
            PERFORM outbox._move_recorded_by_control(link, argument);
        END IF;
        RETURN outbox._move_prepare(link.cell_name, argument);
    ELSIF operation = 'cancel' THEN
        RETURN outbox._move_cancel_peer(p_relocation);
    ELSIF operation = 'keys' THEN -- of a move's export here, or a dry run's
        RETURN outbox._move_keys(p_relocation, argument);
    ELSIF operation = 'taken' THEN -- read only, for any move and dry run
        RETURN jsonb_build_object('taken', coalesce((
            SELECT jsonb_agg(to_jsonb(k)) FROM outbox._move_taken(argument->'keys') k), '[]'));
    END IF;
    wanted := CASE WHEN operation IN ('export', 'chunk', 'changes', 'fence', 'in_flight',
                                      'drained', 'delete', 'finish') THEN 'source'
                   WHEN operation IN ('stage', 'import', 'apply', 'lift', 'release') THEN 'target' END;
    IF wanted IS NULL THEN
        RAISE EXCEPTION 'operation % is not one of relocation protocol 1', quote_literal(operation)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- FOR NO KEY UPDATE: writers' change log entries refer to this row
    -- (their foreign key check takes FOR KEY SHARE), and a step such as the
    -- export holds it for as long as it runs; FOR UPDATE made every writer
    -- of the cell wait for the export (issue 44).
    SELECT * INTO mv FROM outbox.organization_moves o
     WHERE o.relocation = p_relocation AND o.side = wanted FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relocation % is no move whose % this cell is', p_relocation, wanted
            USING ERRCODE = 'undefined_object';
    ELSIF mv.state = 'cancelled' THEN
        RAISE EXCEPTION 'relocation % was cancelled', p_relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN outbox._move_peer_step(mv, operation, argument);
END
$$;

-- One operation of relocation protocol 1 on the move mv, this cell's side
-- of it (locked by _relocation_peer, FOR NO KEY UPDATE).
CREATE OR REPLACE FUNCTION outbox._move_peer_step(mv outbox.organization_moves, operation text,
                                                  argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CASE operation
    WHEN 'export' THEN
        RETURN outbox._move_export(mv);
    WHEN 'chunk' THEN
        RETURN jsonb_build_object('rows', coalesce((
            SELECT jsonb_agg(jsonb_build_array(s.ordinal, s.model, s.pk, s.fields) ORDER BY s.ordinal)
              FROM outbox.relocation_rows s
             WHERE s.relocation = mv.relocation
               AND s.ordinal BETWEEN (argument->>'first')::bigint AND (argument->>'last')::bigint),
            '[]'));
    WHEN 'changes' THEN
        RETURN outbox._move_changes(mv, argument);
    WHEN 'fence' THEN
        UPDATE outbox.organization_moves o
           SET fenced = true, fenced_at = coalesce(o.fenced_at, clock_timestamp()), step = 'fenced',
               updated_at = clock_timestamp()
         WHERE o.relocation = mv.relocation;
        -- Fenced by an earlier call whose answer control lost: since then.
        RETURN jsonb_build_object('fenced', true, 'since', CASE WHEN mv.fenced THEN mv.fenced_at END);
    WHEN 'in_flight' THEN
        RETURN outbox._move_in_flight(mv);
    WHEN 'drained' THEN
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
    WHEN 'delete' THEN
        IF mv.state = 'complete' THEN
            RETURN jsonb_build_object('deleted', 0, 'done', true);
        END IF;
        RETURN outbox._move_delete(mv, coalesce((argument->>'limit')::int, 1000));
    WHEN 'finish' THEN
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
    WHEN 'stage' THEN
        RETURN outbox._move_stage(mv, argument->'chunk'->'rows');
    WHEN 'import' THEN
        RETURN outbox._move_import(mv);
    WHEN 'apply' THEN
        RETURN outbox._move_apply(mv, argument->'changes');
    WHEN 'lift' THEN
        RETURN outbox._move_lift(mv, argument->'scopes');
    WHEN 'release' THEN
        RETURN outbox._move_release(mv);
    END CASE;
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
