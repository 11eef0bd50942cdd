-- Relocation, part 2: pause, compare, cancel, collision hooks, the state view.

-- The state of relocation p_relocation, locked (a chunk under way holds the
-- row: this waits for it); an ERROR when it was never imported here.
CREATE OR REPLACE FUNCTION outbox._relocation_locked(p_relocation uuid)
RETURNS outbox.relocation_state
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state;
BEGIN
    PERFORM outbox._require(p_relocation, 'relocation');
    SELECT * INTO st FROM outbox.relocation_state s WHERE s.relocation = p_relocation FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relocation % was never imported here', p_relocation
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN st;
END
$$;

-- pause_relocation, resume_relocation and cancel_relocation ask the one
-- state machine of relocations (src/relocation/lifecycle.hpp) whether
-- they may act, and which state they leave; it raises the refusal.
CREATE OR REPLACE FUNCTION outbox._relocation_decide(kind text, relocation uuid, state text,
    step text, organization bigint, to_cell text, operation text) RETURNS text
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__relocation_decide';

-- The same for an import here, locked (a chunk under way holds the row:
-- this waits for it).
CREATE OR REPLACE FUNCTION outbox._import_decide(p_relocation uuid, operation text)
RETURNS outbox.relocation_state
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state := outbox._relocation_locked(p_relocation);
BEGIN
    st.state := outbox._relocation_decide('import', p_relocation, st.state, NULL, NULL, NULL,
                                          operation);
    RETURN st;
END
$$;

-- The extension owner's: stops an import under way at the end of its
-- current chunk (the CALL then returns); a CALL resumes it.  An import
-- whose session died is importing too, and may be paused.  A move driven
-- from here pauses after its step under way, before its fence only.
CREATE OR REPLACE FUNCTION outbox.pause_relocation(relocation uuid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p_relocation uuid := relocation;
    mv outbox.organization_moves;
    st outbox.relocation_state;
BEGIN
    PERFORM outbox._require(p_relocation, 'relocation');
    mv := outbox._move_locked(p_relocation);
    IF mv.relocation IS NOT NULL THEN
        mv.state := outbox._move_decide(mv, 'pause');
        UPDATE outbox.organization_moves o SET state = mv.state, updated_at = clock_timestamp()
         WHERE o.relocation = p_relocation;
        RETURN;
    END IF;
    st := outbox._import_decide(p_relocation, 'pause');
    UPDATE outbox.relocation_state s SET state = st.state, updated_at = clock_timestamp()
     WHERE s.relocation = p_relocation;
END
$$;

-- The compare's re-export ($1: the roots' keys here, $2: the scope), rows of
-- model, pk, fields without the manifest: the branch of the other scope is
-- never run (its condition is a one-time filter).  One text for the sums
-- and for the row by row join.
CREATE OR REPLACE FUNCTION outbox._relocation_reexport_sql() RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'SELECT a.model, a.pk, a.fields FROM outbox.export_users($1) a'
           ' WHERE $2 OPERATOR(pg_catalog.=) ''User'''
           ' AND a.model OPERATOR(pg_catalog.<>) ''pg_outbox.manifest'''
           ' UNION ALL'
           ' SELECT a.model, a.pk, a.fields FROM outbox.export_organizations($1) a'
           ' WHERE $2 IS DISTINCT FROM ''User'''
           ' AND a.model OPERATOR(pg_catalog.<>) ''pg_outbox.manifest'''
$$;

