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
-- table's owner, restricted (src/relocation/owner_statement.cpp): capture
-- fires, the application's triggers run, and nothing they do runs with the
-- caller's privileges.  Everything else here reads and writes pg_outbox's
-- own tables, as the extension's owner, who alone may run an import.

-- The table key an export names a table by (as src/relocation/models.cpp
-- derives it): its registered table_key, else its name, schema-qualified
-- outside public.  NULL: no table here; an ERROR when two tables claim it.
CREATE OR REPLACE FUNCTION outbox._relocation_table(model text) RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found regclass[];
BEGIN
    SELECT array_agg(c.oid::regclass) INTO found
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'
       AND c.oid >= 16384 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'outbox')
       AND outbox._relocation_table_key(c.oid::regclass) = model;
    IF cardinality(found) > 1 THEN
        RAISE EXCEPTION 'table key % names % tables here: %', quote_literal(model),
            cardinality(found), found USING ERRCODE = 'ambiguous_alias';
    END IF;
    RETURN found[1];
END
$$;

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
     WHERE s.relocation = p_relocation AND s.model = 'pg_outbox.manifest';
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
    SELECT encode(sha256(convert_to(string_agg(format(E'%s\t%s\t%s\t%s\n', s.ordinal, s.model,
                                                      s.pk, s.fields), '' ORDER BY s.ordinal),
                                    'UTF8')), 'hex')
      INTO checksum
      FROM outbox.relocation_rows s
     WHERE s.relocation = p_relocation AND s.model <> 'pg_outbox.manifest';
    IF checksum IS DISTINCT FROM manifest->>'checksum' THEN
        RAISE EXCEPTION 'relocation %: the staged export does not match its manifest''s checksum',
            p_relocation USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'A row was edited after the export: load the export again.';
    END IF;
    RETURN manifest;
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
--    kind: map | users | keep, deferred}], first, last, count, hook}.
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
    col record;
    cols text[];
    refs jsonb;
    ref record;
    parent_position int;
    span record;
    hook text;
    deferred text[];
BEGIN
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

        -- References: foreign keys of one column to a primary key, and
        -- registered cross-silo references.
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

        SELECT min(s.ordinal) AS first, max(s.ordinal) AS last, count(*) AS n INTO span
          FROM outbox.relocation_rows s WHERE s.relocation = p_relocation AND s.model = v_model;
        IF span.n > 0 AND span.last - span.first + 1 <> span.n THEN
            RAISE EXCEPTION 'relocation %: the rows of % are not one range of ordinals',
                p_relocation, v_model USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) INTO hook
          FROM outbox.relocation_collision_hooks h
          JOIN pg_proc p ON p.oid = h.hook JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE h.relid = rel;
        plan := plan || jsonb_build_array(jsonb_build_object(
            'model', v_model, 'relid', rel::oid, 'table', rel::text,
            'qualified', (SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
                            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE c.oid = rel),
            'pk', pk, 'sequence', seq, 'columns', to_jsonb(cols), 'refs', refs,
            'first', span.first, 'last', span.last, 'count', span.n, 'hook', hook));
    END LOOP;
    RETURN plan;
END
$$;

-- The table key of rel as an export names it.
CREATE OR REPLACE FUNCTION outbox._relocation_table_key(rel regclass) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(r.table_key, CASE WHEN n.nspname = 'public' THEN c.relname::text
                                      ELSE n.nspname || '.' || c.relname END)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN outbox.registered_tables r ON r.relid = c.oid
     WHERE c.oid = rel
$$;

