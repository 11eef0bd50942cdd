------------------------------------------------------------------------------
-- Relocation, part 2 (SPEC section 12): import, compare, cancel
------------------------------------------------------------------------------
-- An export (outbox.export_organizations or export_users, manifest row
-- included) is loaded into outbox.relocation_rows under a uuid, then
--   CALL outbox.import_organizations(relocation)
-- writes it here with new primary keys, a chunk per transaction, each
-- recorded in outbox.import_chunks with the rows it wrote; a CALL after a
-- crash or a fix continues after the last chunk recorded.  Every write to
-- an application table goes through outbox._run_as_table_owner, as the
-- table's owner, restricted (src/relocation/import/owner_statement.cpp): capture
-- fires, the application's triggers run, and nothing they do runs with the
-- caller's privileges.  Everything else here reads and writes pg_outbox's
-- own tables, as the extension's owner, who alone may run an import.

-- The table a table key names here (NULL: none; an ERROR when two tables
-- claim it), by the one rule of which tables a relocation covers
-- (src/relocation/model/models.cpp).
CREATE OR REPLACE FUNCTION outbox._relocation_table(model text) RETURNS regclass
    LANGUAGE c STABLE SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'outbox__relocation_table';

-- The SHA-256 of the staged export of relocation, as the export computes
-- its manifest's (src/relocation/export/export.cpp).
CREATE OR REPLACE FUNCTION outbox._relocation_checksum(relocation uuid) RETURNS text
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'outbox__relocation_checksum';

