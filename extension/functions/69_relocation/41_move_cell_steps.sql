-- Moving an organization: the cells' steps after the change log
-- (40_move_cell_log.sql); control drives them through relocation_peer
-- (42_move_peer.sql).

-- Deletes the rows of a plan entry whose primary keys are keys, as the
-- table's owner and without outbox rows (a move's target and the source it
-- left: the rows' messages are the other cell's); returns how many.
CREATE OR REPLACE FUNCTION outbox._move_delete_rows(entry jsonb, keys jsonb[]) RETURNS int
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (outbox._run_as_table_owner_uncaptured((entry->>'relid')::oid::regclass,
        outbox._relocation_statement('delete_keys', (entry->>'relid')::oid::regclass, entry->>'pk'),
        keys))[1]::text::int
$$;

-- Sets the cycles' columns of the organization's rows here (the members
-- of mv present) to NULL, table by table of plan, before they are deleted.
CREATE OR REPLACE FUNCTION outbox._move_clear_cycles(mv outbox.organization_moves, plan jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    deferred text[];
BEGIN
        FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) e LOOP
            deferred := outbox._relocation_deferred(entry);
            CONTINUE WHEN cardinality(deferred) = 0;
            PERFORM outbox._run_as_table_owner_uncaptured((entry->>'relid')::oid::regclass,
                outbox._relocation_statement('clear_keys', (entry->>'relid')::oid::regclass,
                                             entry->>'pk', deferred::name[]),
                ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                       WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                         AND mm.present));
        END LOOP;
END
$$;

-- lift (target): the tombstones of parents in the other silo that the
-- organization's rows here refer to are walked again by this cell's
-- cascade (their ids renewed, above its tombstone watermark).  This cell
-- may have recorded and walked one before the rows came, finding no child:
-- a user deleted in control while its member's organization moved, whose
-- member the source's cascade had not deleted before its fence (which then
-- refused it) would stay here an orphan (test/integration/
-- relocation_cascade.sh; found by the soak).  The references are read as
-- each table's owner.  Returns the tombstones renewed.
CREATE OR REPLACE FUNCTION outbox._move_walk_tombstones_again(mv outbox.organization_moves)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    fk record;
    refs bigint[];
    n bigint;
    renewed bigint := 0;
BEGIN
    FOR entry IN SELECT e.value FROM outbox.relocation_state s, jsonb_array_elements(s.plan) e
                  WHERE s.relocation = mv.relocation LOOP
        FOR fk IN SELECT f.relid, f.column_name, f.parent_table, f.parent_silo
                    FROM outbox.registered_foreign_keys f
                   WHERE f.relid = (entry->>'relid')::oid LOOP
            refs := ARRAY(SELECT DISTINCT (r OPERATOR(pg_catalog.#>>) '{}')::bigint FROM unnest(
                outbox._run_as_table_owner(fk.relid,
                    outbox._relocation_statement('values_of_keys', fk.relid, entry->>'pk',
                                                 key_column => fk.column_name),
                    ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                           WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                             AND mm.present))) r);
            CONTINUE WHEN cardinality(refs) = 0;
            -- A deleted control row is a cell tombstone (cascade.cpp).
            IF fk.parent_silo = 'control' THEN
                UPDATE outbox.cell_tombstone t SET id = DEFAULT
                 WHERE t.table_name = fk.parent_table AND t.object_identifier = ANY (refs);
            ELSE
                UPDATE outbox.control_tombstone t SET id = DEFAULT
                 WHERE t.table_name = fk.parent_table AND t.object_identifier = ANY (refs);
            END IF;
            GET DIAGNOSTICS n = ROW_COUNT;
            renewed := renewed + n;
        END LOOP;
    END LOOP;
    RETURN renewed;
END
$$;

