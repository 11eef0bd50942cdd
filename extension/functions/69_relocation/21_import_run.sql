-- Relocation, part 2: the import's steps (20_import_plan.sql plans them).

-- A row of table entry (rel) that a unique key refused (its key in the
-- export: old_key): the collision hook's row instead, written with
-- strict_sql (insert_rows), or the error naming the row and the constraint.
CREATE OR REPLACE FUNCTION outbox._import_collided(st outbox.relocation_state, entry jsonb,
    rel regclass, strict_sql text, collided_row jsonb, old_key bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    replacement jsonb;
    detail text;
    constraint_name text;
BEGIN
    replacement := collided_row;
    IF entry->>'hook' IS NOT NULL THEN
        replacement := (outbox._run_as_table_owner(rel,
            outbox._relocation_statement('call_hook', rel, entry->>'pk',
                                         hook => (entry->>'hook_oid')::oid::regprocedure),
            ARRAY[jsonb_build_object('relocation', st.relocation, 'row', collided_row)]))[1];
        IF replacement IS NULL OR jsonb_typeof(replacement) <> 'object' THEN
            RAISE EXCEPTION 'relocation %: the collision hook % of % returned % for row % instead of a row',
                st.relocation, entry->>'hook', entry->>'model', coalesce(replacement::text, 'NULL'),
                old_key USING ERRCODE = 'invalid_parameter_value';
        END IF;
        replacement := replacement || jsonb_build_object(entry->>'pk', collided_row->(entry->>'pk'));
        UPDATE outbox.relocation_pk_map m SET replaced = replacement
         WHERE m.relocation = st.relocation AND m.table_key = entry->>'model'
           AND m.old = old_key;
    END IF;
    BEGIN
        PERFORM outbox._relocation_write(st, rel, strict_sql, ARRAY[replacement]);
    EXCEPTION WHEN unique_violation OR exclusion_violation THEN
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, constraint_name = CONSTRAINT_NAME;
        RAISE EXCEPTION 'relocation %: row % of % collides with a row here on %',
            st.relocation, old_key, entry->>'model', constraint_name
            USING ERRCODE = 'unique_violation', CONSTRAINT = constraint_name,
                  DETAIL = format('%s Row: %s', detail, replacement),
                  HINT = CASE WHEN entry->>'hook' IS NULL THEN format(
                      'Register a collision hook: SELECT outbox.set_relocation_collision_hook(%L, ...), then CALL the import again.',
                      entry->>'table')
                      ELSE format('The collision hook %s returned a row that collides too.', entry->>'hook') END;
    END;
END
$$;

-- Inserts the rows of one table between ordinals lo and hi, in the
-- transaction of the chunk: new keys, their map, the rows, and for each row
-- a unique key refused, the table's collision hook or an error naming it.
CREATE OR REPLACE FUNCTION outbox._import_insert(st outbox.relocation_state, entry jsonb,
    lo bigint, hi bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass := (entry->>'relid')::oid::regclass;
    olds bigint[];
    news bigint[];
    written jsonb[];
    rows_to_write jsonb[];
    collided record;
    columns name[];
BEGIN
    SELECT array_agg(s.pk ORDER BY s.ordinal) INTO olds FROM outbox.relocation_rows s
     WHERE s.relocation = st.relocation AND s.ordinal BETWEEN lo AND hi;
    IF st.keys = 'kept' THEN
        news := olds; -- a move: the cells keep their id ranges apart
    ELSE
        -- One nextval per row as the table's owner, given out in ordinal
        -- order; the sequence's name is an argument of a fixed statement,
        -- never part of its text, looked up once a chunk (OFFSET 0: not
        -- once a row, a third of the statement's time).
        SELECT array_agg(k::bigint ORDER BY k::bigint) INTO news
          FROM unnest(outbox._run_as_table_owner(rel,
                   'SELECT pg_catalog.to_jsonb(pg_catalog.nextval(s.seq))'
                   ' FROM (SELECT (a OPERATOR(pg_catalog.->>) ''sequence'')::pg_catalog.regclass'
                   ' AS seq, (a OPERATOR(pg_catalog.->>) ''count'')::pg_catalog.int4 AS n'
                   ' FROM pg_catalog.unnest($1) a OFFSET 0) s, pg_catalog.generate_series(1, s.n)',
                   ARRAY[jsonb_build_object('sequence', entry->>'sequence',
                                            'count', cardinality(olds))])) k;
    END IF;
    INSERT INTO outbox.relocation_pk_map (relocation, table_key, old, new)
    SELECT st.relocation, entry->>'model', u.old, u.new FROM unnest(olds, news) u(old, new);

    EXECUTE outbox._relocation_rows_sql(st.relocation, st.users_relocation, entry, 'insert')
       INTO rows_to_write USING lo, hi, news;

    columns := ARRAY(SELECT jsonb_array_elements_text(entry->'columns'));
    written := outbox._relocation_write(st, rel,
        outbox._relocation_statement('insert_new_rows', rel, entry->>'pk', columns),
        rows_to_write);
    IF cardinality(written) = cardinality(rows_to_write) THEN
        RETURN cardinality(written);
    END IF;

    -- The rows a unique key refused: the hook's row instead, or the error.
    FOR collided IN SELECT u.row, u.n
                      FROM unnest(rows_to_write) WITH ORDINALITY u(row, n)
                     WHERE NOT u.row->(entry->>'pk') = ANY (written)
                     ORDER BY u.n LOOP
        PERFORM outbox._import_collided(st, entry, rel,
            outbox._relocation_statement('insert_rows', rel, entry->>'pk', columns), collided.row,
            olds[collided.n]);
    END LOOP;
    RETURN cardinality(rows_to_write);
END
$$;

-- A write of the import into rel (outbox._run_as_table_owner).  With the
-- source's keys (a move, 50_move_control.sql) it writes no outbox rows:
-- the source's own messages told control of these rows, and the target's
-- would race with them (control could take an older one last).
CREATE OR REPLACE FUNCTION outbox._relocation_write(st outbox.relocation_state, rel regclass,
    statement text, rows jsonb[]) RETURNS jsonb[]
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN st.keys = 'kept' THEN outbox._run_as_table_owner_uncaptured(rel, statement, rows)
                ELSE outbox._run_as_table_owner(rel, statement, rows) END
$$;

-- The columns of a plan entry set in the later step (a cycle's).
CREATE OR REPLACE FUNCTION outbox._relocation_deferred(entry jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(r.value->>'column'), '{}')
      FROM jsonb_array_elements(entry->'refs') r WHERE (r.value->>'deferred')::boolean
$$;

-- Sets the cycle-breaking columns of the rows between lo and hi.
CREATE OR REPLACE FUNCTION outbox._import_deferred(st outbox.relocation_state, entry jsonb,
    lo bigint, hi bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass := (entry->>'relid')::oid::regclass;
    deferred text[];
    updates jsonb[];
BEGIN
    deferred := outbox._relocation_deferred(entry);
    EXECUTE outbox._relocation_rows_sql(st.relocation, st.users_relocation, entry, 'deferred')
       INTO updates USING lo, hi;
    IF updates IS NULL THEN
        RETURN 0;
    END IF;
    RETURN cardinality(outbox._relocation_write(st, rel,
        outbox._relocation_statement('update_rows', rel, entry->>'pk', deferred::name[]), updates));
END
$$;

-- Starts the import of p_relocation, or lets a CALL continue one that a
-- crash, an error or a pause stopped (its manifest and this database's
-- schema are checked again).  Returns whether there is anything left to do.
CREATE OR REPLACE FUNCTION outbox._import_begin(p_relocation uuid, p_scope text,
    p_users_relocation uuid) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state;
    manifest jsonb;
    plan jsonb;
BEGIN
    PERFORM outbox._require(p_relocation, 'relocation');
    SELECT * INTO st FROM outbox.relocation_state s WHERE s.relocation = p_relocation FOR UPDATE;
    IF FOUND THEN
        IF st.scope <> p_scope THEN
            RAISE EXCEPTION 'relocation % is an import of scope %', p_relocation, st.scope
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF st.users_relocation IS DISTINCT FROM p_users_relocation THEN
            RAISE EXCEPTION 'relocation % was started with users_relocation %', p_relocation,
                coalesce(st.users_relocation::text, 'NULL')
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF st.state = 'cancelled' THEN
            RAISE EXCEPTION 'relocation % was cancelled', p_relocation
                USING ERRCODE = 'object_not_in_prerequisite_state';
        ELSIF st.state IN ('imported', 'complete', 'mismatched') THEN
            RETURN false;
        END IF;
    END IF;
    manifest := outbox._relocation_manifest(p_relocation, p_scope);
    IF p_users_relocation IS NOT NULL AND NOT EXISTS (
        SELECT FROM outbox.relocation_pk_map m WHERE m.relocation = p_users_relocation) THEN
        RAISE EXCEPTION 'users_relocation %: outbox.relocation_pk_map holds no key of it',
            p_users_relocation USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Copy the map of the User import from control first.';
    END IF;
    plan := outbox._relocation_plan(p_relocation, manifest);
    INSERT INTO outbox.relocation_state AS s (relocation, scope, roots, source, target,
        users_relocation, state, rows_total, plan)
    VALUES (p_relocation, p_scope,
            ARRAY(SELECT jsonb_array_elements_text(manifest->'roots')::bigint),
            format('%s (system %s)', manifest->>'database', manifest->>'system_identifier'),
            format('%s (system %s)', current_database(),
                   (SELECT c.system_identifier FROM pg_control_system() c)),
            p_users_relocation, 'importing', (manifest->>'rows')::bigint, plan)
    ON CONFLICT (relocation) DO UPDATE
        SET state = 'importing', plan = excluded.plan, error = NULL,
            updated_at = clock_timestamp();
    RETURN true;
END
$$;

-- One chunk of the import, in the caller's transaction: the next rows to
-- insert, else the next cycle-breaking columns to set; false when the
-- import is done (or no longer running: cancelled meanwhile).
CREATE OR REPLACE FUNCTION outbox._import_step(p_relocation uuid) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state;
    chunk_rows bigint := current_setting('outbox.relocation_chunk_rows')::bigint;
    entry jsonb;
    done bigint;
    lo bigint;
    hi bigint;
    v_step text;
    written bigint;
BEGIN
    SELECT * INTO st FROM outbox.relocation_state s WHERE s.relocation = p_relocation FOR UPDATE;
    IF NOT FOUND OR st.state <> 'importing' THEN
        RETURN false;
    END IF;
    FOREACH v_step IN ARRAY ARRAY['insert', 'deferred'] LOOP
        SELECT coalesce(max(c.last_ordinal), 0) INTO done FROM outbox.import_chunks c
         WHERE c.relocation = p_relocation AND c.step = v_step;
        FOR entry IN SELECT e.value FROM jsonb_array_elements(st.plan) WITH ORDINALITY e(value, n)
                      ORDER BY e.n LOOP
            CONTINUE WHEN (entry->>'count')::bigint = 0 OR (entry->>'last')::bigint <= done;
            CONTINUE WHEN v_step = 'deferred'
                          AND cardinality(outbox._relocation_deferred(entry)) = 0;
            lo := greatest((entry->>'first')::bigint, done + 1);
            hi := least((entry->>'last')::bigint, lo + chunk_rows - 1);
            IF v_step = 'insert' THEN
                written := outbox._import_insert(st, entry, lo, hi);
            ELSE
                written := outbox._import_deferred(st, entry, lo, hi);
            END IF;
            INSERT INTO outbox.import_chunks (relocation, step, table_key, first_ordinal,
                                              last_ordinal, rows_written)
            VALUES (p_relocation, v_step, entry->>'model', lo, hi, written);
            UPDATE outbox.relocation_state s
               SET rows_done = s.rows_done + CASE WHEN v_step = 'insert' THEN hi - lo + 1 ELSE 0 END,
                   step = v_step || ' ' || (entry->>'model'), updated_at = clock_timestamp()
             WHERE s.relocation = p_relocation;
            RETURN true;
        END LOOP;
    END LOOP;
    UPDATE outbox.relocation_state s
       SET state = 'imported', step = NULL, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE s.relocation = p_relocation;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION outbox._import_failed(p_relocation uuid, message text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE outbox.relocation_state s
       SET state = 'failed', error = message, updated_at = clock_timestamp()
     WHERE s.relocation = p_relocation AND s.state = 'importing'
$$;

-- Raises an error caught earlier as it was (RAISE takes no empty DETAIL
-- or HINT for none).
CREATE OR REPLACE FUNCTION outbox._raise_again(sqlstate_of text, message text, detail text,
    hint text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(detail, '') <> '' AND coalesce(hint, '') <> '' THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate_of, MESSAGE = message, DETAIL = detail,
                              HINT = hint;
    ELSIF coalesce(detail, '') <> '' THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate_of, MESSAGE = message, DETAIL = detail;
    ELSIF coalesce(hint, '') <> '' THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate_of, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate_of, MESSAGE = message;
END
$$;

-- The import itself: a transaction for the start, then one per chunk.  A
-- chunk that fails rolls back whole; the relocation is then failed with
-- the error (outbox.relocations), and a CALL after the fix continues.
-- Cannot run inside a transaction block (it commits).
CREATE OR REPLACE PROCEDURE outbox._import(relocation uuid, scope text, users_relocation uuid)
LANGUAGE plpgsql
AS $$
DECLARE
    more boolean;
    failed boolean := false;
    sqlstate_of text;
    message text;
    detail text;
    hint text;
BEGIN
    BEGIN
        more := outbox._import_begin(relocation, scope, users_relocation);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS sqlstate_of = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        failed := true;
    END;
    WHILE NOT failed AND more LOOP
        COMMIT;
        BEGIN
            more := outbox._import_step(relocation);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS sqlstate_of = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                                    detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
            failed := true;
        END;
    END LOOP;
    IF failed THEN
        PERFORM outbox._import_failed(relocation, message);
        COMMIT;
        PERFORM outbox._raise_again(sqlstate_of, message, detail, hint);
    END IF;
    CASE (SELECT s.state FROM outbox.relocation_state s WHERE s.relocation = _import.relocation)
    WHEN 'cancelled' THEN
        RAISE EXCEPTION 'relocation % was cancelled during the import', relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    WHEN 'paused' THEN
        RAISE NOTICE 'relocation % is paused; CALL the import again to resume it', relocation;
    ELSE
        NULL;
    END CASE;
END
$$;

-- The extension owner's: imports the organizations of a staged export.
-- users_relocation: NULL when this cell shares the source's control (the
-- users' ids are kept); else the User import of the organizations' members
-- into this cell's control, whose outbox.relocation_pk_map was copied here:
-- cross-silo values are rewritten through it.
CREATE OR REPLACE PROCEDURE outbox.import_organizations(relocation uuid,
    users_relocation uuid DEFAULT NULL)
LANGUAGE plpgsql
AS $$
BEGIN
    CALL outbox._import(relocation, 'Organization', users_relocation);
END
$$;

-- The same on control, for an export_users file.
CREATE OR REPLACE PROCEDURE outbox.import_users(relocation uuid)
LANGUAGE plpgsql
AS $$
BEGIN
    CALL outbox._import(relocation, 'User', NULL);
END
$$;
