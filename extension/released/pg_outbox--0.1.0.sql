-- pg_outbox 0.1.0: registry, options, outbox storage and C++ capture.
\echo Use "CREATE EXTENSION pg_outbox" to load this file. \quit

-- Nothing here is for PUBLIC.  The extension's owner (a superuser)
-- administers; application roles only write their own tables, and capture
-- writes the outbox on their behalf.  Functions that run with the owner's
-- rights pin search_path.
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;

------------------------------------------------------------------------------
-- Registry
------------------------------------------------------------------------------

-- What an outbox is sharded by (organisation, user, ...).  ids are the
-- shard_scope values written into outbox rows.
CREATE TABLE outbox.scopes (
    id   int  PRIMARY KEY CHECK (id >= 0),
    name text NOT NULL UNIQUE
);

-- A category is a kind of change (an int with a name); it belongs to exactly
-- one scope.
CREATE TABLE outbox.categories (
    id    int  PRIMARY KEY CHECK (id >= 0),
    name  text NOT NULL UNIQUE,
    scope int  NOT NULL REFERENCES outbox.scopes (id)
);

-- Cells a control-silo change is fanned out to.
CREATE TABLE outbox.cells (
    name text PRIMARY KEY
);

-- Replicated tables.  relid is a regclass so that pg_dump writes the table's
-- name and a restore maps it to the new OID.
CREATE TABLE outbox.registered_tables (
    table_key           text     PRIMARY KEY,
    relid               regclass NOT NULL UNIQUE,
    silo                text     NOT NULL CHECK (silo IN ('cell', 'control')),
    category            int      NOT NULL REFERENCES outbox.categories (id),
    shard_column        name,
    cell_column         name     CHECK (cell_column IS NULL OR silo = 'control'),
    payload_columns     name[],
    replication_version int      NOT NULL CHECK (replication_version >= 1)
);

-- Version gates and other options (section 2 of the spec).  A GUC of the same
-- name overrides a row here.
CREATE TABLE outbox.options (
    key   text  PRIMARY KEY,
    value jsonb NOT NULL
);

------------------------------------------------------------------------------
-- Outbox storage
------------------------------------------------------------------------------
-- Chosen with bench/capture (README, "Capture benchmark").  Capture writes one
-- outbox row per changed row, so whatever the outbox costs to write is paid
-- on every write to every registered table.  Measured on 200,000-row bulk
-- inserts (ratio to the same insert without capture): a heap-only outbox
-- row costs about 0.8x on top of the insert; a btree on (shard_scope,
-- shard_identifier, id), the natural index for draining, costs another
-- 1.9x, because consecutive rows go to random shards and so to random
-- leaf pages (a full descent and, after each checkpoint, a full-page image
-- per leaf); even a btree on shard_identifier alone costs 0.8x.  Sentry's
-- outbox has three btrees.
--
-- So the outbox has no index.  It is hash-partitioned on shard_identifier
-- instead (capture routes each row to its partition itself, as cheaply as a
-- heap insert), which gives draining what it needs:
--   * walk one shard in id order: the shard's rows are in one partition, a
--     sixteenth of the outbox, scanned and sorted;
--   * find due shards: one scan per partition, which the drain does anyway
--     to take every due shard of that partition in one pass;
--   * delete what was delivered: by ctid (checked against the id) within the
--     transaction that read the rows.
-- The outbox is meant to be shallow (it is drained continuously); a deep
-- backlog costs scans of a partition, never anything on the write path.
-- id comes from a sequence without cache that capture advances a block at a
-- time (one nextval per 1,000 rows of a statement): within a shard, ids
-- follow the order in which changes to an object were written, because the
-- second of two statements changing the same row reserves its block only
-- after the first has committed (src/capture/outbox_writer.cpp).  Nothing
-- looks a row up by id alone.
CREATE SEQUENCE outbox.cell_outbox_id_seq INCREMENT BY 1000;
CREATE TABLE outbox.cell_outbox (
    id                bigint      NOT NULL DEFAULT nextval('outbox.cell_outbox_id_seq'),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    payload           jsonb,
    scheduled_from    timestamptz NOT NULL DEFAULT now(),
    scheduled_for     timestamptz NOT NULL DEFAULT now(),
    date_added        timestamptz NOT NULL DEFAULT now()
) PARTITION BY HASH (shard_identifier);
ALTER SEQUENCE outbox.cell_outbox_id_seq OWNED BY outbox.cell_outbox.id;

