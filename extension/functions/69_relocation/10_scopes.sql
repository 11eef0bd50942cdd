------------------------------------------------------------------------------
-- Relocation (SPEC section 12): scopes, roots, the model check, the export
------------------------------------------------------------------------------
-- tbl can take a relocation scope: an application's own table (not a
-- view, a system catalog, another extension's or pg_outbox's table, a
-- partition or a temporary table).  Returns its owner and row type.
CREATE OR REPLACE FUNCTION outbox._scope_table(tbl regclass, OUT relowner oid, OUT reltype oid)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relkind, c.relispartition, c.relpersistence, c.relnamespace, c.reltype,
           c.relowner, n.nspname,
           (SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
             WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
               AND d.refclassid = 'pg_extension'::regclass) AS extension
      INTO rel
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'tbl % is not a table', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF tbl < 16384 OR rel.nspname IN ('pg_catalog', 'information_schema')
          OR rel.nspname LIKE 'pg\_toast%' THEN
        RAISE EXCEPTION 'tbl % is a system catalog', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF rel.relnamespace = 'outbox'::regnamespace OR rel.extension IS NOT NULL THEN
        RAISE EXCEPTION 'tbl % belongs to extension %', tbl, coalesce(rel.extension, 'pg_outbox')
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Relocation scopes are for the application''s own tables.';
    ELSIF rel.relispartition THEN
        RAISE EXCEPTION 'tbl % is a partition', tbl USING ERRCODE = 'wrong_object_type',
            DETAIL = 'A partition takes the scope of its partitioned table.',
            HINT = format('Set the scope of %s.', pg_partition_root(tbl));
    ELSIF rel.relpersistence = 't' THEN
        RAISE EXCEPTION 'tbl % is a temporary table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;
    relowner := rel.relowner;
    reltype := rel.reltype;
END
$$;