-- Whether the staged export modulo the map (expected_sql, rows of model,
-- pk, fields) and the export of roots here hold the same rows: per table,
-- the count and two sums of a 64-bit hash of each row's key and fields.
-- jsonb's own hash: values the row by row join holds equal hash alike.
-- Both sides are streamed into the sums, where the join writes both to
-- temporary tables, analyzes them and joins: a compare that finds
-- nothing, the usual one, no longer pays for that (98,101 rows: 958 ms
-- against 1,927, docs/relocation.md).  The sums are no checksum against
-- a forger (the import checked the export's): they catch what an
-- application trigger or a wrong reference changed, which the join then
-- names.
CREATE OR REPLACE FUNCTION outbox._relocation_digests_match(expected_sql text, roots bigint[],
    scope text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sums constant text := 'pg_catalog.count(*) AS n, pg_catalog.count(x.fields) AS f,'
        ' pg_catalog.sum(pg_catalog.jsonb_hash_extended(x.fields, x.pk)'
        ' OPERATOR(pg_catalog.#) pg_catalog.hashint8extended(x.pk, 0)) AS h1,'
        ' pg_catalog.sum(pg_catalog.jsonb_hash_extended(x.fields, OPERATOR(pg_catalog.~) x.pk)'
        ' OPERATOR(pg_catalog.#) pg_catalog.hashint8extended(x.pk, 1)) AS h2';
    matched boolean;
BEGIN
    EXECUTE format($sql$
        WITH expected AS (SELECT x.model, %1$s FROM (%2$s) x GROUP BY x.model),
             actual AS (SELECT x.model, %1$s FROM (%3$s) x GROUP BY x.model)
        SELECT NOT EXISTS (SELECT FROM expected e FULL JOIN actual a ON a.model = e.model
                            WHERE (e.n, e.f, e.h1, e.h2) IS DISTINCT FROM (a.n, a.f, a.h1, a.h2))
    $sql$, sums, expected_sql, outbox._relocation_reexport_sql()) INTO matched USING roots, scope;
    RETURN matched;
END
$$;

-- The findings of a compare whose sums differ, row by row: both sides
-- materialized, analyzed and joined (one statement of both plans was far
-- worse).  Returns how many it recorded.
CREATE OR REPLACE FUNCTION outbox._relocation_compare_rows(p_relocation uuid, expected_sql text,
    roots bigint[], scope text) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_count bigint;
BEGIN
    IF to_regclass('pg_temp.relocation_expected') IS NOT NULL THEN -- compared before, this transaction
        DROP TABLE pg_temp.relocation_expected, pg_temp.relocation_actual;
    END IF;
    EXECUTE 'CREATE TEMP TABLE relocation_expected ON COMMIT DROP AS ' || expected_sql;
    CREATE TEMP TABLE relocation_actual (model text, pk bigint, fields jsonb) ON COMMIT DROP;
    EXECUTE 'INSERT INTO pg_temp.relocation_actual ' || outbox._relocation_reexport_sql()
      USING roots, scope;
    ANALYZE pg_temp.relocation_expected (model, pk), pg_temp.relocation_actual (model, pk);
    WITH rows AS (SELECT coalesce(e.model, a.model) AS model, coalesce(e.pk, a.pk) AS pk,
                         e.fields AS expected, a.fields AS actual
                    FROM pg_temp.relocation_expected e
                    FULL JOIN pg_temp.relocation_actual a ON a.model = e.model AND a.pk = e.pk),
         counts AS (SELECT r.model, count(r.expected) AS expected, count(r.actual) AS actual
                      FROM rows r GROUP BY r.model)
    INSERT INTO outbox.relocation_findings AS f (relocation, table_key, pk, finding, column_name,
                                                 expected, actual)
    SELECT p_relocation, c.model, NULL, 'count', NULL, to_jsonb(c.expected), to_jsonb(c.actual)
      FROM counts c WHERE c.expected <> c.actual
    UNION ALL
    SELECT p_relocation, r.model, r.pk, CASE WHEN r.actual IS NULL THEN 'missing' ELSE 'extra' END,
           NULL, r.expected, r.actual
      FROM rows r WHERE r.expected IS NULL OR r.actual IS NULL
    UNION ALL
    SELECT p_relocation, r.model, r.pk, 'field', d.key, d.value, r.actual->d.key
      FROM rows r CROSS JOIN LATERAL jsonb_each(r.expected) d
     WHERE r.expected <> r.actual -- the same columns here: one comparison a row
       AND d.value IS DISTINCT FROM r.actual->d.key;
    GET DIAGNOSTICS found_count = ROW_COUNT;
    DROP TABLE pg_temp.relocation_expected, pg_temp.relocation_actual;
    RETURN found_count;
END
$$;

-- Re-exports the imported roots here and compares with the staged export
-- modulo the map: every row there (missing), no other (extra), counts per
-- table, every field the export has (field: an application trigger changed
-- it, or a reference was rewritten wrong).  The findings replace the last
-- compare's in outbox.relocation_findings; none: the relocation is
-- complete, else mismatched.
CREATE OR REPLACE FUNCTION outbox.compare_relocation(relocation uuid)
RETURNS TABLE (table_key text, pk bigint, finding text, column_name text, expected jsonb,
               actual jsonb)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p_relocation uuid := relocation;
    st outbox.relocation_state;
    expected_sql text;
    new_roots bigint[];
    root_model text;
    found_count bigint;
BEGIN
    st := outbox._relocation_locked(p_relocation);
    IF st.state IN ('importing', 'paused', 'failed') THEN
        RAISE EXCEPTION 'relocation % is %, not imported', p_relocation, st.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'CALL the import again to finish it.';
    ELSIF st.state NOT IN ('imported', 'complete', 'mismatched') THEN
        RAISE EXCEPTION 'relocation % is %, not imported', p_relocation, st.state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- The manifest is the last row (_relocation_manifest checked it): found
    -- by its ordinal (by its model the planner read every staged row).
    root_model := (SELECT s.fields->>'root' FROM outbox.relocation_rows s
                    WHERE s.relocation = p_relocation AND s.model = 'pg_outbox.manifest'
                      AND s.ordinal = (SELECT max(l.ordinal) FROM outbox.relocation_rows l
                                        WHERE l.relocation = p_relocation));
    new_roots := ARRAY(SELECT m.new FROM outbox.relocation_pk_map m
                        WHERE m.relocation = p_relocation AND m.table_key = root_model
                          AND m.old = ANY (st.roots) ORDER BY m.new);
    SELECT string_agg(outbox._relocation_rows_sql(p_relocation, st.users_relocation, e.value,
                                                  'compare'), ' UNION ALL ')
      INTO expected_sql
      FROM jsonb_array_elements(st.plan) e WHERE (e.value->>'count')::bigint > 0;
    DELETE FROM outbox.relocation_findings f WHERE f.relocation = p_relocation;
    -- Whole tables: the expected rows are joins, planned on what the map and
    -- the staging hold now.
    ANALYZE outbox.relocation_rows (relocation, model, pk), outbox.relocation_pk_map;
    IF outbox._relocation_digests_match(expected_sql, new_roots, st.scope) THEN
        found_count := 0;
    ELSE
        found_count := outbox._relocation_compare_rows(p_relocation, expected_sql, new_roots,
                                                       st.scope);
    END IF;
    UPDATE outbox.relocation_state s
       SET state = CASE WHEN found_count = 0 THEN 'complete' ELSE 'mismatched' END,
           step = NULL, updated_at = clock_timestamp()
     WHERE s.relocation = p_relocation;
    RETURN QUERY SELECT f.table_key, f.pk, f.finding, f.column_name, f.expected, f.actual
                   FROM outbox.relocation_findings f WHERE f.relocation = p_relocation
                  ORDER BY f.table_key, f.pk, f.finding, f.column_name;
END
$$;

-- Removes what the import of relocation wrote here, as each table's owner:
-- first the cycle-breaking columns set back to NULL, then the rows, tables
-- in the reverse of the export's order.  Returns how many rows it deleted;
-- the relocation is then cancelled (for good: its staged rows and map stay
-- for the record).  One transaction: it removes all or nothing.
CREATE OR REPLACE FUNCTION outbox.cancel_relocation(relocation uuid) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p_relocation uuid := relocation;
    st outbox.relocation_state;
    entry jsonb;
    keys jsonb[];
    deferred text[];
    deleted bigint := 0;
    mv outbox.organization_moves;
BEGIN
    PERFORM outbox._require(p_relocation, 'relocation');
    mv := outbox._move_locked(p_relocation);
    IF mv.relocation IS NOT NULL THEN
        RETURN outbox._cancel_move(mv);
    END IF;
    st := outbox._import_decide(p_relocation, 'cancel');
    FOR entry IN SELECT e.value FROM jsonb_array_elements(st.plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        deferred := outbox._relocation_deferred(entry);
        CONTINUE WHEN cardinality(deferred) = 0;
        keys := ARRAY(SELECT to_jsonb(m.new) FROM outbox.relocation_pk_map m
                       WHERE m.relocation = p_relocation AND m.table_key = entry->>'model');
        -- Only the rows whose cycle columns the import set: an UPDATE of
        -- the others would be captured for nothing (issue 45).
        PERFORM outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
            outbox._relocation_statement('clear_keys', (entry->>'relid')::oid::regclass,
                                         entry->>'pk', deferred::name[]),
            keys);
    END LOOP;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(st.plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        keys := ARRAY(SELECT to_jsonb(m.new) FROM outbox.relocation_pk_map m
                       WHERE m.relocation = p_relocation AND m.table_key = entry->>'model');
        CONTINUE WHEN cardinality(keys) = 0;
        deleted := deleted + (outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
            outbox._relocation_statement('delete_keys', (entry->>'relid')::oid::regclass,
                                         entry->>'pk'),
            keys))[1]::text::bigint;
    END LOOP;
    UPDATE outbox.relocation_state s
       SET state = st.state, step = NULL, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE s.relocation = p_relocation;
    RETURN deleted;
END
$$;

-- The body of outbox.set_relocation_collision_hook, run as the extension's
-- owner once the C gate checked the caller owns tbl.  hook NULL removes it.
CREATE OR REPLACE FUNCTION outbox._set_relocation_collision_hook(tbl regclass,
    hook regprocedure) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn record;
BEGIN
    IF hook IS NULL THEN
        DELETE FROM outbox.relocation_collision_hooks h WHERE h.relid = tbl;
        RETURN;
    END IF;
    SELECT p.pronargs, p.proargtypes, p.prorettype, p.prokind, p.proretset INTO fn
      FROM pg_proc p WHERE p.oid = hook;
    IF fn.pronargs <> 2 OR fn.proargtypes[0] <> 'uuid'::regtype
       OR fn.proargtypes[1] <> 'jsonb'::regtype OR fn.prorettype <> 'jsonb'::regtype
       OR fn.prokind <> 'f' OR fn.proretset THEN
        RAISE EXCEPTION 'hook % must take (relocation uuid, row jsonb) and return jsonb', hook
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT has_function_privilege((SELECT c.relowner FROM pg_class c WHERE c.oid = tbl), hook,
                                  'EXECUTE') THEN
        RAISE EXCEPTION 'hook: the owner of % may not execute %', tbl, hook
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO outbox.relocation_collision_hooks AS h (relid, hook) VALUES (tbl, hook)
    ON CONFLICT (relid) DO UPDATE SET hook = excluded.hook;
END
$$;

-- The public entry point: the C gate checks the caller owns tbl.
CREATE OR REPLACE FUNCTION outbox.set_relocation_collision_hook(tbl regclass, hook regprocedure)
RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_set_relocation_collision_hook';

CREATE OR REPLACE FUNCTION outbox._run_as_table_owner(tbl regclass, statement text,
    rows jsonb[]) RETURNS jsonb[]
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__run_as_table_owner';

-- Each relocation imported here, for pg_monitor too.  eta: when the rows
-- left would be written at the pace so far.
CREATE OR REPLACE VIEW outbox.relocations AS
SELECT s.relocation, s.scope, s.roots AS organizations, s.source, s.target, s.state, s.step,
       s.rows_done, s.rows_total, s.started_at, s.updated_at, s.finished_at,
       CASE WHEN s.state = 'importing' AND s.rows_done > 0 AND s.rows_done < s.rows_total
            THEN s.updated_at + (s.updated_at - s.started_at)
                                * ((s.rows_total - s.rows_done)::float8 / s.rows_done) END AS eta,
       s.error,
       (SELECT count(*) FROM outbox.relocation_findings f
         WHERE f.relocation = s.relocation) AS findings,
       NULL::interval AS write_pause, NULL::bigint AS lag
  FROM outbox.relocation_state s
 UNION ALL
-- And each move control drives (50_move_control.sql): rows_done of
-- rows_total are the rows copied (or, once the step is delete, deleted from
-- the source); write_pause is how long no cell took the organization's
-- writes (so far, from the fence until the switch);
-- lag the source's changes the catch-up has still to apply.
SELECT m.relocation, 'Organization', ARRAY[m.organization], m.from_cell, m.to_cell, m.state,
       m.step, m.rows_done, m.rows_total, m.started_at, m.updated_at, m.finished_at,
       CASE WHEN m.state = 'moving' AND m.step = 'copy' AND m.rows_done > 0
            THEN m.updated_at + (m.updated_at - m.started_at)
                                * ((m.rows_total - m.rows_done)::float8 / m.rows_done) END,
       m.error, 0::bigint,
       coalesce(m.lifted_at, CASE WHEN m.state = 'moving' THEN clock_timestamp() END) - m.fenced_at,
       m.changes
  FROM outbox.organization_moves m
 WHERE m.side = 'control';