-- Checks the staged export of p_relocation against its manifest (present,
-- of this format and scope, every row there, nothing edited) and returns
-- the manifest.
CREATE OR REPLACE FUNCTION outbox._relocation_manifest(p_relocation uuid, p_scope text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    manifest jsonb;
    manifests bigint;
    manifest_ordinal bigint;
    staged bigint;
    first_ordinal bigint;
    last_ordinal bigint;
    wrong record;
    checksum text;
BEGIN
    SELECT count(*) FILTER (WHERE s.model = 'pg_outbox.manifest'),
           count(*) FILTER (WHERE s.model <> 'pg_outbox.manifest'),
           min(s.ordinal) FILTER (WHERE s.model <> 'pg_outbox.manifest'),
           max(s.ordinal) FILTER (WHERE s.model <> 'pg_outbox.manifest'),
           max(s.ordinal) FILTER (WHERE s.model = 'pg_outbox.manifest')
      INTO manifests, staged, first_ordinal, last_ordinal, manifest_ordinal
      FROM outbox.relocation_rows s WHERE s.relocation = p_relocation;
    IF manifests + staged = 0 THEN
        RAISE EXCEPTION 'relocation %: outbox.relocation_rows holds no row of it', p_relocation
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Load the export first: \copy outbox.relocation_rows FROM ''<file>''.';
    ELSIF manifests <> 1 THEN
        RAISE EXCEPTION 'relocation %: the staged export has % manifest rows, not one',
            p_relocation, manifests USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'An export ends with one row of model pg_outbox.manifest.';
    END IF;
    SELECT s.fields INTO manifest FROM outbox.relocation_rows s
     WHERE s.relocation = p_relocation AND s.ordinal = manifest_ordinal;
    IF manifest->>'format' IS DISTINCT FROM 'pg_outbox export 1'
       OR jsonb_typeof(manifest->'columns') IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'relocation %: the manifest is not of format "pg_outbox export 1"',
            p_relocation USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('It says %s.', coalesce(manifest->>'format', 'no format'));
    ELSIF manifest->>'scope' IS DISTINCT FROM p_scope THEN
        RAISE EXCEPTION 'relocation %: the export is of scope %, not %', p_relocation,
            manifest->>'scope', p_scope USING ERRCODE = 'invalid_parameter_value',
            HINT = CASE manifest->>'scope' WHEN 'User' THEN 'CALL outbox.import_users(...).'
                   ELSE 'CALL outbox.import_organizations(...).' END;
    END IF;
    IF staged <> (manifest->>'rows')::bigint OR first_ordinal <> 1
       OR last_ordinal <> staged OR manifest_ordinal <> staged + 1 THEN
        RAISE EXCEPTION 'relocation %: the staged export has % rows (ordinals % to %); its manifest says %',
            p_relocation, staged, first_ordinal, last_ordinal, manifest->>'rows'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Rows are missing or were added: load the whole export again.';
    END IF;
    SELECT coalesce(c.model, t.key) AS model, coalesce(c.n, 0) AS staged,
           coalesce(t.value::bigint, 0) AS listed
      INTO wrong
      FROM (SELECT s.model, count(*) AS n FROM outbox.relocation_rows s
             WHERE s.relocation = p_relocation AND s.model <> 'pg_outbox.manifest'
             GROUP BY s.model) c
      FULL JOIN jsonb_each_text(manifest->'tables') t ON t.key = c.model
     WHERE coalesce(c.n, 0) <> coalesce(t.value::bigint, 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'relocation %: the staged export has % rows of %; its manifest says %',
            p_relocation, wrong.staged, wrong.model, wrong.listed
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    checksum := outbox._relocation_checksum(p_relocation);
    IF checksum IS DISTINCT FROM manifest->>'checksum' THEN
        RAISE EXCEPTION 'relocation %: the staged export does not match its manifest''s checksum',
            p_relocation USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'A row was edited after the export: load the export again.';
    END IF;
    RETURN manifest;
END
$$;

-- The columns of table v_model (rel here, primary key pk) that an import
-- writes: the export's, as the manifest types them, each of which must be
-- here and assignable; no NOT NULL column here without a default that the
-- export lacks.
CREATE OR REPLACE FUNCTION outbox._relocation_plan_columns(v_model text, rel regclass, pk name,
                                                           manifest jsonb)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col record;
    cols text[];
BEGIN
    -- The export's columns, as the manifest types them.
    cols := '{}';
    FOR col IN SELECT c.key AS name, c.value AS source_type, a.attname, a.attgenerated,
                      format_type(a.atttypid, a.atttypmod) AS target_type,
                      a.atttypid = to_regtype(c.value)
                      OR EXISTS (SELECT FROM pg_cast k
                                  WHERE k.castsource = to_regtype(c.value)
                                    AND k.casttarget = a.atttypid
                                    AND k.castcontext IN ('i', 'a')) AS assignable
                 FROM jsonb_each_text(manifest->'columns'->v_model) c
                 LEFT JOIN pg_attribute a ON a.attrelid = rel AND a.attname = c.key
                                         AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY c.key LOOP
        IF col.attname IS NULL THEN
            RAISE EXCEPTION 'column %.% of the export does not exist here', v_model, col.name
                USING ERRCODE = 'undefined_column';
        ELSIF NOT col.assignable THEN
            RAISE EXCEPTION 'column %.% is % in the export but % here', v_model, col.name,
                col.source_type, col.target_type USING ERRCODE = 'datatype_mismatch';
        END IF;
        IF col.attgenerated = '' AND col.name <> pk THEN
            cols := cols || col.name;
        END IF;
    END LOOP;
    SELECT a.attname INTO col
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull
       AND a.attgenerated = '' AND a.attidentity = '' AND NOT a.atthasdef
       AND NOT (manifest->'columns'->v_model) ? a.attname
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'column %.% is NOT NULL without a default here, and not in the export',
            v_model, col.attname USING ERRCODE = 'not_null_violation';
    END IF;
    RETURN cols;
END
$$;

-- The references of table v_model (rel here, position pos in the export's
-- order): foreign keys of one column to a primary key, and registered
-- cross-silo references.  A reference to a table the export writes is
-- mapped (deferred when the manifest says so, else its parent comes
-- first); one outside the export keeps its values; a cross-silo one names
-- users.
CREATE OR REPLACE FUNCTION outbox._relocation_plan_refs(v_model text, rel regclass, pos int,
                                                        manifest jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deferred text[];
    refs jsonb;
    ref record;
    parent_position int;
BEGIN
    deferred := ARRAY(SELECT jsonb_array_elements_text(manifest->'deferred'->v_model));
    refs := '[]';
    FOR ref IN
        SELECT a.attname::text AS column_name,
               outbox._relocation_table_key(coalesce(pg_partition_root(k.confrelid),
                                                     k.confrelid)::regclass) AS parent,
               false AS cross_silo
          FROM pg_constraint k
          JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
         WHERE k.conrelid = rel AND k.contype = 'f' AND cardinality(k.conkey) = 1
           AND EXISTS (SELECT FROM pg_index i
                        WHERE i.indrelid = k.confrelid AND i.indisprimary
                          AND i.indnkeyatts = 1 AND i.indkey[0] = k.confkey[1])
        UNION ALL
        SELECT f.column_name::text, f.parent_table, true
          FROM outbox.registered_foreign_keys f WHERE f.relid = rel
         ORDER BY 1
    LOOP
        parent_position := (SELECT o.n FROM jsonb_array_elements_text(manifest->'order')
                                             WITH ORDINALITY o(value, n)
                             WHERE o.value = ref.parent);
        IF parent_position IS NULL AND NOT ref.cross_silo THEN
            CONTINUE; -- a table outside the export (Global, Config): values kept
        END IF;
        IF parent_position IS NULL THEN
            refs := refs || jsonb_build_object('column', ref.column_name, 'parent', ref.parent,
                                               'kind', 'users', 'deferred', false);
            CONTINUE;
        END IF;
        IF parent_position >= pos AND NOT ref.column_name = ANY (deferred) THEN
            RAISE EXCEPTION 'column %.% refers to %, which the export writes % it',
                v_model, ref.column_name, ref.parent,
                CASE WHEN parent_position = pos THEN 'with' ELSE 'after' END
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'The export was made with other foreign keys than these.';
        END IF;
        refs := refs || jsonb_build_object('column', ref.column_name, 'parent', ref.parent,
                                           'kind', 'map',
                                           'deferred', ref.column_name = ANY (deferred));
    END LOOP;
    RETURN refs;
END
$$;

-- What an import of the export needs to know of each of its tables here,
-- in the export's order, checked against this database's catalog before
-- anything is written: every table and column of the export present, of a
-- type the export's values can be assigned to, a primary key that takes
-- new values from a sequence, no NOT NULL column the export cannot fill,
-- every reference inside the export to a table written before it (or set
-- in the later step).  An array of
--   {model, relid, table, pk, sequence, columns, refs: [{column, parent,
--    kind: map | users | keep, deferred}], first, last, count, hook_oid, hook}.
CREATE OR REPLACE FUNCTION outbox._relocation_plan(p_relocation uuid, manifest jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb := '[]';
    v_model text;
    pos int := 0;
    rel regclass;
    pk name;
    seq text;
    cols text[];
    refs jsonb;
    spans jsonb;
    span jsonb;
    staged_rows bigint;
    hook_oid oid;
BEGIN
    -- Every table's ordinals, in one read of the staged rows.
    SELECT jsonb_object_agg(g.model, jsonb_build_object('first', g.first, 'last', g.last, 'n', g.n))
      INTO spans
      FROM (SELECT s.model, min(s.ordinal) AS first, max(s.ordinal) AS last, count(*) AS n
              FROM outbox.relocation_rows s WHERE s.relocation = p_relocation
             GROUP BY s.model) g;
    FOR v_model IN SELECT o.value FROM jsonb_array_elements_text(manifest->'order')
                                    WITH ORDINALITY o(value, n) ORDER BY o.n LOOP
        pos := pos + 1;
        rel := outbox._relocation_table(v_model);
        IF rel IS NULL THEN
            RAISE EXCEPTION 'table % of the export does not exist here', v_model
                USING ERRCODE = 'undefined_table',
                      HINT = 'Create it (or register it under that table key) before importing.';
        END IF;
        SELECT a.attname INTO pk
          FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
         WHERE i.indrelid = rel AND i.indisprimary AND i.indnkeyatts = 1
           AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype);
        IF pk IS NULL THEN
            RAISE EXCEPTION 'table % (%) has no primary key of one integer column here', v_model, rel
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        seq := pg_get_serial_sequence(rel::text, pk);
        IF seq IS NULL THEN
            RAISE EXCEPTION 'column %.% has no sequence here', v_model, pk
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'An import takes new primary keys from the column''s sequence (serial or identity).';
        END IF;
        cols := outbox._relocation_plan_columns(v_model, rel, pk, manifest);
        refs := outbox._relocation_plan_refs(v_model, rel, pos, manifest);

        span := coalesce(spans->v_model, '{}');
        staged_rows := coalesce((span->>'n')::bigint, 0);
        IF staged_rows > 0
           AND (span->>'last')::bigint - (span->>'first')::bigint + 1 <> staged_rows THEN
            RAISE EXCEPTION 'relocation %: the rows of % are not one range of ordinals',
                p_relocation, v_model USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- The hook: its oid for its call (_relocation_statement quotes its
        -- name), its name for messages (schema-qualified: search_path is
        -- pg_catalog's).
        SELECT h.hook::oid INTO hook_oid FROM outbox.relocation_collision_hooks h
         WHERE h.relid = rel;
        plan := plan || jsonb_build_array(jsonb_build_object(
            'model', v_model, 'relid', rel::oid, 'table', rel::text,
            'pk', pk, 'sequence', seq, 'columns', to_jsonb(cols), 'refs', refs,
            'first', span->'first', 'last', span->'last', 'count', staged_rows, 'hook_oid', hook_oid,
            'hook', hook_oid::regproc::text));
    END LOOP;
    RETURN plan;
END
$$;

-- The table key of rel as an export names it (src/relocation/model/models.cpp).
CREATE OR REPLACE FUNCTION outbox._relocation_table_key(rel regclass) RETURNS text
    LANGUAGE c STABLE SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'outbox__relocation_table_key';

-- The statement over the staged rows of one table (entry, of the plan) as
-- they are written here, each row's fields with the new primary key and
-- every reference inside the export rewritten through the map, for purpose:
-- insert (ordinals $1 to $2 as one jsonb[], the references of a cycle NULL,
-- the new keys $3 in ordinal order), deferred (their later step: the new
-- key and the cycle's columns of the rows that have them, as one jsonb[])
-- or compare (every row as model, pk, fields).  A reference whose value the
-- map does not have (a row outside the export) raises an error.  Built in
-- C++ (src/relocation/import/rows_statement.hpp).
CREATE OR REPLACE FUNCTION outbox._relocation_rows_statement(relocation text,
    users_relocation text, model text, pk text, columns text[], parents text[], users boolean[],
    deferred boolean[], purpose text) RETURNS text
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox__relocation_rows_statement';

-- A statement relocation runs on table tbl as its owner (through
-- outbox._run_as_table_owner: $1 the keys or rows, one jsonb column out):
-- insert_rows, insert_new_rows, upsert_rows, update_rows (columns set from
-- the rows), clear_keys (columns set to NULL), delete_keys, count_keys,
-- keys_where (key_column one of the keys), rows_of_keys, values_of_keys
-- (key_column's, not NULL), call_hook (hook's row for each {relocation,
-- row} of $1).  Built in C++ from the names, quoted there
-- (src/relocation/import/table_statements.hpp).
CREATE OR REPLACE FUNCTION outbox._relocation_statement(kind text, tbl regclass, pk name,
    columns name[] DEFAULT '{}', key_column name DEFAULT NULL, hook regprocedure DEFAULT NULL)
    RETURNS text
    LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox__relocation_statement';

CREATE OR REPLACE FUNCTION outbox._relocation_rows_sql(p_relocation uuid,
    p_users_relocation uuid, entry jsonb, purpose text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._relocation_rows_statement(p_relocation::text, p_users_relocation::text,
               entry->>'model', entry->>'pk',
               coalesce(array_agg(r.value->>'column' ORDER BY r.n), '{}'),
               coalesce(array_agg(r.value->>'parent' ORDER BY r.n), '{}'),
               coalesce(array_agg(r.value->>'kind' = 'users' ORDER BY r.n), '{}'),
               coalesce(array_agg((r.value->>'deferred')::boolean ORDER BY r.n), '{}'),
               purpose)
      FROM jsonb_array_elements(entry->'refs') WITH ORDINALITY r(value, n)
$$;

-- Raises the error of a row whose reference leads outside the export.
CREATE OR REPLACE FUNCTION outbox._relocation_unresolved(p_relocation uuid, model text,
    old bigint, column_name text, parent text, fields jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'relocation %: row % of % refers through % to % %, which has no new key: a row outside the export',
        p_relocation, old, model, column_name, parent, fields->>column_name
        USING ERRCODE = 'foreign_key_violation',
              DETAIL = format('Row: %s', fields);
END
$$;