-- The SELECT that gives the staged rows of one table (entry, of the plan)
-- between ordinals $1 and $2 as they are written here: (ordinal, old, new,
-- row), row the fields with the new primary key and every reference inside
-- the export rewritten through the map; the references of a cycle NULL when
-- deferred_null (the insert step, whose new keys are $3, in ordinal order),
-- else rewritten too (their later step, the compare).  A reference whose
-- value the map does not have (a row outside the export) raises an error.
CREATE OR REPLACE FUNCTION outbox._relocation_rows_sql(p_relocation uuid,
    p_users_relocation uuid, entry jsonb, deferred_null boolean,
    ordinals text DEFAULT 'BETWEEN $1 AND $2', joined boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ref jsonb;
    n int := 0;
    row_sql text;
    lookups text := '';
    columns text := '';
    unresolved text := '';
BEGIN
    -- A chunk looks every key up by the map's primary key, one index probe
    -- each, whatever the map's statistics say while it grows; the compare
    -- (joined) reads whole tables after an ANALYZE of the map, and joins.
    row_sql := format('y.fields || pg_catalog.jsonb_build_object(%L, y.new)', entry->>'pk');
    FOR ref IN SELECT r.value FROM jsonb_array_elements(entry->'refs') r LOOP
        IF ref->>'kind' = 'users' AND p_users_relocation IS NULL THEN
            CONTINUE; -- this database shares the source's control: values kept
        END IF;
        n := n + 1;
        IF (ref->>'deferred')::boolean AND deferred_null THEN
            row_sql := row_sql || format(' || pg_catalog.jsonb_build_object(%L, NULL::bigint)',
                                         ref->>'column');
            CONTINUE;
        END IF;
        row_sql := row_sql || format(' || pg_catalog.jsonb_build_object(%L, y.m%s)',
                                     ref->>'column', n);
        lookups := lookups || format(
            CASE WHEN joined THEN
                ' LEFT JOIN outbox.relocation_pk_map m%4$s ON m%4$s.relocation = %1$L'
                ' AND m%4$s.table_key = %2$L AND m%4$s.old = (s.fields->>%3$L)::bigint'
            ELSE
                ', (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = %1$L'
                ' AND m.table_key = %2$L AND m.old = (s.fields->>%3$L)::bigint) AS m%4$s'
            END,
            CASE WHEN ref->>'kind' = 'users' THEN p_users_relocation ELSE p_relocation END,
            ref->>'parent', ref->>'column', n);
        columns := columns || format(', m%1$s.new AS m%1$s', n);
        unresolved := unresolved || format(
            ' WHEN y.fields->>%1$L IS NOT NULL AND y.m%2$s IS NULL'
            ' THEN outbox._relocation_unresolved(%3$L, %4$L, y.old, %1$L, %5$L, y.fields)',
            ref->>'column', n, p_relocation, entry->>'model', ref->>'parent');
    END LOOP;
    -- What a collision hook changed, but for the references it was given.
    row_sql := format('(%s) || coalesce(y.replaced - %L::text[], ''{}'')', row_sql,
                      ARRAY(SELECT r.value->>'column' FROM jsonb_array_elements(entry->'refs') r)
                      || (entry->>'pk'));
    IF joined THEN
        RETURN format('SELECT y.ordinal, y.old, y.new, %s AS row'
                      ' FROM (SELECT s.ordinal, s.pk AS old, s.fields, k.new, k.replaced%s'
                      ' FROM outbox.relocation_rows s'
                      ' LEFT JOIN outbox.relocation_pk_map k ON k.relocation = s.relocation'
                      ' AND k.table_key = s.model AND k.old = s.pk%s'
                      ' WHERE s.relocation = %L AND s.model = %L AND s.ordinal %s OFFSET 0) y',
                      CASE WHEN unresolved = '' THEN row_sql
                           ELSE 'CASE' || unresolved || ' ELSE ' || row_sql || ' END' END,
                      columns, lookups, p_relocation, entry->>'model', ordinals);
    END IF;
    RETURN format('SELECT y.ordinal, y.old, y.new, %s AS row'
                  ' FROM (SELECT s.ordinal, s.pk AS old, s.fields, %s%s'
                  ' FROM outbox.relocation_rows s'
                  ' WHERE s.relocation = %L AND s.model = %L AND s.ordinal %s OFFSET 0) y',
                  CASE WHEN unresolved = '' THEN row_sql
                       ELSE 'CASE' || unresolved || ' ELSE ' || row_sql || ' END' END,
                  CASE WHEN deferred_null
                       -- The insert step: the keys it just took, $3[1] for ordinal $1.
                       THEN '$3[s.ordinal - $1 + 1] AS new, NULL::jsonb AS replaced'
                       ELSE '(SELECT k.new FROM outbox.relocation_pk_map k'
                            ' WHERE k.relocation = s.relocation AND k.table_key = s.model'
                            ' AND k.old = s.pk) AS new,'
                            ' (SELECT k.replaced FROM outbox.relocation_pk_map k'
                            ' WHERE k.relocation = s.relocation AND k.table_key = s.model'
                            ' AND k.old = s.pk) AS replaced' END,
                  lookups, p_relocation, entry->>'model', ordinals);
END
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
    insert_sql text;
    strict_sql text;
    collided record;
    replacement jsonb;
    detail text;
    constraint_name text;
    columns text;
BEGIN
    SELECT array_agg(s.pk ORDER BY s.ordinal) INTO olds FROM outbox.relocation_rows s
     WHERE s.relocation = st.relocation AND s.ordinal BETWEEN lo AND hi;
    IF st.keys = 'kept' THEN
        news := olds; -- a move: the cells keep their id ranges apart
    ELSE
        -- One nextval per row as the table's owner, given out in ordinal order.
        SELECT array_agg(k::text::bigint ORDER BY k::text::bigint) INTO news
          FROM unnest(outbox._run_as_table_owner(rel,
                   format('SELECT pg_catalog.to_jsonb(pg_catalog.nextval(%L::pg_catalog.regclass))'
                          ' FROM pg_catalog.unnest($1)', entry->>'sequence'),
                   array_fill('null'::jsonb, ARRAY[cardinality(olds)]))) k;
    END IF;
    INSERT INTO outbox.relocation_pk_map (relocation, table_key, old, new)
    SELECT st.relocation, entry->>'model', u.old, u.new FROM unnest(olds, news) u(old, new);

    EXECUTE format('SELECT array_agg(x.row ORDER BY x.ordinal) FROM (%s) x',
                   outbox._relocation_rows_sql(st.relocation, st.users_relocation, entry, true))
       INTO rows_to_write USING lo, hi, news;

    SELECT string_agg(quote_ident(c), ', '), string_agg('r.' || quote_ident(c), ', ')
      INTO columns, insert_sql
      FROM jsonb_array_elements_text(entry->'columns' || to_jsonb(entry->>'pk')) c;
    strict_sql := format('INSERT INTO %s AS t (%s) OVERRIDING SYSTEM VALUE SELECT %s'
                         ' FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::%s, j) r',
                         entry->>'qualified', columns, insert_sql, entry->>'qualified');
    written := outbox._relocation_write(st, rel,
        format('WITH w AS (%s ON CONFLICT DO NOTHING RETURNING t.%I) SELECT pg_catalog.to_jsonb(w.%I) FROM w',
               strict_sql, entry->>'pk', entry->>'pk'),
        rows_to_write);
    IF cardinality(written) = cardinality(rows_to_write) THEN
        RETURN cardinality(written);
    END IF;

    -- The rows a unique key refused: the hook's row instead, or the error.
    FOR collided IN SELECT u.row, u.n
                      FROM unnest(rows_to_write) WITH ORDINALITY u(row, n)
                     WHERE NOT u.row->(entry->>'pk') = ANY (written)
                     ORDER BY u.n LOOP
        replacement := collided.row;
        IF entry->>'hook' IS NOT NULL THEN
            replacement := (outbox._run_as_table_owner(rel,
                format('SELECT %s(%L::uuid, j) FROM pg_catalog.unnest($1) j', entry->>'hook',
                       st.relocation), ARRAY[collided.row]))[1];
            IF replacement IS NULL OR jsonb_typeof(replacement) <> 'object' THEN
                RAISE EXCEPTION 'relocation %: the collision hook % of % returned % for row % instead of a row',
                    st.relocation, entry->>'hook', entry->>'model', coalesce(replacement::text, 'NULL'),
                    olds[collided.n] USING ERRCODE = 'invalid_parameter_value';
            END IF;
            replacement := replacement || jsonb_build_object(entry->>'pk', collided.row->(entry->>'pk'));
            UPDATE outbox.relocation_pk_map m SET replaced = replacement
             WHERE m.relocation = st.relocation AND m.table_key = entry->>'model'
               AND m.old = olds[collided.n];
        END IF;
        BEGIN
            PERFORM outbox._relocation_write(st, rel,
                format('WITH w AS (%s RETURNING t.%I) SELECT pg_catalog.to_jsonb(w.%I) FROM w',
                       strict_sql, entry->>'pk', entry->>'pk'), ARRAY[replacement]);
        EXCEPTION WHEN unique_violation OR exclusion_violation THEN
            GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, constraint_name = CONSTRAINT_NAME;
            RAISE EXCEPTION 'relocation %: row % of % collides with a row here on %',
                st.relocation, olds[collided.n], entry->>'model', constraint_name
                USING ERRCODE = 'unique_violation', CONSTRAINT = constraint_name,
                      DETAIL = format('%s Row: %s', detail, replacement),
                      HINT = CASE WHEN entry->>'hook' IS NULL THEN format(
                          'Register a collision hook: SELECT outbox.set_relocation_collision_hook(%L, ...), then CALL the import again.',
                          entry->>'table')
                          ELSE format('The collision hook %s returned a row that collides too.', entry->>'hook') END;
        END;
    END LOOP;
    RETURN cardinality(rows_to_write);
END
$$;

-- A write of the import into rel (outbox._run_as_table_owner).  With the
-- source's keys (a move, 69_relocation_move.sql) it writes no outbox rows:
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
    EXECUTE format('SELECT array_agg(pg_catalog.jsonb_build_object(%L, x.new) || ('
                   '   SELECT pg_catalog.jsonb_object_agg(e.key, e.value)'
                   '     FROM pg_catalog.jsonb_each(x.row) e WHERE e.key = ANY (%L::text[]))'
                   '   ORDER BY x.ordinal) FILTER (WHERE x.row ?| %L::text[] AND EXISTS ('
                   '   SELECT FROM pg_catalog.jsonb_each(x.row) e'
                   '    WHERE e.key = ANY (%L::text[]) AND e.value <> ''null''::jsonb))'
                   ' FROM (%s) x',
                   entry->>'pk', deferred, deferred, deferred,
                   outbox._relocation_rows_sql(st.relocation, st.users_relocation, entry, false))
       INTO updates USING lo, hi;
    IF updates IS NULL THEN
        RETURN 0;
    END IF;
    RETURN cardinality(outbox._relocation_write(st, rel,
        format('WITH w AS (UPDATE %s AS t SET (%s) = ROW(%s)'
               ' FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::%s, j) r'
               ' WHERE t.%I OPERATOR(pg_catalog.=) r.%I RETURNING t.%I)'
               ' SELECT pg_catalog.to_jsonb(w.%I) FROM w',
               entry->>'qualified',
               (SELECT string_agg(quote_ident(c), ', ') FROM unnest(deferred) c),
               (SELECT string_agg('r.' || quote_ident(c), ', ') FROM unnest(deferred) c),
               entry->>'qualified', entry->>'pk', entry->>'pk', entry->>'pk', entry->>'pk'),
        updates));
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

-- The extension owner's: stops an import under way at the end of its
-- current chunk (the CALL then returns); a CALL resumes it.  An import
-- whose session died is importing too, and may be paused.
CREATE OR REPLACE FUNCTION outbox.pause_relocation(relocation uuid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p_relocation uuid := relocation;
    st outbox.relocation_state;
    mv outbox.organization_moves;
BEGIN
    PERFORM outbox._require(p_relocation, 'relocation');
    mv := outbox._move_locked(p_relocation);
    IF mv.relocation IS NOT NULL THEN
        PERFORM outbox._pause_move(mv);
        RETURN;
    END IF;
    -- Waits for the chunk under way, which holds the row.
    st := outbox._relocation_locked(p_relocation);
    IF st.state <> 'importing' THEN
        RAISE EXCEPTION 'relocation % is %: only an import under way can be paused',
            p_relocation, st.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE outbox.relocation_state s SET state = 'paused', updated_at = clock_timestamp()
     WHERE s.relocation = p_relocation;
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
    root_model := (SELECT s.fields->>'root' FROM outbox.relocation_rows s
                    WHERE s.relocation = p_relocation AND s.model = 'pg_outbox.manifest');
    new_roots := ARRAY(SELECT m.new FROM outbox.relocation_pk_map m
                        WHERE m.relocation = p_relocation AND m.table_key = root_model
                          AND m.old = ANY (st.roots) ORDER BY m.new);
    SELECT string_agg(format('SELECT %L AS model, x.new AS pk, x.row - %L AS fields FROM (%s) x',
                             e.value->>'model', e.value->>'pk',
                             outbox._relocation_rows_sql(p_relocation, st.users_relocation,
                                                         e.value, false, 'IS NOT NULL', true)),
                      ' UNION ALL ')
      INTO expected_sql
      FROM jsonb_array_elements(st.plan) e WHERE (e.value->>'count')::bigint > 0;
    DELETE FROM outbox.relocation_findings f WHERE f.relocation = p_relocation;
    -- Whole tables: joins, planned on what the map and the staging hold now;
    -- both sides materialized first (one statement of both plans far worse).
    ANALYZE outbox.relocation_rows (relocation, model, pk), outbox.relocation_pk_map;
    IF to_regclass('pg_temp.relocation_expected') IS NOT NULL THEN -- compared before, this transaction
        DROP TABLE pg_temp.relocation_expected, pg_temp.relocation_actual;
    END IF;
    EXECUTE 'CREATE TEMP TABLE relocation_expected ON COMMIT DROP AS ' || expected_sql;
    EXECUTE format('CREATE TEMP TABLE relocation_actual ON COMMIT DROP AS'
                   ' SELECT a.model, a.pk, a.fields FROM outbox.%s($1) a'
                   ' WHERE a.model <> ''pg_outbox.manifest''',
                   CASE st.scope WHEN 'User' THEN 'export_users' ELSE 'export_organizations' END)
        USING new_roots;
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
    st := outbox._relocation_locked(p_relocation);
    IF st.state = 'cancelled' THEN
        RAISE EXCEPTION 'relocation % is already cancelled', p_relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(st.plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        deferred := outbox._relocation_deferred(entry);
        CONTINUE WHEN cardinality(deferred) = 0;
        keys := ARRAY(SELECT to_jsonb(m.new) FROM outbox.relocation_pk_map m
                       WHERE m.relocation = p_relocation AND m.table_key = entry->>'model');
        PERFORM outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
            format('WITH w AS (UPDATE %s AS t SET (%s) = ROW(%s) FROM pg_catalog.unnest($1) j'
                   ' WHERE t.%I OPERATOR(pg_catalog.=) (j #>> ''{}'')::bigint RETURNING 1)'
                   ' SELECT pg_catalog.to_jsonb(pg_catalog.count(*)) FROM w',
                   entry->>'qualified',
                   (SELECT string_agg(quote_ident(c), ', ') FROM unnest(deferred) c),
                   (SELECT string_agg('NULL', ', ') FROM unnest(deferred) c), entry->>'pk'),
            keys);
    END LOOP;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(st.plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        keys := ARRAY(SELECT to_jsonb(m.new) FROM outbox.relocation_pk_map m
                       WHERE m.relocation = p_relocation AND m.table_key = entry->>'model');
        CONTINUE WHEN cardinality(keys) = 0;
        deleted := deleted + (outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
            format('WITH w AS (DELETE FROM %s AS t USING pg_catalog.unnest($1) j'
                   ' WHERE t.%I OPERATOR(pg_catalog.=) (j #>> ''{}'')::bigint RETURNING 1)'
                   ' SELECT pg_catalog.to_jsonb(pg_catalog.count(*)) FROM w',
                   entry->>'qualified', entry->>'pk'),
            keys))[1]::text::bigint;
    END LOOP;
    UPDATE outbox.relocation_state s
       SET state = 'cancelled', step = NULL, updated_at = clock_timestamp(),
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
-- And each move control drives (69_relocation_move.sql): rows_done of
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