CREATE SEQUENCE outbox.control_outbox_id_seq INCREMENT BY 1000;
CREATE TABLE outbox.control_outbox (
    id                bigint      NOT NULL DEFAULT nextval('outbox.control_outbox_id_seq'),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    payload           jsonb,
    scheduled_from    timestamptz NOT NULL DEFAULT now(),
    scheduled_for     timestamptz NOT NULL DEFAULT now(),
    date_added        timestamptz NOT NULL DEFAULT now(),
    cell_name         text        NOT NULL
) PARTITION BY HASH (shard_identifier);
ALTER SEQUENCE outbox.control_outbox_id_seq OWNED BY outbox.control_outbox.id;

-- pg_dump keeps undelivered outbox rows: the data lives in the partitions.
DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('CREATE TABLE outbox.cell_outbox_%s PARTITION OF outbox.cell_outbox '
                       'FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
        EXECUTE format('CREATE TABLE outbox.control_outbox_%s PARTITION OF outbox.control_outbox '
                       'FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
        PERFORM pg_catalog.pg_extension_config_dump(format('outbox.cell_outbox_%s', i), '');
        PERFORM pg_catalog.pg_extension_config_dump(format('outbox.control_outbox_%s', i), '');
    END LOOP;
END
$$;

-- pg_dump keeps the registry and the options.
SELECT pg_catalog.pg_extension_config_dump('outbox.scopes', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.categories', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cells', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.registered_tables', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.options', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cell_outbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.control_outbox_id_seq', '');

------------------------------------------------------------------------------
-- C++ internals
------------------------------------------------------------------------------
CREATE FUNCTION outbox.capture_statement() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'capture_statement';
CREATE FUNCTION outbox.capture_row() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'capture_row';
CREATE FUNCTION outbox._in_logical_apply() RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'in_logical_apply';
CREATE FUNCTION outbox.capture_truncate() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'capture_truncate';
CREATE FUNCTION outbox._invalidate_cache() RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'invalidate_cache';
CREATE FUNCTION outbox._option_kind(key text) RETURNS text
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'option_kind';
CREATE FUNCTION outbox._valid_table_key(table_key text) RETURNS boolean
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'valid_table_key';
CREATE FUNCTION outbox._ddl_attaches_partition(command pg_ddl_command) RETURNS boolean
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'ddl_attaches_partition';
CREATE FUNCTION outbox._boundary_selftest(mode text) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'boundary_selftest';

------------------------------------------------------------------------------
-- Argument checks shared by the SQL functions
------------------------------------------------------------------------------
CREATE FUNCTION outbox._require(arg anyelement, arg_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF arg IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', arg_name USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;

-- Scope, category and cell names: plain words, so that they read the same in
-- SQL, logs and metrics.
CREATE FUNCTION outbox._check_name(value text, arg_name text, pattern text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(value, arg_name);
    IF value !~ pattern OR length(value) > 63 THEN
        RAISE EXCEPTION '% % is not a valid name', arg_name, quote_literal(value)
            USING ERRCODE = 'invalid_name',
                  HINT = format('Use at most 63 characters matching %s.', pattern);
    END IF;
END
$$;

CREATE FUNCTION outbox._check_id(id int, arg_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id < 0 THEN
        RAISE EXCEPTION '% must be zero or positive, not %', arg_name, id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

------------------------------------------------------------------------------
-- Registry functions
------------------------------------------------------------------------------
CREATE FUNCTION outbox.register_scope(name text, id int DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    existing outbox.scopes;
BEGIN
    PERFORM outbox._check_name(name, 'name', '^[A-Za-z_][A-Za-z0-9_]*$');
    PERFORM outbox._check_id(id, 'id');
    LOCK TABLE outbox.scopes IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO existing FROM outbox.scopes s WHERE s.name = register_scope.name;
    IF FOUND THEN
        IF id IS NOT NULL AND id <> existing.id THEN
            RAISE EXCEPTION 'scope % is already registered with id %, not %',
                quote_literal(name), existing.id, id USING ERRCODE = 'duplicate_object';
        END IF;
        RETURN existing.id;
    END IF;
    IF id IS NULL THEN
        SELECT coalesce(max(s.id) + 1, 0) INTO id FROM outbox.scopes s;
    ELSIF EXISTS (SELECT FROM outbox.scopes s WHERE s.id = register_scope.id) THEN
        RAISE EXCEPTION 'id % is already used by scope %', id,
            (SELECT quote_literal(s.name) FROM outbox.scopes s WHERE s.id = register_scope.id)
            USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO outbox.scopes (id, name) VALUES (id, name);
    RETURN id;
END
$$;

CREATE FUNCTION outbox.register_category(name text, scope text, id int DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope_id int;
    existing record;
BEGIN
    PERFORM outbox._check_name(name, 'name', '^[A-Za-z_][A-Za-z0-9_]*$');
    PERFORM outbox._require(scope, 'scope');
    PERFORM outbox._check_id(id, 'id');
    SELECT s.id INTO scope_id FROM outbox.scopes s WHERE s.name = register_category.scope;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scope % is not registered', quote_literal(scope)
            USING ERRCODE = 'undefined_object', HINT = 'Register it with outbox.register_scope().';
    END IF;
    LOCK TABLE outbox.categories IN SHARE ROW EXCLUSIVE MODE;
    SELECT c.id, s.name AS scope_name, c.scope INTO existing
      FROM outbox.categories c JOIN outbox.scopes s ON s.id = c.scope
     WHERE c.name = register_category.name;
    IF FOUND THEN
        IF existing.scope <> scope_id THEN
            RAISE EXCEPTION 'category % belongs to scope %, not %', quote_literal(name),
                quote_literal(existing.scope_name), quote_literal(scope)
                USING ERRCODE = 'duplicate_object',
                      DETAIL = 'A category belongs to exactly one scope.';
        END IF;
        IF id IS NOT NULL AND id <> existing.id THEN
            RAISE EXCEPTION 'category % is already registered with id %, not %',
                quote_literal(name), existing.id, id USING ERRCODE = 'duplicate_object';
        END IF;
        RETURN existing.id;
    END IF;
    IF id IS NULL THEN
        SELECT coalesce(max(c.id) + 1, 0) INTO id FROM outbox.categories c;
    ELSIF EXISTS (SELECT FROM outbox.categories c WHERE c.id = register_category.id) THEN
        RAISE EXCEPTION 'id % is already used by category %', id,
            (SELECT quote_literal(c.name) FROM outbox.categories c
              WHERE c.id = register_category.id)
            USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO outbox.categories (id, name, scope) VALUES (id, name, scope_id);
    RETURN id;
END
$$;

CREATE FUNCTION outbox.register_cell(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_name(name, 'name', '^[A-Za-z0-9_][A-Za-z0-9_.-]*$');
    INSERT INTO outbox.cells (name) VALUES (name) ON CONFLICT DO NOTHING;
    PERFORM outbox._invalidate_cache();
END
$$;

-- Rows already written for the cell stay in the outbox, visible.
CREATE FUNCTION outbox.unregister_cell(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(name, 'name');
    DELETE FROM outbox.cells c WHERE c.name = unregister_cell.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cell % is not registered', quote_literal(name)
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._invalidate_cache();
END
$$;

-- The column of tbl called column_name, or NULL.
CREATE FUNCTION outbox._column(tbl regclass, column_name name)
RETURNS TABLE (attnum int2, type_name text, integral boolean, textual boolean, not_null boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.attnum, format_type(a.atttypid, a.atttypmod),
           a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype),
           a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'name'::regtype),
           a.attnotnull
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = column_name AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- Checks that a registered (or to be registered) table still fits its
-- registration: the columns exist with fitting types.  Used by
-- register_table and by the DDL event trigger.
CREATE FUNCTION outbox._check_columns(tbl regclass, silo text, shard_column name,
                                      payload_columns name[], cell_column name)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col record;
    payload_column name;
BEGIN
    SELECT * INTO col FROM outbox._column(tbl, 'id');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no column "id"', tbl USING ERRCODE = 'undefined_column',
            DETAIL = 'A replicated table needs a unique, non-null integer id column.';
    ELSIF NOT col.integral THEN
        RAISE EXCEPTION 'column "id" of table % is of type %, not an integer type', tbl,
            col.type_name USING ERRCODE = 'datatype_mismatch';
    ELSIF NOT col.not_null THEN
        RAISE EXCEPTION 'column "id" of table % must be NOT NULL', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_index i
         WHERE i.indrelid = tbl AND i.indisunique AND i.indnkeyatts = 1
           AND i.indkey[0] = col.attnum AND i.indexprs IS NULL AND i.indpred IS NULL)
    THEN
        RAISE EXCEPTION 'column "id" of table % has no unique index', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Make id the primary key, or add a unique index on (id) alone.';
    END IF;

    IF shard_column IS NOT NULL THEN
        SELECT * INTO col FROM outbox._column(tbl, shard_column);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'shard_column % does not exist in table %',
                quote_ident(shard_column), tbl USING ERRCODE = 'undefined_column';
        ELSIF NOT col.integral THEN
            RAISE EXCEPTION 'shard_column % of table % is of type %, not an integer type',
                quote_ident(shard_column), tbl, col.type_name USING ERRCODE = 'datatype_mismatch';
        ELSIF NOT col.not_null THEN
            RAISE EXCEPTION 'shard_column % of table % must be NOT NULL',
                quote_ident(shard_column), tbl USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = 'Every outbox row needs a shard identifier.';
        END IF;
    END IF;

    IF cell_column IS NOT NULL THEN
        IF silo <> 'control' THEN
            RAISE EXCEPTION 'cell_column is for control-silo tables only; % is a % table', tbl,
                silo USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT * INTO col FROM outbox._column(tbl, cell_column);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cell_column % does not exist in table %',
                quote_ident(cell_column), tbl USING ERRCODE = 'undefined_column';
        ELSIF NOT col.textual THEN
            RAISE EXCEPTION 'cell_column % of table % is of type %, not text, varchar or name',
                quote_ident(cell_column), tbl, col.type_name USING ERRCODE = 'datatype_mismatch';
        ELSIF NOT col.not_null THEN
            RAISE EXCEPTION 'cell_column % of table % must be NOT NULL',
                quote_ident(cell_column), tbl USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END IF;

    IF payload_columns IS NOT NULL THEN
        IF cardinality(payload_columns) = 0 THEN
            RAISE EXCEPTION 'payload_columns must not be empty'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass NULL for outbox rows without a payload.';
        END IF;
        IF array_position(payload_columns, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'payload_columns must not contain NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF (SELECT count(DISTINCT c) FROM unnest(payload_columns) c) <> cardinality(payload_columns)
        THEN
            RAISE EXCEPTION 'payload_columns names a column twice: %', payload_columns
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH payload_column IN ARRAY payload_columns LOOP
            IF NOT EXISTS (SELECT FROM outbox._column(tbl, payload_column)) THEN
                RAISE EXCEPTION 'payload_columns: column % does not exist in table %',
                    quote_ident(payload_column), tbl USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
    END IF;
END
$$;

-- pg_partition_tree and pg_partition_ancestors return nothing for a plain
-- table; these include the relation itself in every case.
CREATE FUNCTION outbox._partition_tree(tbl regclass)
RETURNS TABLE (relid regclass, isleaf boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT tbl, (SELECT c.relkind = 'r' FROM pg_class c WHERE c.oid = tbl)
    UNION
    SELECT t.relid, t.isleaf FROM pg_partition_tree(tbl) t
$$;

CREATE FUNCTION outbox._self_and_ancestors(rel regclass)
RETURNS TABLE (relid regclass, depth int)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT rel, 0
    UNION ALL
    SELECT a.relid, a.depth::int
      FROM pg_partition_ancestors(rel) WITH ORDINALITY AS a(relid, depth)
     WHERE a.relid <> rel
$$;

-- Capture triggers on every relation of tbl's partition tree (tbl itself when
-- it is a plain table): statement triggers are not inherited, and a
-- statement on a partition fires only that partition's.  TRUNCATE triggers
-- go on the leaves, which hold the rows.  The row trigger for logical
-- replication's apply worker goes on tbl and PostgreSQL clones it.
CREATE FUNCTION outbox._install_capture_triggers(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    node record;
    trigger_sql text;
    trigger_name text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = tbl AND g.tgname = 'outbox_capture_apply') THEN
        EXECUTE format('CREATE TRIGGER outbox_capture_apply AFTER INSERT OR UPDATE OR DELETE ON %s '
                       'FOR EACH ROW WHEN (outbox._in_logical_apply()) '
                       'EXECUTE FUNCTION outbox.capture_row()', tbl);
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER outbox_capture_apply', tbl);
    END IF;
    FOR node IN SELECT t.relid, t.isleaf FROM outbox._partition_tree(tbl) t LOOP
        FOR trigger_name, trigger_sql IN VALUES
            ('outbox_capture_insert', 'AFTER INSERT ON %s REFERENCING NEW TABLE AS outbox_new'),
            ('outbox_capture_update', 'AFTER UPDATE ON %s REFERENCING OLD TABLE AS outbox_old NEW TABLE AS outbox_new'),
            ('outbox_capture_delete', 'AFTER DELETE ON %s REFERENCING OLD TABLE AS outbox_old'),
            ('outbox_capture_truncate', 'BEFORE TRUNCATE ON %s')
        LOOP
            CONTINUE WHEN trigger_name = 'outbox_capture_truncate' AND NOT node.isleaf;
            -- Checked per trigger: the DDL event trigger may have made it meanwhile.
            CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g
                                   WHERE g.tgrelid = node.relid AND g.tgname = trigger_name);
            EXECUTE format('CREATE TRIGGER %I ' || trigger_sql || ' FOR EACH STATEMENT '
                           'EXECUTE FUNCTION outbox.%s()', trigger_name, node.relid,
                           CASE trigger_name WHEN 'outbox_capture_truncate' THEN 'capture_truncate'
                                ELSE 'capture_statement' END);
            EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', node.relid, trigger_name);
        END LOOP;
    END LOOP;
END
$$;

CREATE FUNCTION outbox._register_table(tbl regclass, category text, silo text,
    shard_column name, payload_columns name[], cell_column name, replication_version int,
    table_key text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    category_id int;
    taken text;
BEGIN
    SELECT c.relname, c.relkind, c.relispartition, c.relpersistence, c.relnamespace INTO rel
      FROM pg_class c WHERE c.oid = tbl;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'tbl % is not a table', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF tbl < 16384 OR rel.relnamespace IN ('pg_catalog'::regnamespace,
                                              'information_schema'::regnamespace) THEN
        RAISE EXCEPTION 'tbl % is a system catalog', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF rel.relispartition THEN
        RAISE EXCEPTION 'tbl % is a partition', tbl USING ERRCODE = 'wrong_object_type',
            HINT = 'Register the partitioned table; every partition is captured.';
    ELSIF rel.relpersistence = 't' THEN
        RAISE EXCEPTION 'tbl % is a temporary table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;

    PERFORM outbox._require(category, 'category');
    SELECT c.id INTO category_id FROM outbox.categories c WHERE c.name = _register_table.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object',
                  HINT = 'Register it with outbox.register_category().';
    END IF;

    PERFORM outbox._require(silo, 'silo');
    IF silo NOT IN ('cell', 'control') THEN
        RAISE EXCEPTION 'silo must be ''cell'' or ''control'', not %', quote_literal(silo)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    PERFORM outbox._require(replication_version, 'replication_version');
    IF replication_version < 1 THEN
        RAISE EXCEPTION 'replication_version must be at least 1, not %', replication_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    table_key := coalesce(table_key, rel.relname);
    IF NOT outbox._valid_table_key(table_key) THEN
        RAISE EXCEPTION 'table_key % is not valid', quote_literal(table_key)
            USING ERRCODE = 'invalid_name',
                  DETAIL = 'The table key names the version-gate options, which are GUCs.',
                  HINT = 'Pass a table_key matching [a-z_][a-z0-9_]* (at most 63 bytes).';
    END IF;

    LOCK TABLE outbox.registered_tables IN SHARE ROW EXCLUSIVE MODE;
    SELECT r.table_key INTO taken FROM outbox.registered_tables r WHERE r.relid = tbl;
    IF FOUND THEN
        RAISE EXCEPTION 'table % is already registered (table_key %)', tbl, quote_literal(taken)
            USING ERRCODE = 'duplicate_object';
    END IF;
    SELECT r.relid::text INTO taken FROM outbox.registered_tables r
     WHERE r.table_key = _register_table.table_key;
    IF FOUND THEN
        RAISE EXCEPTION 'table_key % is already used by table %', quote_literal(table_key), taken
            USING ERRCODE = 'duplicate_object', HINT = 'Pass another table_key.';
    END IF;

    PERFORM outbox._check_columns(tbl, silo, shard_column, payload_columns, cell_column);

    INSERT INTO outbox.registered_tables
        (table_key, relid, silo, category, shard_column, cell_column, payload_columns,
         replication_version)
    VALUES (table_key, tbl, silo, category_id, shard_column, cell_column, payload_columns,
            replication_version);

    PERFORM outbox._install_capture_triggers(tbl);
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE FUNCTION outbox._registered(tbl regclass) RETURNS outbox.registered_tables
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables;
BEGIN
    PERFORM outbox._require(tbl, 'tbl');
    SELECT * INTO r FROM outbox.registered_tables t WHERE t.relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not registered with pg_outbox', tbl
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN r;
END
$$;

-- Outbox rows already written stay, visible, until drained.
CREATE FUNCTION outbox._unregister_table(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    capture record;
BEGIN
    PERFORM outbox._registered(tbl);
    -- The registry row goes first: the DDL guard then lets the triggers go.
    DELETE FROM outbox.registered_tables r WHERE r.relid = tbl;
    FOR capture IN SELECT g.tgrelid::regclass AS rel, g.tgname
               FROM outbox._partition_tree(tbl) t JOIN pg_trigger g ON g.tgrelid = t.relid
              WHERE g.tgname LIKE 'outbox\_capture\_%' AND g.tgparentid = 0 LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', capture.tgname, capture.rel);
    END LOOP;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE FUNCTION outbox._set_replication_version(tbl regclass, version int) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables := outbox._registered(tbl);
BEGIN
    PERFORM outbox._require(version, 'version');
    IF version < r.replication_version THEN
        RAISE EXCEPTION 'version % is lower than the replication_version of %, %', version, tbl,
            r.replication_version USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'A replication version never goes down.';
    END IF;
    UPDATE outbox.registered_tables t SET replication_version = version WHERE t.relid = tbl;
END
$$;

-- The public entry points: a C function that checks the caller owns tbl,
-- then runs outbox._<name> as the extension's owner.
CREATE FUNCTION outbox.register_table(tbl regclass, category text,
    silo text DEFAULT 'cell',
    shard_column name DEFAULT NULL,
    payload_columns name[] DEFAULT NULL,
    cell_column name DEFAULT NULL,
    replication_version int DEFAULT 1,
    table_key text DEFAULT NULL) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'table_owner_gate';
CREATE FUNCTION outbox.unregister_table(tbl regclass) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'table_owner_gate';
CREATE FUNCTION outbox.set_replication_version(tbl regclass, version int) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'table_owner_gate';

CREATE VIEW outbox.tables AS
SELECT r.table_key, r.relid AS relation, r.silo, c.name AS category, s.name AS scope,
       r.shard_column, r.cell_column, r.payload_columns, r.replication_version
  FROM outbox.registered_tables r
  JOIN outbox.categories c ON c.id = r.category
  JOIN outbox.scopes s ON s.id = c.scope;

------------------------------------------------------------------------------
-- DDL guard: capture must not be bypassed or broken by DDL
------------------------------------------------------------------------------
-- After DDL on a registered table (or a partition of one): the registered
-- columns still fit and the capture triggers are still enabled.  A partition
-- created or attached under a registered table gets its TRUNCATE trigger
-- (row triggers are cloned by PostgreSQL itself).
CREATE FUNCTION outbox._on_ddl_command_end() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    problem text;
BEGIN
    FOR r IN
        SELECT t.relid, t.silo, t.shard_column, t.payload_columns, t.cell_column,
               bool_or(d.command_tag = 'CREATE TABLE'
                       OR outbox._ddl_attaches_partition(d.command)) AS adds_partition
          FROM pg_event_trigger_ddl_commands() d
          JOIN pg_class c ON c.oid = d.objid AND d.classid = 'pg_class'::regclass
          CROSS JOIN LATERAL outbox._self_and_ancestors(c.oid) a
          JOIN outbox.registered_tables t ON t.relid = a.relid
         GROUP BY 1, 2, 3, 4, 5
    LOOP
        BEGIN
            PERFORM outbox._check_columns(r.relid, r.silo, r.shard_column, r.payload_columns,
                                          r.cell_column);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
            RAISE EXCEPTION 'this change would break capture of registered table %: %',
                r.relid, problem
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'Unregister the table with outbox.unregister_table() first.';
        END;
        IF EXISTS (SELECT FROM outbox._partition_tree(r.relid) p
                     JOIN pg_trigger g ON g.tgrelid = p.relid
                    WHERE g.tgname LIKE 'outbox\_capture\_%' AND g.tgenabled IN ('D', 'R'))
        THEN
            RAISE EXCEPTION 'the capture triggers of % cannot be disabled', r.relid
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Unregister the table with outbox.unregister_table() instead.';
        END IF;
        IF r.adds_partition THEN
            PERFORM outbox._install_capture_triggers(r.relid);
        END IF;
    END LOOP;
END
$$;

-- Dropping a registered table drops its registration; dropping only its
-- capture triggers is refused.
CREATE FUNCTION outbox._on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dropped_table text;
BEGIN
    SELECT d.object_identity INTO dropped_table
      FROM pg_event_trigger_dropped_objects() d
     WHERE d.object_type = 'trigger'
       AND d.address_names[3] LIKE 'outbox\_capture\_%'
       AND EXISTS (
            SELECT FROM pg_class c
              CROSS JOIN LATERAL outbox._self_and_ancestors(c.oid) a
              JOIN outbox.registered_tables t ON t.relid = a.relid
             WHERE c.oid = to_regclass(quote_ident(d.address_names[1]) || '.'
                                       || quote_ident(d.address_names[2])))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'trigger % is pg_outbox''s capture trigger', dropped_table
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister the table with outbox.unregister_table() instead.';
    END IF;
    DELETE FROM outbox.registered_tables t
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = t.relid;
    IF FOUND THEN
        PERFORM outbox._invalidate_cache();
    END IF;
END
$$;

CREATE EVENT TRIGGER outbox_ddl_command_end ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION outbox._on_ddl_command_end();
CREATE EVENT TRIGGER outbox_sql_drop ON sql_drop
    EXECUTE FUNCTION outbox._on_sql_drop();

------------------------------------------------------------------------------
-- Options and the version gate
------------------------------------------------------------------------------
-- Checks an option's value for its kind; returns the kind.
CREATE FUNCTION outbox._check_option(key text, value jsonb, source text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind text := outbox._option_kind(key);
BEGIN
    IF value IS NULL THEN
        RETURN kind;
    END IF;
    IF kind = 'replication_version' THEN
        IF jsonb_typeof(value) <> 'number' OR value::numeric <> trunc(value::numeric)
           OR value::numeric < 0 OR value::numeric > 2147483647 THEN
            RAISE EXCEPTION '% for % must be an integer from 0 to 2147483647, not %',
                source, key, value USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF jsonb_typeof(value) <> 'null' AND (jsonb_typeof(value) <> 'array' OR EXISTS (
            SELECT FROM jsonb_array_elements(value) e WHERE jsonb_typeof(e) <> 'string')) THEN
        RAISE EXCEPTION '% for % must be a JSON array of cell names, not %', source, key, value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN kind;
END
$$;

CREATE FUNCTION outbox.set_option(key text, value jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(value, 'value');
    PERFORM outbox._check_option(key, value, 'value');
    INSERT INTO outbox.options AS o (key, value) VALUES (key, value)
        ON CONFLICT ON CONSTRAINT options_pkey DO UPDATE SET value = excluded.value;
END
$$;

-- The GUC of the same name (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE or
-- SET) when set, else the options table, else the default.
CREATE FUNCTION outbox.get_option(key text) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind text := outbox._check_option(key, NULL, 'value');
    setting text := current_setting(key, true);
    value jsonb;
BEGIN
    -- A placeholder GUC that was SET and then RESET reads as ''.
    IF setting IS NOT NULL AND setting <> '' THEN
        BEGIN
            value := setting::jsonb;
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'setting % = % is not JSON', key, quote_literal(setting)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        PERFORM outbox._check_option(key, value, 'setting');
        RETURN value;
    END IF;
    SELECT o.value INTO value FROM outbox.options o WHERE o.key = get_option.key;
    IF FOUND THEN
        RETURN value;
    END IF;
    RETURN CASE kind WHEN 'replication_version' THEN '0'::jsonb END;
END
$$;

CREATE FUNCTION outbox.unset_option(key text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_option(key, NULL, 'value');
    DELETE FROM outbox.options o WHERE o.key = unset_option.key;
END
$$;

-- min(gate option, coded version); the coded version when force_synchronous.
CREATE FUNCTION outbox.find_replication_version(tbl regclass,
    force_synchronous boolean DEFAULT false) RETURNS int
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables := outbox._registered(tbl);
BEGIN
    PERFORM outbox._require(force_synchronous, 'force_synchronous');
    IF force_synchronous THEN
        RETURN r.replication_version;
    END IF;
    RETURN least(outbox.get_option(format('outbox_replication.%s.replication_version',
                                          r.table_key))::int,
                 r.replication_version);
END
$$;

-- The cells a control-silo backfill of tbl writes to: the target_cells
-- option when set, else every registered cell.
CREATE FUNCTION outbox.target_cells(tbl regclass) RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables := outbox._registered(tbl);
    cells jsonb := outbox.get_option(format('outbox_replication.%s.backfill.target_cells',
                                            r.table_key));
BEGIN
    IF cells IS NULL OR jsonb_typeof(cells) = 'null' THEN
        RETURN ARRAY(SELECT c.name FROM outbox.cells c ORDER BY c.name);
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(cells));
END
$$;

------------------------------------------------------------------------------
-- Privileges
------------------------------------------------------------------------------
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- The capture row trigger's WHEN condition runs as whoever writes the table.
GRANT EXECUTE ON FUNCTION outbox._in_logical_apply() TO PUBLIC;