-- The body of outbox.set_relocation_scope, run as the extension's owner once
-- the C gate checked that the caller owns tbl (a superuser owns every
-- table).  Sentry checks a model's __relocation_scope__ when its class is
-- defined: the same rules here, when it is set.
CREATE OR REPLACE FUNCTION outbox._set_relocation_scope(tbl regclass, scopes text[],
    scope_function regprocedure, plain_columns name[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    fn record;
    scope text;
    col name;
BEGIN
    SELECT * INTO rel FROM outbox._scope_table(tbl);

    PERFORM outbox._require(scopes, 'scopes');
    IF cardinality(scopes) = 0 OR array_ndims(scopes) <> 1 THEN
        RAISE EXCEPTION 'scopes must name at least one relocation scope'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Excluded, User, Organization, Config or Global.';
    END IF;
    FOREACH scope IN ARRAY scopes LOOP
        PERFORM outbox._require(scope, 'an element of scopes');
        IF scope NOT IN ('Excluded', 'User', 'Organization', 'Config', 'Global') THEN
            RAISE EXCEPTION 'scopes: % is not a relocation scope', quote_literal(scope)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Excluded, User, Organization, Config or Global (Sentry''s RelocationScope).';
        END IF;
    END LOOP;
    IF (SELECT count(DISTINCT s) FROM unnest(scopes) s) <> cardinality(scopes) THEN
        RAISE EXCEPTION 'scopes % names a scope twice', scopes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(scopes) > 1 AND 'Excluded' = ANY (scopes) THEN
        RAISE EXCEPTION 'scopes %: Excluded cannot be in a set', scopes
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Excluded is only ever a table''s one scope, as in Sentry.';
    END IF;
    IF cardinality(scopes) > 1 AND scope_function IS NULL THEN
        RAISE EXCEPTION 'scopes % is a set: it needs a scope_function', scopes
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A set is decided per row (Sentry''s get_relocation_scope()).',
                  HINT = format('Pass a function taking a row of %s and returning text.', tbl);
    END IF;
    IF cardinality(scopes) = 1 AND scope_function IS NOT NULL THEN
        RAISE EXCEPTION 'scope_function is only for a set of scopes, not for %', scopes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF scope_function IS NOT NULL THEN
        SELECT p.pronargs, p.proargtypes[0] AS argtype, p.prorettype, p.prokind, p.proretset
          INTO fn FROM pg_proc p WHERE p.oid = scope_function;
        IF fn.pronargs <> 1 OR fn.argtype <> rel.reltype OR fn.prorettype <> 'text'::regtype
           OR fn.prokind <> 'f' OR fn.proretset THEN
            RAISE EXCEPTION 'scope_function % must take a row of % and return text', scope_function, tbl
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- The export calls it as the table's owner.
        IF NOT has_function_privilege(rel.relowner, scope_function, 'EXECUTE') THEN
            RAISE EXCEPTION 'scope_function: the owner of % may not execute %', tbl, scope_function
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    FOREACH col IN ARRAY coalesce(plain_columns, '{}') LOOP
        IF col IS NULL OR NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = tbl
                                         AND a.attname = col AND a.attnum > 0
                                         AND NOT a.attisdropped) THEN
            RAISE EXCEPTION 'plain_columns: column % of % does not exist', quote_ident(col), tbl
                USING ERRCODE = 'undefined_column';
        END IF;
    END LOOP;

    INSERT INTO outbox.relocation_scopes AS s (relid, scopes, scope_function, plain_columns)
    VALUES (tbl, scopes, scope_function, coalesce(plain_columns, '{}'))
    ON CONFLICT (relid) DO UPDATE
        SET scopes = excluded.scopes, scope_function = excluded.scope_function,
            plain_columns = excluded.plain_columns;
    PERFORM outbox._move_equip_cell();
END
$$;

-- The public entry point: the C gate checks the caller owns tbl, then runs
-- outbox._set_relocation_scope as the extension's owner.
CREATE OR REPLACE FUNCTION outbox.set_relocation_scope(tbl regclass, scopes text[],
    scope_function regprocedure DEFAULT NULL, plain_columns name[] DEFAULT NULL) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_set_relocation_scope';

-- The extension owner's: which table's rows an export of scope starts from.
CREATE OR REPLACE FUNCTION outbox.set_relocation_root(scope text, tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    declared text[];
BEGIN
    PERFORM outbox._require(scope, 'scope');
    PERFORM outbox._require(tbl, 'tbl');
    IF scope NOT IN ('User', 'Organization') THEN
        RAISE EXCEPTION 'scope: % has no root (only User and Organization are exported)',
            quote_literal(scope) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.scopes INTO declared FROM outbox.relocation_scopes s WHERE s.relid = tbl;
    IF declared IS NULL OR NOT scope = ANY (declared) THEN
        RAISE EXCEPTION 'tbl % is not in scope %', tbl, scope
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('SELECT outbox.set_relocation_scope(%L, ''{%s}'');', tbl, scope);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a
                     ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                    WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1
                      AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)) THEN
        RAISE EXCEPTION 'tbl % has no primary key of one integer column', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'An export names its rows by their primary key.';
    END IF;
    INSERT INTO outbox.relocation_roots AS r (scope, relid) VALUES (scope, tbl)
    ON CONFLICT ON CONSTRAINT relocation_roots_pkey DO UPDATE SET relid = excluded.relid;
    PERFORM outbox._move_equip_cell();
END
$$;

-- One row per finding; none: every table of the application's schemas
-- declares a scope an export can follow (src/relocation/model/model_check.cpp).
CREATE OR REPLACE FUNCTION outbox.check_models()
RETURNS TABLE (relation regclass, finding text, detail text)
    LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_check_models';

-- The rows of every Organization-scoped table that belong to the
-- organizations root_ids, from one snapshot, in dependency order, as
-- Sentry's export has them, then the manifest (src/relocation/export/export.cpp).
CREATE OR REPLACE FUNCTION outbox.export_organizations(root_ids bigint[])
RETURNS TABLE (ordinal bigint, model text, pk bigint, fields jsonb)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_export_organizations';

-- The same for the User-scoped rows of the users user_ids (on control: the
-- members an organization export's manifest lists under cross_silo).
CREATE OR REPLACE FUNCTION outbox.export_users(user_ids bigint[])
RETURNS TABLE (ordinal bigint, model text, pk bigint, fields jsonb)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_export_users';