-- delete (source, after the cutover): the organization's rows, children
-- first, limit at a time, as each table's owner, without outbox rows; the
-- first call clears the references of cycles (which point from a table to
-- one after it).
CREATE OR REPLACE FUNCTION outbox._move_delete(mv outbox.organization_moves, batch_limit int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    pks bigint[];
    deleted int;
BEGIN
    IF mv.state = 'complete' THEN -- deleted by an earlier call whose answer control lost
        RETURN jsonb_build_object('deleted', 0, 'done', true);
    ELSIF mv.step NOT IN ('drained', 'deleting') THEN
        RAISE EXCEPTION 'relocation %: the source deletes the organization only once its outbox rows are delivered',
            mv.relocation USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF mv.step = 'drained' THEN
        PERFORM outbox._move_clear_cycles(mv, mv.plan->'order');
    END IF;
    -- Each table's members in key order, from the last key deleted on
    -- (plan.deleted): a scan from the start would pass every row already
    -- done, batch after batch.
    FOR entry IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        pks := ARRAY(SELECT mm.pk FROM outbox.move_members mm
                      WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                        AND mm.pk > coalesce((mv.plan->'deleted'->>(entry->>'model'))::bigint,
                                             -9223372036854775808)
                        AND mm.present ORDER BY mm.pk LIMIT batch_limit);
        CONTINUE WHEN cardinality(pks) = 0;
        deleted := outbox._move_delete_rows(entry, ARRAY(SELECT to_jsonb(k) FROM unnest(pks) k));
        -- pks are the present members of that range of keys.
        UPDATE outbox.move_members mm SET present = false
         WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
           AND mm.pk BETWEEN pks[1] AND pks[cardinality(pks)];
        UPDATE outbox.organization_moves o
           SET step = 'deleting', rows_done = o.rows_done + deleted, updated_at = clock_timestamp(),
               plan = jsonb_set(o.plan, '{deleted}', coalesce(o.plan->'deleted', '{}')
                                || jsonb_build_object(entry->>'model', pks[cardinality(pks)]))
         WHERE o.relocation = mv.relocation;
        RETURN jsonb_build_object('deleted', deleted, 'done', false);
    END LOOP;
    UPDATE outbox.organization_moves o
       SET state = 'complete', step = 'deleted', updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    DELETE FROM outbox.move_changes c WHERE c.relocation = mv.relocation;
    RETURN jsonb_build_object('deleted', 0, 'done', true);
END
$$;

-- stage (target): a chunk of the source's export into relocation_rows; a
-- chunk sent again adds nothing.  Says which ordinals the chunk held
-- (first_row, row_count): control's copy step goes on from them.  A chunk
-- is written as new; only when one of its rows is there already (a step
-- tried again after its answer was lost) is it written again without
-- those.  Not ON CONFLICT DO NOTHING each time: that cost a fifth of the
-- writes (bench/relocation/move.sh).
CREATE OR REPLACE FUNCTION outbox._move_stage(mv outbox.organization_moves, chunk jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    staged bigint;
    again boolean;
    detail text;
BEGIN
    IF jsonb_typeof(chunk) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'relocation %: a chunk is an array of rows', mv.relocation
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH again IN ARRAY '{false,true}'::boolean[] LOOP
        BEGIN
            WITH c AS (
                SELECT (e->>0)::bigint AS ordinal, e->>1 AS model, (e->>2)::bigint AS pk,
                       e->3 AS fields
                  FROM jsonb_array_elements(chunk) e
            ), members AS (
                INSERT INTO outbox.move_members (relocation, model, pk, present)
                SELECT mv.relocation, c.model, c.pk, true FROM c
                 WHERE c.pk IS NOT NULL AND mv.mode = 'move'
                   AND (NOT again OR NOT EXISTS (SELECT FROM outbox.move_members m
                         WHERE m.relocation = mv.relocation AND m.model = c.model
                           AND m.pk = c.pk))
            ), rows_staged AS (
                INSERT INTO outbox.relocation_rows (relocation, ordinal, model, pk, fields)
                SELECT mv.relocation, c.ordinal, c.model, c.pk, c.fields FROM c
                 WHERE NOT again OR NOT EXISTS (SELECT FROM outbox.relocation_rows r
                        WHERE r.relocation = mv.relocation AND r.ordinal = c.ordinal)
                RETURNING 1
            )
            SELECT count(*) INTO staged FROM rows_staged;
            EXIT;
        EXCEPTION WHEN unique_violation THEN
            IF again THEN -- not a row staged before: one the chunk holds twice
                GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
                RAISE EXCEPTION 'relocation %: the chunk holds a row twice', mv.relocation
                    USING ERRCODE = 'invalid_parameter_value', DETAIL = detail;
            END IF;
        END;
    END LOOP;
    RETURN jsonb_build_object('staged', staged, 'first_row', chunk->0->0,
                              'row_count', jsonb_array_length(chunk));
END
$$;

-- How many of keys (primary keys of the table model names) are taken
-- here, and the first of them.  Read as the table's owner (its policies
-- and code run as that role).
CREATE OR REPLACE FUNCTION outbox._move_taken_keys(model text, keys jsonb[], OUT taken bigint,
                                                   OUT first_taken bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    answer jsonb[];
BEGIN
    SELECT * INTO t FROM outbox._move_tables() m WHERE m.model = _move_taken_keys.model;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table key % is no Organization-scoped table here', quote_literal(model)
            USING ERRCODE = 'undefined_table',
                  HINT = 'A move needs the same relocation scopes in both cells (outbox.check_models()).';
    END IF;
    answer := outbox._run_as_table_owner(t.relid,
        outbox._relocation_statement('count_keys', t.relid, t.pk), keys);
    taken := (answer[1]->>0)::bigint;
    first_taken := (answer[1]->>1)::bigint;
END
$$;

-- Which of by_model's keys ({model: [primary key, ...]}, a move's) are taken here,
-- model by model: what a move keeping primary keys would collide with.
CREATE OR REPLACE FUNCTION outbox._move_taken(by_model jsonb)
RETURNS TABLE (model text, "rows" bigint, taken bigint, first_taken bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    k record;
BEGIN
    IF jsonb_typeof(by_model) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'argument.keys must be a JSON object of arrays of keys by table key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR k IN SELECT e.key, e.value FROM jsonb_each(by_model) e ORDER BY e.key LOOP
        IF jsonb_typeof(k.value) IS DISTINCT FROM 'array' THEN
            RAISE EXCEPTION 'argument.keys.% must be an array of keys', k.key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        model := k.key;
        "rows" := jsonb_array_length(k.value);
        SELECT * INTO taken, first_taken
          FROM outbox._move_taken_keys(k.key, ARRAY(SELECT e FROM jsonb_array_elements(k.value) e));
        RETURN NEXT;
    END LOOP;
END
$$;

-- What a move says of keys taken in its target (a row of _move_taken).
CREATE OR REPLACE FUNCTION outbox._move_taken_message(mv outbox.organization_moves, model text,
    taken bigint, first_taken bigint) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('organization %s cannot move to cell %s: %s of its keys in %s are taken there (the first: %s)',
                  mv.organization, mv.to_cell, taken, model, first_taken)
$$;

-- keys (source): the primary keys of the move's export, ordinals first to
-- last, {model: [key, ...]}; with no move of that relocation here, those of
-- organization as it is now (outbox.plan_relocation's dry run).
CREATE OR REPLACE FUNCTION outbox._move_keys(p_relocation uuid, argument jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM outbox.organization_moves o
                WHERE o.relocation = p_relocation AND o.side = 'source') THEN
        RETURN jsonb_build_object('keys', coalesce((
            SELECT jsonb_object_agg(g.model, g.pks) FROM (
                SELECT s.model, jsonb_agg(s.pk ORDER BY s.pk) AS pks FROM outbox.relocation_rows s
                 WHERE s.relocation = p_relocation AND s.pk IS NOT NULL
                   AND s.ordinal BETWEEN (argument->>'first')::bigint AND (argument->>'last')::bigint
                 GROUP BY s.model) g), '{}'));
    END IF;
    PERFORM outbox._require((argument->>'organization')::bigint, 'argument.organization');
    RETURN jsonb_build_object('keys', coalesce((
        SELECT jsonb_object_agg(g.model, g.pks) FROM (
            SELECT e.model, jsonb_agg(e.pk ORDER BY e.pk) AS pks
              FROM outbox.export_organizations(ARRAY[(argument->>'organization')::bigint]) e
             WHERE e.pk IS NOT NULL GROUP BY e.model) g), '{}'));
END
$$;

-- Refuses (42501) an export that is not the moving organization's by the
-- export's rule, whatever its manifest and checksum say (they are the
-- source's, relayed by control, and neither is believed: issue 44): its
-- one root row is the organization, and every other row refers, through a
-- reference the import maps and does not defer, to a row (the import
-- refuses a reference to a row outside the export, 23503).  Row by row
-- that makes every row the organization's.
CREATE OR REPLACE FUNCTION outbox._move_export_is_organizations(mv outbox.organization_moves,
                                                                plan jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    roots bigint[];
    stray record;
BEGIN
    roots := ARRAY(SELECT s.pk FROM outbox.relocation_rows s
                    WHERE s.relocation = mv.relocation AND s.model = mv.plan->>'root'
                    ORDER BY s.pk);
    IF roots IS DISTINCT FROM ARRAY[mv.organization] THEN
        RAISE EXCEPTION 'relocation %: the export''s roots are %, not organization %',
            mv.relocation, roots, mv.organization USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT e.value->>'model' AS model, s.pk INTO stray
      FROM jsonb_array_elements(plan) e
      JOIN outbox.relocation_rows s
        ON s.relocation = mv.relocation AND s.model = e.value->>'model'
     WHERE e.value->>'model' <> mv.plan->>'root'
       AND NOT EXISTS (SELECT FROM jsonb_array_elements(e.value->'refs') r
                        WHERE r.value->>'kind' = 'map' AND NOT (r.value->>'deferred')::boolean
                          AND s.fields->>(r.value->>'column') IS NOT NULL)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'relocation %: row % of % in the export refers to no row of organization %',
            mv.relocation, stray.pk, stray.model, mv.organization
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

-- import (target): the first call starts the import with the source's keys
-- once none of them is taken here; each call after it imports chunks.
CREATE OR REPLACE FUNCTION outbox._move_import(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state;
    found_taken record;
    outsider text;
    started timestamptz;
BEGIN
    SELECT * INTO st FROM outbox.relocation_state s WHERE s.relocation = mv.relocation;
    IF NOT FOUND AND mv.mode = 'fork' THEN
        -- part 2's import: new keys, capture fired (new objects for control)
        PERFORM outbox._import_begin(mv.relocation, 'Organization', NULL);
        RETURN jsonb_build_object('more', true);
    ELSIF NOT FOUND THEN
        ANALYZE outbox.move_members; -- all staged: as in the export
        PERFORM outbox._import_begin(mv.relocation, 'Organization', NULL);
        UPDATE outbox.relocation_state s SET keys = 'kept' WHERE s.relocation = mv.relocation
        RETURNING * INTO st;
        -- A move writes only this cell's Organization-scoped tables, whatever
        -- the export it was sent names (issue 44).
        SELECT e.value->>'model' INTO outsider FROM jsonb_array_elements(st.plan) e
         WHERE (e.value->>'relid')::oid NOT IN (SELECT m.relid FROM outbox._move_tables() m)
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'relocation %: the export names table %, which is not Organization-scoped in this cell',
                mv.relocation, outsider USING ERRCODE = 'insufficient_privilege';
        END IF;
        PERFORM outbox._move_export_is_organizations(mv, st.plan);
        -- Checked before the copy (step check); again here, for rows the
        -- target wrote since.
        -- The keys as an array a table, not one jsonb object: building and
        -- taking apart that object was most of this check's time.
        SELECT g.model, k.taken, k.first_taken INTO found_taken
          FROM (SELECT s.model, array_agg(to_jsonb(s.pk)) AS keys FROM outbox.relocation_rows s
                 WHERE s.relocation = mv.relocation AND s.pk IS NOT NULL GROUP BY s.model) g,
               outbox._move_taken_keys(g.model, g.keys) k
         WHERE k.taken > 0 ORDER BY g.model LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%', outbox._move_taken_message(mv, found_taken.model, found_taken.taken,
                                                           found_taken.first_taken)
                USING ERRCODE = 'unique_violation',
                      HINT = 'A move keeps primary keys: keep each cell''s id ranges apart (its sequences), then cancel the move and start it again.';
        END IF;
        RETURN jsonb_build_object('more', true);
    END IF;
    -- Chunks for half a second a call, in this one transaction (the call
    -- is all or nothing, as a chunk was): a call's round trip and control's
    -- step cost as much as a chunk of 1,000 rows (bench/relocation/move.sh:
    -- the import step 4.4 s at a chunk a call).
    started := clock_timestamp();
    WHILE outbox._import_step(mv.relocation) LOOP
        IF clock_timestamp() - started >= interval '500 ms' THEN
            RETURN jsonb_build_object('more', true);
        END IF;
    END LOOP;
    IF mv.mode = 'fork' THEN
        -- The copy is all there is to a fork: it is done, under a new root key.
        UPDATE outbox.organization_moves o
           SET state = 'complete', step = 'imported', updated_at = clock_timestamp(),
               finished_at = coalesce(o.finished_at, clock_timestamp())
         WHERE o.relocation = mv.relocation;
    END IF;
    RETURN jsonb_build_object('more', false, 'root', (
        SELECT m.new FROM outbox.relocation_pk_map m
         WHERE m.relocation = mv.relocation AND m.table_key = mv.plan->>'root'
           AND m.old = mv.organization));
END
$$;

-- cancel (either side, before the cutover): the target removes what it
-- received (without outbox rows: it wrote them without), both forget
-- the move's staging, change log and members, and lift their fence.  The
-- triggers stay, idle, for the next move.  The source is as it was.
-- Returns the rows deleted.
CREATE OR REPLACE FUNCTION outbox._move_cancel_here(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb := (SELECT s.plan FROM outbox.relocation_state s WHERE s.relocation = mv.relocation);
    entry jsonb;
    deleted bigint := 0;
    keys jsonb[];
BEGIN
    IF mv.state = 'cancelled' THEN
        RETURN jsonb_build_object('deleted', 0);
    ELSIF mv.mode = 'fork' AND (mv.state <> 'complete' OR (
              -- A fork whose import ended here but which control never
              -- completed (it refused this cell's answer): its copy goes,
              -- as control's record says, never this call's word.
              mv.side = 'target' AND outbox._move_control_record(
                  (SELECT l FROM outbox.control_link l), mv.relocation::text)->>'state' = 'moving')) THEN
        -- What the import wrote goes as it came, captured (part 2's cancel).
        IF mv.side = 'target' AND EXISTS (SELECT FROM outbox.relocation_state s
                                           WHERE s.relocation = mv.relocation
                                             AND s.state <> 'cancelled') THEN
            deleted := outbox.cancel_relocation(mv.relocation);
        END IF;
        plan := NULL;
    ELSIF mv.state = 'complete' OR mv.step IN ('deleting', 'deleted')
          OR (mv.side = 'target' AND NOT mv.fenced) THEN
        RAISE EXCEPTION 'relocation % is past its cutover: organization % lives in cell % now',
            mv.relocation, mv.organization, mv.to_cell
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF mv.side = 'target' AND plan IS NOT NULL THEN
        PERFORM outbox._move_clear_cycles(mv, plan);
        FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) WITH ORDINALITY e(value, n)
                      ORDER BY e.n DESC LOOP
            keys := ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                           WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                             AND mm.present);
            CONTINUE WHEN cardinality(keys) = 0;
            deleted := deleted + outbox._move_delete_rows(entry, keys);
        END LOOP;
        UPDATE outbox.relocation_state s
           SET state = 'cancelled', step = NULL, updated_at = clock_timestamp(),
               finished_at = clock_timestamp()
         WHERE s.relocation = mv.relocation;
    END IF;
    UPDATE outbox.organization_moves o
       SET state = 'cancelled', step = 'cancelled', fenced = false, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    DELETE FROM outbox.move_changes c WHERE c.relocation = mv.relocation;
    DELETE FROM outbox.move_members mm WHERE mm.relocation = mv.relocation;
    DELETE FROM outbox.relocation_rows s WHERE s.relocation = mv.relocation;
    RETURN jsonb_build_object('deleted', deleted);
END
$$;
