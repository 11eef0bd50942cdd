-- pg_outbox 0.7.0 to 0.8.0: what changes in tables, types and other state.
-- make appends extension/functions/*.sql, which replaces every function,
-- view and event trigger and grants the privileges again.
\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Cross-silo foreign keys: new tables.
------------------------------------------------------------------------------
-- Cross-silo foreign keys (SPEC section 7)
------------------------------------------------------------------------------
-- Tombstones: a deleted row of a replicated table, kept where the rows that
-- refer to it live.  A deleted control row is recorded in cell_tombstone
-- (Sentry's RegionTombstone), a deleted cell row in control_tombstone.
-- table_name is the parent's table_key.  The cascade job walks them by id.
CREATE TABLE outbox.cell_tombstone (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text        NOT NULL,
    object_identifier bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_name, object_identifier)
);
CREATE TABLE outbox.control_tombstone (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text        NOT NULL,
    object_identifier bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_name, object_identifier)
);

-- Cross-silo references (Sentry's HybridCloudForeignKey): column_name of
-- relid holds ids of parent_table's rows, in the other silo.  table_key names
-- the child in the cascade's watermark keys: its registered table_key, or
-- its name.  parent_silo chooses the tombstones: a control parent's are in
-- cell_tombstone.
CREATE TABLE outbox.registered_foreign_keys (
    relid        regclass NOT NULL,
    column_name  name     NOT NULL,
    table_key    text     NOT NULL,
    parent_table text     NOT NULL,
    parent_silo  text     NOT NULL CHECK (parent_silo IN ('cell', 'control')),
    on_delete    text     NOT NULL CHECK (on_delete IN ('CASCADE', 'SET_NULL', 'DO_NOTHING')),
    PRIMARY KEY (relid, column_name)
);

-- The cascade's watermarks when outbox.cursor_store = table (in Redis:
-- the keys row.<table_key>.<column> and tombstone.<table_key>.<column>,
-- holding [low, "<transaction id>"], as Sentry keeps them).
CREATE TABLE outbox.watermarks (
    key            text   PRIMARY KEY,
    low            bigint NOT NULL,
    transaction_id text   NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('outbox.cell_tombstone', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.control_tombstone', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.registered_foreign_keys', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.watermarks', '');
------------------------------------------------------------------------------
-- C++ internals
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.capture_statement() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_statement';
CREATE OR REPLACE FUNCTION outbox.capture_row() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_row';
CREATE OR REPLACE FUNCTION outbox._in_logical_apply() RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'outbox__in_logical_apply';
CREATE OR REPLACE FUNCTION outbox.capture_truncate() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_truncate';
CREATE OR REPLACE FUNCTION outbox._invalidate_cache() RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__invalidate_cache';
CREATE OR REPLACE FUNCTION outbox._option_kind(key text) RETURNS text
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox__option_kind';
CREATE OR REPLACE FUNCTION outbox._valid_table_key(table_key text) RETURNS boolean
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox__valid_table_key';
CREATE OR REPLACE FUNCTION outbox._boundary_selftest(mode text) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__boundary_selftest';

------------------------------------------------------------------------------
-- Argument checks shared by the SQL functions
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._require(arg anyelement, arg_name text) RETURNS void
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
CREATE OR REPLACE FUNCTION outbox._check_name(value text, arg_name text, pattern text) RETURNS void
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

CREATE OR REPLACE FUNCTION outbox._check_id(id int, arg_name text) RETURNS void
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
CREATE OR REPLACE FUNCTION outbox.register_scope(name text, id int DEFAULT NULL) RETURNS int
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

CREATE OR REPLACE FUNCTION outbox.register_category(name text, scope text, id int DEFAULT NULL) RETURNS int
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

CREATE OR REPLACE FUNCTION outbox.register_cell(name text) RETURNS void
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
CREATE OR REPLACE FUNCTION outbox.unregister_cell(name text) RETURNS void
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
CREATE OR REPLACE FUNCTION outbox._column(tbl regclass, column_name name)
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

-- The valid unique indexes on (id) alone of tbl: what keeps ids unique, which
-- capture and backfill rely on.  An index left invalid by a failed CREATE or
-- DROP INDEX CONCURRENTLY does not count; a partitioned table's does (it is
-- invalid until every partition's index is attached, as during pg_restore,
-- and each of those keeps its partition's ids unique meanwhile).
CREATE OR REPLACE FUNCTION outbox._id_indexes(tbl regclass) RETURNS SETOF oid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.indexrelid FROM pg_index i
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
      JOIN pg_class c ON c.oid = i.indrelid
     WHERE i.indrelid = tbl AND i.indisunique AND (i.indisvalid OR c.relkind = 'p')
       AND i.indnkeyatts = 1 AND a.attname = 'id' AND i.indexprs IS NULL AND i.indpred IS NULL
$$;

-- Checks that a registered (or to be registered) table still fits its
-- registration: the columns exist with fitting types.  Used by
-- register_table and by the DDL event trigger.
CREATE OR REPLACE FUNCTION outbox._check_columns(tbl regclass, silo text, shard_column name,
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
    IF NOT EXISTS (SELECT FROM outbox._id_indexes(tbl)) THEN
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
CREATE OR REPLACE FUNCTION outbox._partition_tree(tbl regclass)
RETURNS TABLE (relid regclass, isleaf boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT tbl, (SELECT c.relkind = 'r' FROM pg_class c WHERE c.oid = tbl)
    UNION
    SELECT t.relid, t.isleaf FROM pg_partition_tree(tbl) t
$$;

CREATE OR REPLACE FUNCTION outbox._self_and_ancestors(rel regclass)
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
CREATE OR REPLACE FUNCTION outbox._install_capture_triggers(tbl regclass) RETURNS void
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

-- Registration also checks what the DDL guard keeps true.
CREATE OR REPLACE FUNCTION outbox._register_table(tbl regclass, category text, silo text,
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

    category_id := outbox._category_id(category);

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
    PERFORM outbox._check_capture(tbl);
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE OR REPLACE FUNCTION outbox._registered(tbl regclass) RETURNS outbox.registered_tables
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

CREATE OR REPLACE FUNCTION outbox._unregister_table(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._registered(tbl);
    -- The registry row goes first: the DDL guard then lets the triggers go.
    DELETE FROM outbox.registered_tables r WHERE r.relid = tbl;
    PERFORM outbox._drop_capture_triggers(tbl);
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE OR REPLACE FUNCTION outbox._set_replication_version(tbl regclass, version int) RETURNS void
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
CREATE OR REPLACE FUNCTION outbox.register_table(tbl regclass, category text,
    silo text DEFAULT 'cell',
    shard_column name DEFAULT NULL,
    payload_columns name[] DEFAULT NULL,
    cell_column name DEFAULT NULL,
    replication_version int DEFAULT 1,
    table_key text DEFAULT NULL) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_register_table';
CREATE OR REPLACE FUNCTION outbox.unregister_table(tbl regclass) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_unregister_table';
CREATE OR REPLACE FUNCTION outbox.set_replication_version(tbl regclass, version int) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_set_replication_version';

CREATE OR REPLACE VIEW outbox.tables AS
SELECT r.table_key, r.relid AS relation, r.silo, c.name AS category, s.name AS scope,
       r.shard_column, r.cell_column, r.payload_columns, r.replication_version
  FROM outbox.registered_tables r
  JOIN outbox.categories c ON c.id = r.category
  JOIN outbox.scopes s ON s.id = c.scope;
------------------------------------------------------------------------------
-- Capture that nothing bypasses: the DDL guard
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._capture_functions() RETURNS oid[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY['outbox.capture_statement()'::regprocedure::oid,
                 'outbox.capture_truncate()'::regprocedure::oid,
                 'outbox.capture_row()'::regprocedure::oid]
$$;

-- What must hold of a registered table for nothing to bypass its capture:
-- it is no partition of anything, nothing inherits from it outside its
-- partition tree (rows of a legacy inheritance child are read with it but
-- never captured), it does not force row-level security on its owner (a
-- backfill reads it as its owner), and every capture trigger in its tree is
-- enabled ALWAYS (an ORIGIN trigger is off under session_replication_role =
-- replica).  Checks triggers that exist: pg_restore creates them one by one.
CREATE OR REPLACE FUNCTION outbox._check_capture(tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    problem record;
BEGIN
    IF (SELECT c.relispartition FROM pg_class c WHERE c.oid = tbl) THEN
        RAISE EXCEPTION 'registered table % cannot be a partition', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister it with outbox.unregister_table() first, and register the partitioned table.';
    END IF;
    SELECT i.inhrelid::regclass AS child, i.inhparent::regclass AS parent INTO problem
      FROM outbox._partition_tree(tbl) t
      JOIN pg_inherits i ON i.inhparent = t.relid
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE NOT c.relispartition
     ORDER BY i.inhrelid::regclass::text
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'table % inherits from registered table %: its rows would not be captured',
            problem.child, problem.parent
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Use a partitioned table, or register the child on its own without inheritance.';
    END IF;
    IF (SELECT c.relrowsecurity AND c.relforcerowsecurity FROM pg_class c WHERE c.oid = tbl) THEN
        RAISE EXCEPTION 'registered table % cannot force row-level security on its owner', tbl
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'pg_outbox reads the table as its owner to backfill it; a policy would hide rows from that read.',
                  HINT = format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', tbl);
    END IF;
    SELECT g.tgname, g.tgrelid::regclass AS rel INTO problem
      FROM outbox._partition_tree(tbl) t
      JOIN pg_trigger g ON g.tgrelid = t.relid
     WHERE g.tgfoid = ANY (outbox._capture_functions()) AND g.tgenabled <> 'A'
     ORDER BY g.tgrelid::regclass::text, g.tgname
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the capture trigger % on % must stay enabled ALWAYS', problem.tgname,
            problem.rel
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister the table with outbox.unregister_table() instead.';
    END IF;
END
$$;

-- The capture triggers of rel's partition tree (a partition that left a
-- registered table).
CREATE OR REPLACE FUNCTION outbox._drop_capture_triggers(rel regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    capture record;
BEGIN
    FOR capture IN SELECT g.tgrelid::regclass AS rel, g.tgname
               FROM outbox._partition_tree(rel) t JOIN pg_trigger g ON g.tgrelid = t.relid
              WHERE g.tgfoid = ANY (outbox._capture_functions()) AND g.tgparentid = 0 LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', capture.tgname, capture.rel);
    END LOOP;
END
$$;


-- DROP INDEX CONCURRENTLY commits in stages: refused at sql_drop, it would
-- leave the index invalid all the same.  So the C ddl_command_start trigger
-- asks first, with the indexes the statement names.
CREATE OR REPLACE FUNCTION outbox._guard_drop_index(indexes oid[]) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
BEGIN
    SELECT i.indexrelid::regclass AS index, i.indrelid::regclass AS tbl INTO hit
      FROM pg_index i
      JOIN outbox.registered_tables t ON t.relid = i.indrelid
     WHERE i.indexrelid = ANY (indexes)
       AND i.indexrelid IN (SELECT outbox._id_indexes(i.indrelid))
       AND NOT EXISTS (SELECT FROM outbox._id_indexes(i.indrelid) o WHERE o <> ALL (indexes))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop index %: it is the unique index on id of registered table %',
            hit.index, hit.tbl
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Unregister the table with outbox.unregister_table() first.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox._on_ddl_command_start() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__on_ddl_command_start';
CREATE OR REPLACE FUNCTION outbox._dropped_partitions()
RETURNS TABLE (partition oid, root oid)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__dropped_partitions';
CREATE OR REPLACE FUNCTION outbox._capture_partition_rows(rel regclass, root regclass) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__capture_partition_rows';

-- After DDL that touches a registered table (the table, a partition, a
-- legacy inheritance child, a trigger): the registered columns still fit
-- and _check_capture holds.  A partition created or attached gets the
-- capture triggers, and the rows of one attached are captured as inserts;
-- the rows of one detached, as deletions, and it loses the triggers.  Called
-- by the event trigger _on_ddl_command_end (C), as the extension's owner,
-- with the partitions the command attached or detached and their parents.
CREATE OR REPLACE FUNCTION outbox._guard_ddl(partitions oid[], parents oid[], attached boolean[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    command record;
    change record;
    r record;
    root regclass;
    problem text;
BEGIN
    FOR change IN SELECT * FROM unnest(partitions, attached) AS c(partition, attached)
                   WHERE c.attached LOOP
        IF EXISTS (SELECT FROM outbox._partition_tree(change.partition) t
                     JOIN outbox.registered_tables reg ON reg.relid = t.relid) THEN
            RAISE EXCEPTION 'registered table % cannot become a partition',
                change.partition::regclass
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Unregister it with outbox.unregister_table() first.';
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT FROM outbox.registered_tables) THEN
        RETURN;
    END IF;
    FOR change IN SELECT * FROM unnest(partitions, parents, attached) AS c(partition, parent, attached)
    LOOP
        SELECT t.relid INTO root
          FROM outbox._self_and_ancestors(change.parent) a
          JOIN outbox.registered_tables t ON t.relid = a.relid
         ORDER BY a.depth LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        IF change.attached THEN
            PERFORM outbox._install_capture_triggers(root);
            PERFORM outbox._capture_partition_rows(change.partition, root);
        ELSE
            PERFORM outbox._capture_partition_rows(change.partition, root);
            PERFORM outbox._drop_capture_triggers(change.partition);
        END IF;
    END LOOP;
    FOR command IN
        SELECT d.command_tag, d.classid, d.objid,
               CASE WHEN d.classid = 'pg_class'::regclass THEN d.objid
                    WHEN d.classid = 'pg_trigger'::regclass THEN
                         (SELECT g.tgrelid FROM pg_trigger g WHERE g.oid = d.objid)
               END AS rel
          FROM pg_event_trigger_ddl_commands() d
    LOOP
        CONTINUE WHEN command.rel IS NULL;
        FOR r IN
            SELECT DISTINCT t.relid, t.silo, t.shard_column, t.payload_columns, t.cell_column
              FROM (SELECT command.rel::regclass
                     UNION SELECT i.inhparent::regclass FROM pg_inherits i
                            WHERE i.inhrelid = command.rel) x(rel)
             CROSS JOIN LATERAL outbox._self_and_ancestors(x.rel) a
              JOIN outbox.registered_tables t ON t.relid = a.relid
        LOOP
            IF command.classid = 'pg_trigger'::regclass AND EXISTS (
                SELECT FROM pg_trigger g WHERE g.oid = command.objid
                   AND g.tgfoid = ANY (outbox._capture_functions())) THEN
                RAISE EXCEPTION 'the capture triggers of % cannot be altered', r.relid
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Unregister the table with outbox.unregister_table() instead.';
            END IF;
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
            IF command.command_tag IN ('CREATE TABLE', 'CREATE FOREIGN TABLE') THEN
                PERFORM outbox._install_capture_triggers(r.relid);
            END IF;
            PERFORM outbox._check_capture(r.relid);
        END LOOP;
    END LOOP;
END
$$;

-- The event trigger: resolves what the statement attached or detached
-- (src/registry/ddl_guard.cpp), then runs _guard_ddl as the extension's owner.
CREATE OR REPLACE FUNCTION outbox._on_ddl_command_end() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__on_ddl_command_end';

-- Dropping a registered table drops its registration.  Refused: dropping a
-- capture trigger, a handler function, a partition of a registered table
-- without the table (its rows would leave without outbox rows: DETACH it
-- first), or the unique index on id.  SECURITY DEFINER, as above.
CREATE OR REPLACE FUNCTION outbox._on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
    r record;
    problem text;
BEGIN
    SELECT d.object_identity AS partition, p.root::regclass AS root INTO hit
      FROM outbox._dropped_partitions() p
      JOIN outbox.registered_tables t ON t.relid = p.root
      JOIN pg_event_trigger_dropped_objects() d
        ON d.classid = 'pg_class'::regclass AND d.objid = p.partition AND d.objsubid = 0
     WHERE NOT EXISTS (SELECT FROM pg_event_trigger_dropped_objects() e
                        WHERE e.classid = 'pg_class'::regclass AND e.objid = p.root
                          AND e.objsubid = 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop %: it is a partition of registered table %', hit.partition,
            hit.root
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'Its rows would leave the registered table without outbox rows.',
                  HINT = 'Detach it first (ALTER TABLE ... DETACH PARTITION captures its rows as deletions), then drop it.';
    END IF;

    SELECT d.object_identity AS function, c.name AS category INTO hit
      FROM pg_event_trigger_dropped_objects() d
      JOIN outbox.handlers h ON h.handler::oid = d.objid
      JOIN outbox.categories c ON c.id = h.category
     WHERE d.classid = 'pg_proc'::regclass
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'function % is the handler of category %', hit.function,
            quote_literal(hit.category)
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Register another handler for the category, or unregister it with outbox.unregister_handler(), first.';
    END IF;

    SELECT d.object_identity INTO hit
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
        RAISE EXCEPTION 'trigger % is pg_outbox''s capture trigger', hit.object_identity
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister the table with outbox.unregister_table() instead.';
    END IF;

    -- A dropped table or column takes its cross-silo references with it.
    DELETE FROM outbox.registered_foreign_keys f
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objid = f.relid
       AND (d.objsubid = 0 OR (d.object_type = 'table column'
                               AND d.address_names[3] = f.column_name));

    DELETE FROM outbox.registered_tables t
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = t.relid;
    IF FOUND THEN
        PERFORM outbox._invalidate_cache();
    END IF;

    -- An index went: the registered tables must keep their unique index on id.
    IF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() d WHERE d.object_type = 'index') THEN
        FOR r IN SELECT t.relid, t.silo, t.shard_column, t.payload_columns, t.cell_column
                   FROM outbox.registered_tables t LOOP
            BEGIN
                PERFORM outbox._check_columns(r.relid, r.silo, r.shard_column,
                                              r.payload_columns, r.cell_column);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
                RAISE EXCEPTION 'this change would break capture of registered table %: %',
                    r.relid, problem
                    USING ERRCODE = 'dependent_objects_still_exist',
                          HINT = 'Unregister the table with outbox.unregister_table() first.';
            END;
        END LOOP;
    END IF;
END
$$;

DROP EVENT TRIGGER IF EXISTS outbox_ddl_command_end;
CREATE EVENT TRIGGER outbox_ddl_command_end ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'CREATE SCHEMA', 'CREATE FOREIGN TABLE',
                 'ALTER FOREIGN TABLE', 'ALTER TRIGGER')
    EXECUTE FUNCTION outbox._on_ddl_command_end();
DROP EVENT TRIGGER IF EXISTS outbox_ddl_command_start;
CREATE EVENT TRIGGER outbox_ddl_command_start ON ddl_command_start
    EXECUTE FUNCTION outbox._on_ddl_command_start();
DROP EVENT TRIGGER IF EXISTS outbox_sql_drop;
CREATE EVENT TRIGGER outbox_sql_drop ON sql_drop
    EXECUTE FUNCTION outbox._on_sql_drop();
------------------------------------------------------------------------------
-- Options and the version gate (src/options/option_functions.cpp)
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.set_option(key text, value jsonb) RETURNS void
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_set_option';

-- The GUC of the same name (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE or
-- SET) when set, else the options table, else the default.
CREATE OR REPLACE FUNCTION outbox.get_option(key text) RETURNS jsonb
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_get_option';

CREATE OR REPLACE FUNCTION outbox.unset_option(key text) RETURNS void
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_unset_option';

-- min(gate option, coded version); the coded version when force_synchronous.
CREATE OR REPLACE FUNCTION outbox.find_replication_version(tbl regclass,
    force_synchronous boolean DEFAULT false) RETURNS int
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_find_replication_version';

-- The cells a backfill of tbl writes to: the registered cells, or those of
-- them that outbox_replication.<table_key>.backfill.target_cells lists (a
-- listed cell that is not registered gets nothing).  The one resolver:
-- process_backfill_batch reads it too.
CREATE OR REPLACE FUNCTION outbox.target_cells(tbl regclass) RETURNS text[]
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_target_cells';
------------------------------------------------------------------------------
-- Backfill cursors and batches
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._check_table_key(table_key text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(table_key, 'table_key');
    IF NOT EXISTS (SELECT FROM outbox.registered_tables r WHERE r.table_key = _check_table_key.table_key) THEN
        RAISE EXCEPTION 'table_key % is not registered with pg_outbox', quote_literal(table_key)
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox._cursor_get(table_key text, OUT lower_bound bigint, OUT version int)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__cursor_get';
CREATE OR REPLACE FUNCTION outbox._cursor_set(table_key text, lower_bound bigint, version int) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__cursor_set';

-- The cursor of a registered table (a missing one is created as [0, 1]).
CREATE OR REPLACE FUNCTION outbox.get_processing_state(table_key text)
RETURNS TABLE (lower_bound bigint, version int)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_table_key(table_key);
    RETURN QUERY SELECT * FROM outbox._cursor_get(table_key);
END
$$;

CREATE OR REPLACE FUNCTION outbox.set_processing_state(table_key text, lower_bound bigint, version int)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_table_key(table_key);
    PERFORM outbox._require(lower_bound, 'lower_bound');
    PERFORM outbox._require(version, 'version');
    IF version < 0 THEN
        RAISE EXCEPTION 'version must be zero or positive, not %', version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM outbox._cursor_set(table_key, lower_bound, version);
END
$$;

CREATE OR REPLACE FUNCTION outbox.process_backfill_batch(tbl regclass, batch_size int,
    force_synchronous boolean DEFAULT false) RETURNS outbox.backfill_batch
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_process_backfill_batch';

-- Registered tables local to a silo mode, in a stable order.
CREATE OR REPLACE FUNCTION outbox._local_tables(silo_mode text) RETURNS SETOF regclass
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.relid FROM outbox.registered_tables r
     WHERE silo_mode = 'monolith' OR r.silo = silo_mode
     ORDER BY r.table_key
$$;

-- Sentry's backfill_outboxes_for: one budgeted walk over the local tables
-- (src/backfill/backfill_walk.hpp); whether any batch covered ids.
CREATE OR REPLACE FUNCTION outbox.backfill_outboxes_for(silo_mode text DEFAULT NULL,
    scheduled_count int DEFAULT 0, max_batch_rate int DEFAULT 10000,
    force_synchronous boolean DEFAULT false) RETURNS boolean
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_backfill_outboxes_for';

-- The self-hosted path (Sentry runs it on `sentry upgrade`): backfill every
-- local table to its coded version, options bypassed, walks of 1,000 ids
-- until nothing is left.  Returns the outbox rows written.
CREATE OR REPLACE FUNCTION outbox.run_replications_sync() RETURNS bigint
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_run_replications_sync';
------------------------------------------------------------------------------
-- Handlers, draining and the worker
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.register_handler(category text, handler regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int;
    f record;
BEGIN
    PERFORM outbox._require(category, 'category');
    PERFORM outbox._require(handler, 'handler');
    SELECT c.id INTO category_id FROM outbox.categories c WHERE c.name = register_handler.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT p.prokind, p.proretset, p.prorettype, p.pronargs, p.proargtypes INTO f
      FROM pg_proc p WHERE p.oid = handler;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'handler: function with OID % does not exist', handler::oid
            USING ERRCODE = 'undefined_function';
    END IF;
    IF f.prokind <> 'f' OR f.proretset OR f.prorettype <> 'void'::regtype OR f.pronargs <> 1
       OR f.proargtypes[0] <> 'outbox.message'::regtype THEN
        RAISE EXCEPTION 'handler % must be a function (outbox.message) RETURNS void', handler
            USING ERRCODE = 'invalid_function_definition';
    END IF;
    INSERT INTO outbox.handlers AS h (category, handler) VALUES (category_id, handler)
        ON CONFLICT ON CONSTRAINT handlers_pkey DO UPDATE SET handler = excluded.handler;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE OR REPLACE FUNCTION outbox.unregister_handler(category text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(category, 'category');
    DELETE FROM outbox.handlers h
     USING outbox.categories c
     WHERE h.category = c.id AND c.name = unregister_handler.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % has no handler', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE OR REPLACE FUNCTION outbox.drain_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_drain_shard';
CREATE OR REPLACE FUNCTION outbox.drain(silo text DEFAULT NULL) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_drain';

-- Rewrites the outbox partitions that are mostly dead tuples (a snapshot
-- held for long keeps them from VACUUM): src/drain/compaction.hpp.  The
-- worker does it every cycle; force compacts every partition with a file.
CREATE OR REPLACE FUNCTION outbox.compact_outbox(silo text DEFAULT NULL, force boolean DEFAULT false)
    RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_compact_outbox';

-- Wakes the background worker for a cycle now; needs shared_preload_libraries.
CREATE OR REPLACE FUNCTION outbox.wake_worker() RETURNS boolean
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_wake_worker';
------------------------------------------------------------------------------
-- Cross-silo foreign keys: registration, tombstones, the cascade
------------------------------------------------------------------------------
-- The body of outbox.register_foreign_key, run as the extension's owner once
-- the C gate checked that the caller owns tbl.
CREATE OR REPLACE FUNCTION outbox._register_foreign_key(tbl regclass, column_name name,
    parent_table text, on_delete text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    col record;
    child_key text;
    parent record;
    behaviour text := upper(on_delete);
BEGIN
    PERFORM outbox._require(column_name, 'column_name');
    PERFORM outbox._require(parent_table, 'parent_table');
    PERFORM outbox._require(on_delete, 'on_delete');
    SELECT c.relname, c.relkind, c.relispartition, c.relpersistence INTO rel
      FROM pg_class c WHERE c.oid = tbl;
    IF rel.relkind NOT IN ('r', 'p') OR rel.relispartition OR rel.relpersistence = 't' THEN
        RAISE EXCEPTION 'tbl % is not a plain or partitioned table', tbl
            USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT * INTO col FROM outbox._column(tbl, column_name);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column_name: column % of % does not exist', quote_ident(column_name), tbl
            USING ERRCODE = 'undefined_column';
    ELSIF NOT col.integral THEN
        RAISE EXCEPTION 'column_name: column % of % is of type %, not an integer',
            quote_ident(column_name), tbl, col.type_name USING ERRCODE = 'datatype_mismatch';
    END IF;
    -- The cascade finds a parent's children through it.
    IF NOT EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = tbl AND i.indkey[0] = col.attnum AND i.indpred IS NULL
                      AND i.indexprs IS NULL) THEN
        RAISE EXCEPTION 'column_name: column % of % has no index', quote_ident(column_name), tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The cascade finds the rows that refer to a deleted parent through it.',
                  HINT = format('CREATE INDEX CONCURRENTLY ON %s (%I);', tbl, column_name);
    END IF;
    IF NOT EXISTS (SELECT FROM outbox._id_indexes(tbl)) THEN
        RAISE EXCEPTION 'tbl % has no unique index on (id)', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The cascade walks the table by id.';
    END IF;
    IF behaviour NOT IN ('CASCADE', 'SET_NULL', 'DO_NOTHING') THEN
        RAISE EXCEPTION 'on_delete must be CASCADE, SET_NULL or DO_NOTHING, not %',
            quote_literal(on_delete) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF behaviour = 'SET_NULL' AND col.not_null THEN
        RAISE EXCEPTION 'on_delete SET_NULL: column % of % is NOT NULL', quote_ident(column_name), tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT outbox._valid_table_key(parent_table) THEN
        RAISE EXCEPTION 'parent_table % is not a table key', quote_literal(parent_table)
            USING ERRCODE = 'invalid_name',
                  HINT = 'The parent''s table_key, as in its tombstones: [a-z_][a-z0-9_]*.';
    END IF;
    -- The parent's silo: its registration here, else the other silo than
    -- this database's.
    SELECT r.silo INTO parent FROM outbox.registered_tables r WHERE r.table_key = parent_table;
    IF NOT FOUND THEN
        IF current_setting('outbox.silo_mode') = 'monolith' THEN
            RAISE EXCEPTION 'parent_table % is not registered', quote_literal(parent_table)
                USING ERRCODE = 'undefined_object',
                      HINT = 'In monolith mode, register the parent table first: its silo '
                             'chooses the tombstones.';
        END IF;
        SELECT CASE current_setting('outbox.silo_mode') WHEN 'cell' THEN 'control' ELSE 'cell' END
            AS silo INTO parent;
    END IF;
    child_key := coalesce((SELECT r.table_key FROM outbox.registered_tables r WHERE r.relid = tbl),
                          rel.relname);
    INSERT INTO outbox.registered_foreign_keys AS f
        (relid, column_name, table_key, parent_table, parent_silo, on_delete)
    VALUES (tbl, column_name, child_key, parent_table, parent.silo, behaviour)
    ON CONFLICT ON CONSTRAINT registered_foreign_keys_pkey DO UPDATE
        SET parent_table = excluded.parent_table, parent_silo = excluded.parent_silo,
            on_delete = excluded.on_delete;
END
$$;

CREATE OR REPLACE FUNCTION outbox._unregister_foreign_key(tbl regclass, column_name name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(column_name, 'column_name');
    DELETE FROM outbox.registered_foreign_keys f
     WHERE f.relid = tbl AND f.column_name = _unregister_foreign_key.column_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column % of % is not a registered foreign key', quote_ident(column_name),
            tbl USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- The public entry points: the C gate checks the caller owns tbl, then runs
-- outbox._<name> as the extension's owner.
CREATE OR REPLACE FUNCTION outbox.register_foreign_key(tbl regclass, column_name name,
    parent_table text, on_delete text) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_register_foreign_key';
CREATE OR REPLACE FUNCTION outbox.unregister_foreign_key(tbl regclass, column_name name)
RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_unregister_foreign_key';

-- A tombstone in the table of silo (the silo of the rows that refer to the
-- deleted one); recording one twice is a no-op.  The extension owner's
-- only: a forged tombstone deletes other owners' rows.
CREATE OR REPLACE FUNCTION outbox.record_tombstone(silo text, table_name text,
    object_identifier bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(silo, 'silo');
    PERFORM outbox._require(table_name, 'table_name');
    PERFORM outbox._require(object_identifier, 'object_identifier');
    IF NOT outbox._valid_table_key(table_name) THEN
        RAISE EXCEPTION 'table_name % is not a table key', quote_literal(table_name)
            USING ERRCODE = 'invalid_name';
    END IF;
    IF silo = 'cell' THEN
        INSERT INTO outbox.cell_tombstone (table_name, object_identifier)
        VALUES (table_name, object_identifier) ON CONFLICT DO NOTHING;
    ELSIF silo = 'control' THEN
        INSERT INTO outbox.control_tombstone (table_name, object_identifier)
        VALUES (table_name, object_identifier) ON CONFLICT DO NOTHING;
    ELSE
        RAISE EXCEPTION 'silo must be ''cell'' or ''control'', not %', quote_literal(silo)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- One step of the cascade of tbl.column_name (src/cascade/cascade.cpp):
-- true when there is more to do.
CREATE OR REPLACE FUNCTION outbox.process_foreign_key_cascade(tbl regclass, column_name name,
    batch_size int DEFAULT 500) RETURNS boolean
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_process_foreign_key_cascade';

-- The watermarks as stored, without creating missing ones (monitoring).
CREATE OR REPLACE FUNCTION outbox._watermark_peek(key text, OUT low bigint,
    OUT transaction_id text)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__watermark_peek';

-- Every registered reference: its watermarks (NULL: none yet); how far
-- each is behind the largest id of what it walks (the child table, read as
-- its owner; the tombstones); the tombstones of its parent table above the
-- tombstone watermark and the age of the oldest of them (Sentry's
-- processing lag); and its state: pending (tombstones above the
-- watermark), idle (caught up) or watermark_unavailable (the cursor store
-- is down, or a value is not a watermark: see
-- outbox.worker_status.last_error).
CREATE OR REPLACE FUNCTION outbox._foreign_keys()
RETURNS TABLE (relation regclass, column_name name, parent_table text, on_delete text,
               table_key text, row_watermark bigint, tombstone_watermark bigint,
               row_delta bigint, tombstone_delta bigint, pending_tombstones bigint,
               processing_lag interval, state text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f record;
    store_down boolean := false;
    readable boolean;
BEGIN
    FOR f IN SELECT * FROM outbox.registered_foreign_keys k ORDER BY k.table_key, k.column_name LOOP
        relation := f.relid;
        column_name := f.column_name;
        parent_table := f.parent_table;
        on_delete := f.on_delete;
        table_key := f.table_key;
        row_watermark := NULL;
        tombstone_watermark := NULL;
        readable := NOT store_down;
        IF readable THEN
            BEGIN
                SELECT w.low INTO row_watermark
                  FROM outbox._watermark_peek(format('row.%s.%s', f.table_key, f.column_name)) w;
                SELECT w.low INTO tombstone_watermark
                  FROM outbox._watermark_peek(format('tombstone.%s.%s', f.table_key,
                                                     f.column_name)) w;
            EXCEPTION
                WHEN connection_exception THEN
                    store_down := true;
                    readable := false;
                WHEN data_corrupted THEN
                    readable := false;
            END;
        END IF;
        IF f.parent_silo = 'control' THEN
            SELECT count(*), now() - min(c.created_at) INTO pending_tombstones, processing_lag
              FROM outbox.cell_tombstone c
             WHERE c.table_name = f.parent_table AND c.id > coalesce(tombstone_watermark, 0);
            SELECT max(c.id) - coalesce(tombstone_watermark, 0) INTO tombstone_delta
              FROM outbox.cell_tombstone c;
        ELSE
            SELECT count(*), now() - min(c.created_at) INTO pending_tombstones, processing_lag
              FROM outbox.control_tombstone c
             WHERE c.table_name = f.parent_table AND c.id > coalesce(tombstone_watermark, 0);
            SELECT max(c.id) - coalesce(tombstone_watermark, 0) INTO tombstone_delta
              FROM outbox.control_tombstone c;
        END IF;
        -- As the table's owner: its index predicates and operators run when
        -- this is planned.
        SELECT i.max_id - coalesce(row_watermark, 0) INTO row_delta
          FROM outbox._table_id_range(f.relid) i;
        row_delta := greatest(coalesce(row_delta, 0), 0);
        tombstone_delta := greatest(coalesce(tombstone_delta, 0), 0);
        processing_lag := coalesce(processing_lag, interval '0');
        state := CASE WHEN NOT readable THEN 'watermark_unavailable'
                      WHEN pending_tombstones > 0 THEN 'pending' ELSE 'idle' END;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW outbox.foreign_keys AS
SELECT * FROM outbox._foreign_keys();
------------------------------------------------------------------------------
-- Shard depth
------------------------------------------------------------------------------
-- One row per shard with rows, deepest first: a hot shard (say, a backfill
-- that piled thousands of rows onto one organisation) comes out on top.
-- attempts, last_error and last_error_at are those of the shard's current
-- run of failures.  Reads every outbox row (the outboxes have no index):
-- about 1.5x a count(*) of them (bench/monitoring).
-- top limits the shards returned (NULL: all); with_totals adds a row per
-- silo with NULL shard columns, as a ROLLUP would (depth: its rows,
-- attempts: its failing shards, shards: its shards).
CREATE OR REPLACE FUNCTION outbox._shard_depth(top bigint, with_totals boolean)
RETURNS TABLE (silo text, shard_scope int, shard_identifier bigint, cell_name text, depth bigint,
               oldest_date_added timestamptz, next_scheduled_for timestamptz, last_error text,
               last_error_at timestamptz, attempts int, shards bigint)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__shard_depth';

CREATE OR REPLACE VIEW outbox.shard_depth AS
SELECT d.silo, d.shard_scope, d.shard_identifier, d.cell_name, d.depth, d.oldest_date_added,
       d.next_scheduled_for, d.last_error, d.last_error_at, d.attempts
  FROM outbox._shard_depth(NULL, false) d;

------------------------------------------------------------------------------
-- Backfill status
------------------------------------------------------------------------------
-- The cursor as stored, or NULLs when there is none yet; never creates one
-- (a monitoring read must work in a read-only transaction).
CREATE OR REPLACE FUNCTION outbox._cursor_peek(table_key text, OUT lower_bound bigint, OUT version int)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__cursor_peek';

-- The smallest and largest id, read as the table's owner (restricted).
CREATE OR REPLACE FUNCTION outbox._table_id_range(tbl regclass, OUT min_id bigint, OUT max_id bigint)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__table_id_range';

CREATE OR REPLACE FUNCTION outbox._backfill_status()
RETURNS TABLE (table_key text, relation regclass, silo text, coded_version int,
               option_version int, effective_version int, cursor_lower_bound bigint,
               cursor_version int, max_id bigint, fraction_done float8, state text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    min_id bigint;
    store_down boolean := false;
    readable boolean;
    lower bigint;
    version int;
BEGIN
    FOR r IN SELECT t.table_key, t.relid, t.silo, t.replication_version
               FROM outbox.registered_tables t ORDER BY t.table_key LOOP
        table_key := r.table_key;
        relation := r.relid;
        silo := r.silo;
        coded_version := r.replication_version;
        option_version := outbox.get_option(
            format('outbox_replication.%s.replication_version', r.table_key))::int;
        effective_version := outbox.find_replication_version(
            r.relid, current_setting('outbox.self_hosted')::boolean);
        -- As the table's owner: its index predicates and operators run when
        -- this is planned.
        SELECT i.min_id, i.max_id INTO min_id, max_id FROM outbox._table_id_range(r.relid) i;
        cursor_lower_bound := NULL;
        cursor_version := NULL;
        readable := NOT store_down;
        IF readable THEN
            BEGIN
                SELECT c.lower_bound, c.version INTO cursor_lower_bound, cursor_version
                  FROM outbox._cursor_peek(r.table_key) c;
            EXCEPTION
                WHEN connection_exception THEN
                    store_down := true;
                    readable := false;
                WHEN data_corrupted THEN
                    readable := false;
            END;
        END IF;
        lower := coalesce(cursor_lower_bound, 0);
        version := coalesce(cursor_version, 1);
        state := CASE
            WHEN NOT readable THEN 'cursor_unavailable'
            WHEN version > coded_version THEN 'complete'
            WHEN version > effective_version THEN 'awaiting_option'
            WHEN version < effective_version OR lower = 0 THEN 'pending'
            ELSE 'in_progress' END;
        -- In float8: ids may span the whole bigint range.
        fraction_done := CASE
            WHEN NOT readable THEN NULL
            WHEN state = 'complete' THEN 1
            WHEN state = 'pending' OR lower = 0 OR max_id IS NULL THEN 0
            ELSE least(greatest((lower::float8 - min_id::float8)
                                / (max_id::float8 - min_id::float8 + 1), 0), 1) END;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW outbox.backfill_status AS
SELECT * FROM outbox._backfill_status();

------------------------------------------------------------------------------
-- Counters (shared memory: needs shared_preload_libraries)
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._stats()
RETURNS TABLE (category int, saved bigint, backfilled bigint, backfill_batches bigint,
               delivered bigint, processed bigint, handler_errors bigint, lag_p50 interval,
               lag_p99 interval, lag_max interval, last_delivery_at timestamptz,
               stats_reset timestamptz)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__stats';

CREATE OR REPLACE FUNCTION outbox._stats_untracked() RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__stats_untracked';

CREATE OR REPLACE FUNCTION outbox._stats_reset(keep int[]) RETURNS void STRICT
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__stats_reset';

-- Zeroes this database's counters, forgets categories no longer registered,
-- and zeroes the worker's totals.
CREATE OR REPLACE FUNCTION outbox.stats_reset() RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._stats_reset(ARRAY(SELECT c.id FROM outbox.categories c))
$$;

-- One row per category, registered or counted.  saved: outbox rows written
-- by capture; backfilled, backfill_batches: by backfill; delivered: messages
-- handed to handlers; processed: outbox rows deleted after delivery;
-- handler_errors: failed handler calls; lag: from an outbox row's
-- date_added to its message's delivery (p50 and p99 within 12.5%).
-- stats_reset: when counting began (first count, or the last reset).
CREATE OR REPLACE VIEW outbox.stats AS
SELECT coalesce(c.id, s.category) AS category, c.name AS category_name,
       coalesce(s.saved, 0) AS saved, coalesce(s.backfilled, 0) AS backfilled,
       coalesce(s.backfill_batches, 0) AS backfill_batches,
       coalesce(s.delivered, 0) AS delivered, coalesce(s.processed, 0) AS processed,
       coalesce(s.handler_errors, 0) AS handler_errors, s.lag_p50, s.lag_p99, s.lag_max,
       s.last_delivery_at, s.stats_reset
  FROM outbox.categories c
  FULL JOIN outbox._stats() s ON s.category = c.id
 ORDER BY 1;

------------------------------------------------------------------------------
-- The background worker
------------------------------------------------------------------------------
-- state: running, disabled (outbox.worker_enabled = off), stopped (not
-- running now: starting, restarting after a crash, or too few
-- max_worker_processes) or not_preloaded (no worker without
-- shared_preload_libraries).  Totals since the server started or the last
-- outbox.stats_reset(); last_error is the last failure the worker logged.
CREATE OR REPLACE FUNCTION outbox._worker_status(OUT state text, OUT pid int, OUT database text,
    OUT last_cycle_start timestamptz, OUT last_cycle_end timestamptz, OUT shards_drained bigint,
    OUT messages_delivered bigint, OUT rows_scheduled bigint, OUT rows_backfilled bigint,
    OUT backfill_budget_left bigint, OUT backfill_paused boolean, OUT last_error text,
    OUT last_error_at timestamptz)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__worker_status';

CREATE OR REPLACE VIEW outbox.worker_status AS
SELECT * FROM outbox._worker_status();

------------------------------------------------------------------------------
-- Prometheus
------------------------------------------------------------------------------
-- A label value in the text exposition format: quoted, with \, " and
-- newlines escaped.
CREATE OR REPLACE FUNCTION outbox._prometheus_label(value text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '"' || replace(replace(replace(coalesce(value, ''), E'\\', E'\\\\'), '"', E'\\"'),
                          E'\n', E'\\n') || '"'
$$;

-- The text exposition format (version 0.0.4) of pg_outbox's state: the
-- counters of outbox.stats (when preloaded), the depth of the
-- outbox.metrics_top_shards deepest shards, totals per silo, each table's
-- backfill cursor (Sentry's backfill_outboxes.low_bound) and the worker.
-- Reads what the views read: whoever may read the views may scrape.
CREATE OR REPLACE FUNCTION outbox.metrics() RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    worker outbox.worker_status;
    with_stats boolean;
BEGIN
    SELECT * INTO worker FROM outbox.worker_status;
    -- Without the preload there are no counters (outbox.stats raises an
    -- ERROR); the rest is still reported.  A false parameter here is a
    -- one-time filter: the stats scan is not run at all.
    with_stats := worker.state <> 'not_preloaded';
    RETURN coalesce((
    WITH depth AS MATERIALIZED (
            SELECT *, row_number() OVER () AS pos
              FROM outbox._shard_depth(current_setting('outbox.metrics_top_shards')::bigint, true)),
         totals AS (
            SELECT d.silo, d.depth AS rows, d.shards,
                   coalesce(extract(epoch FROM now() - d.oldest_date_added), 0) AS oldest,
                   d.attempts AS failing
              FROM depth d WHERE d.shard_identifier IS NULL),
         -- Every family, in the order of the output: name, type, help.
         families AS (
            SELECT i AS ord, a.f[i][1] AS family, a.f[i][2] AS type, a.f[i][3] AS help
              FROM (SELECT ARRAY[
                ['pg_outbox_rows_saved_total', 'counter', 'Outbox rows written by capture.'],
                ['pg_outbox_rows_backfilled_total', 'counter', 'Outbox rows written by backfill.'],
                ['pg_outbox_backfill_batches_total', 'counter', 'Backfill batches committed.'],
                ['pg_outbox_messages_delivered_total', 'counter', 'Messages handed to handlers.'],
                ['pg_outbox_rows_processed_total', 'counter', 'Outbox rows deleted after delivery.'],
                ['pg_outbox_handler_errors_total', 'counter', 'Handler calls that failed.'],
                ['pg_outbox_delivery_lag_seconds', 'gauge',
                 'Delivery lag (outbox row added to delivery) since the last reset.'],
                ['pg_outbox_last_delivery_timestamp_seconds', 'gauge',
                 'When a message of the category was last delivered.'],
                ['pg_outbox_stats_untracked_total', 'counter',
                 'Counts dropped because every statistics slot was taken.'],
                ['pg_outbox_shard_depth', 'gauge',
                 'Outbox rows of the deepest shards (outbox.metrics_top_shards of them).'],
                ['pg_outbox_depth', 'gauge', 'Outbox rows waiting, all shards.'],
                ['pg_outbox_shards', 'gauge', 'Shards with rows waiting.'],
                ['pg_outbox_oldest_age_seconds', 'gauge', 'Age of the oldest waiting outbox row.'],
                ['pg_outbox_shards_failing', 'gauge', 'Shards backed off after a handler error.'],
                ['pg_outbox_backfill_low_bound', 'gauge',
                 'Backfill cursor lower bound (Sentry''s backfill_outboxes.low_bound).'],
                ['pg_outbox_backfill_version', 'gauge', 'Backfill cursor version.'],
                ['pg_outbox_backfill_fraction_done', 'gauge', 'Share of the table''s ids backfilled.'],
                ['pg_outbox_backfill_state', 'gauge', 'Backfill state (1 for the current one).'],
                ['pg_outbox_cascade_low_bound', 'gauge',
                 'Cascade watermark (Sentry''s low_bound), per reference and walk.'],
                ['pg_outbox_cascade_watermark_delta', 'gauge',
                 'Ids the cascade walk has yet to cover, per reference and walk.'],
                ['pg_outbox_cascade_processing_lag_seconds', 'gauge',
                 'Age of the oldest tombstone the cascade has yet to process (Sentry''s processing_lag).'],
                ['pg_outbox_cascade_pending_tombstones', 'gauge',
                 'Tombstones above the cascade''s tombstone watermark.'],
                ['pg_outbox_worker_up', 'gauge', 'Whether the background worker is running.'],
                ['pg_outbox_worker_last_cycle_end_timestamp_seconds', 'gauge',
                 'When the worker last finished a cycle.'],
                ['pg_outbox_worker_shards_drained_total', 'counter', 'Shards the worker drained.'],
                ['pg_outbox_worker_rows_scheduled_total', 'counter',
                 'Outbox rows of the shards the worker drained.'],
                ['pg_outbox_worker_rows_backfilled_total', 'counter', 'Ids the worker backfilled.'],
                ['pg_outbox_worker_backfill_budget_left', 'gauge',
                 'Backfill budget left in the current minute.'],
                ['pg_outbox_worker_backfill_paused', 'gauge',
                 'Whether the backfill is paused by a cursor store failure.']]) AS a(f),
                   generate_subscripts(a.f, 1) AS i),
         -- pos orders samples within a family (then their labels).
         samples(family, labels, value, pos) AS (
            SELECT m.family,
                   format('category=%s,category_name=%s',
                          outbox._prometheus_label(s.category::text),
                          outbox._prometheus_label(s.category_name)) || m.labels,
                   m.value, s.category::bigint
              FROM outbox.stats s
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_rows_saved_total', '', s.saved::text),
                ('pg_outbox_rows_backfilled_total', '', s.backfilled::text),
                ('pg_outbox_backfill_batches_total', '', s.backfill_batches::text),
                ('pg_outbox_messages_delivered_total', '', s.delivered::text),
                ('pg_outbox_rows_processed_total', '', s.processed::text),
                ('pg_outbox_handler_errors_total', '', s.handler_errors::text),
                ('pg_outbox_delivery_lag_seconds', ',quantile="0.5"',
                 extract(epoch FROM s.lag_p50)::text),
                ('pg_outbox_delivery_lag_seconds', ',quantile="0.99"',
                 extract(epoch FROM s.lag_p99)::text),
                ('pg_outbox_delivery_lag_seconds', ',quantile="1"',
                 extract(epoch FROM s.lag_max)::text),
                ('pg_outbox_last_delivery_timestamp_seconds', '',
                 extract(epoch FROM s.last_delivery_at)::text)
             ) AS m(family, labels, value)
             WHERE with_stats
            UNION ALL
            SELECT 'pg_outbox_stats_untracked_total', '', outbox._stats_untracked()::text, 0::bigint
             WHERE with_stats
            UNION ALL
            SELECT 'pg_outbox_shard_depth',
                   format('silo=%s,shard_scope=%s,shard_identifier=%s,cell_name=%s',
                          outbox._prometheus_label(d.silo),
                          outbox._prometheus_label(d.shard_scope::text),
                          outbox._prometheus_label(d.shard_identifier::text),
                          outbox._prometheus_label(d.cell_name)),
                   d.depth::text, d.pos
              FROM depth d WHERE d.shard_identifier IS NOT NULL
            UNION ALL
            SELECT v.family, 'silo=' || outbox._prometheus_label(t.silo), v.value, 0::bigint
              FROM totals t
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_depth', t.rows::text),
                ('pg_outbox_shards', t.shards::text),
                ('pg_outbox_oldest_age_seconds', t.oldest::text),
                ('pg_outbox_shards_failing', t.failing::text)
             ) AS v(family, value)
            UNION ALL
            SELECT v.family, 'table_key=' || outbox._prometheus_label(b.table_key) || v.labels,
                   v.value, 0::bigint
              FROM outbox.backfill_status b
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_backfill_low_bound', '', b.cursor_lower_bound::text),
                ('pg_outbox_backfill_version', '', b.cursor_version::text),
                ('pg_outbox_backfill_fraction_done', '', b.fraction_done::text),
                ('pg_outbox_backfill_state', ',state=' || outbox._prometheus_label(b.state), '1')
             ) AS v(family, labels, value)
            UNION ALL
            SELECT v.family,
                   format('table_key=%s,column=%s', outbox._prometheus_label(k.table_key),
                          outbox._prometheus_label(k.column_name)) || v.labels,
                   v.value, 0::bigint
              FROM outbox.foreign_keys k
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_cascade_low_bound', ',watermark="row"', k.row_watermark::text),
                ('pg_outbox_cascade_low_bound', ',watermark="tombstone"',
                 k.tombstone_watermark::text),
                ('pg_outbox_cascade_watermark_delta', ',watermark="row"', k.row_delta::text),
                ('pg_outbox_cascade_watermark_delta', ',watermark="tombstone"',
                 k.tombstone_delta::text),
                ('pg_outbox_cascade_processing_lag_seconds', '',
                 extract(epoch FROM k.processing_lag)::text),
                ('pg_outbox_cascade_pending_tombstones', '', k.pending_tombstones::text)
             ) AS v(family, labels, value)
            UNION ALL
            SELECT v.family, '', v.value, 0::bigint
              FROM (VALUES
                ('pg_outbox_worker_up', (worker.state = 'running')::int::text),
                ('pg_outbox_worker_last_cycle_end_timestamp_seconds',
                 extract(epoch FROM worker.last_cycle_end)::text),
                ('pg_outbox_worker_shards_drained_total', worker.shards_drained::text),
                ('pg_outbox_worker_rows_scheduled_total', worker.rows_scheduled::text),
                ('pg_outbox_worker_rows_backfilled_total', worker.rows_backfilled::text),
                ('pg_outbox_worker_backfill_budget_left', worker.backfill_budget_left::text),
                ('pg_outbox_worker_backfill_paused', worker.backfill_paused::int::text)
             ) AS v(family, value))
    SELECT string_agg(b.block, '' ORDER BY b.ord)
      FROM (SELECT f.ord,
                   format(E'# HELP %s %s\n# TYPE %s %s\n', f.family, f.help, f.family, f.type)
                   || string_agg(m.family || CASE WHEN m.labels = '' THEN ''
                                 ELSE '{' || m.labels || '}' END || ' ' || m.value || E'\n', ''
                                 ORDER BY m.pos, m.labels) AS block
              FROM families f JOIN samples m ON m.family = f.family
             WHERE m.value IS NOT NULL
             GROUP BY f.ord, f.family, f.type, f.help) b), '');
END
$$;
------------------------------------------------------------------------------
-- Category grants
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._category_id(category text) RETURNS int
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_id int;
BEGIN
    PERFORM outbox._require(category, 'category');
    SELECT c.id INTO found_id FROM outbox.categories c WHERE c.name = _category_id.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object',
                  HINT = 'Register it with outbox.register_category().';
    END IF;
    RETURN found_id;
END
$$;

CREATE OR REPLACE FUNCTION outbox._check_privilege_name(privilege text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(privilege, 'privilege');
    IF upper(privilege) NOT IN ('REGISTER', 'CONSUME') THEN
        RAISE EXCEPTION 'privilege must be ''REGISTER'' or ''CONSUME'', not %',
            quote_literal(privilege) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN upper(privilege);
END
$$;

CREATE OR REPLACE FUNCTION outbox.grant_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    INSERT INTO outbox.category_grants AS g (category, role, privilege)
    VALUES (category_id, role, privilege) ON CONFLICT DO NOTHING;
END
$$;

-- Revoking REGISTER is refused while the role (or a member that holds it
-- through the role alone) owns tables registered under the category:
-- registrations must keep the grant they were made with.
CREATE OR REPLACE FUNCTION outbox.revoke_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
    still_registered text;
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    IF privilege = 'REGISTER' THEN
        SELECT string_agg(r.relid::text, ', ' ORDER BY r.table_key) INTO still_registered
          FROM outbox.registered_tables r
          JOIN pg_class c ON c.oid = r.relid
          JOIN pg_roles o ON o.oid = c.relowner
         WHERE r.category = category_id AND NOT o.rolsuper
           AND pg_has_role(c.relowner, role, 'USAGE')
           AND NOT EXISTS (SELECT FROM outbox.category_grants g
                            WHERE g.category = category_id AND g.privilege = 'REGISTER'
                              AND g.role <> revoke_category.role
                              AND pg_has_role(c.relowner, g.role, 'USAGE'));
        IF still_registered IS NOT NULL THEN
            RAISE EXCEPTION 'role % owns tables registered under category %: %', role,
                quote_literal(category), still_registered
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'Unregister them with outbox.unregister_table() first.';
        END IF;
    END IF;
    DELETE FROM outbox.category_grants g
     WHERE g.category = category_id AND g.role = revoke_category.role
       AND g.privilege = revoke_category.privilege;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % holds no % privilege on category %', role, privilege,
            quote_literal(category) USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- Whether caller may register tbl under category (NULL: tbl's registered
-- category).  Called by the C gate of register_table, unregister_table and
-- set_replication_version for callers that are not superusers.  An unknown
-- category or table is left to the body to report.
CREATE OR REPLACE FUNCTION outbox._check_register_privilege(caller oid, tbl regclass, category text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cat record;
BEGIN
    IF category IS NULL THEN
        SELECT c.id, c.name INTO cat
          FROM outbox.registered_tables r JOIN outbox.categories c ON c.id = r.category
         WHERE r.relid = tbl;
    ELSE
        SELECT c.id, c.name INTO cat FROM outbox.categories c
         WHERE c.name = _check_register_privilege.category;
    END IF;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.category_grants g
                    WHERE g.category = cat.id AND g.privilege = 'REGISTER'
                      AND pg_has_role(caller, g.role, 'USAGE')) THEN
        RAISE EXCEPTION 'role % may not register tables under category %', caller::regrole,
            quote_literal(cat.name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('The extension owner grants it: SELECT outbox.grant_category(%L, %L);',
                                cat.name, caller::regrole);
    END IF;
END
$$;
------------------------------------------------------------------------------
-- Privileges
------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
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

-- Every object keeps its own privileges; the schema itself gives nothing.
-- The table functions check the caller in C: it must own the table and,
-- to register it, hold REGISTER on its category (outbox.grant_category).
GRANT USAGE ON SCHEMA outbox TO PUBLIC;
-- PostgreSQL clones the capture row trigger onto every new partition as the
-- role that creates or attaches it, and checks that role may execute it.
-- Called as anything but a trigger, it raises an error.
GRANT EXECUTE ON FUNCTION outbox.capture_row() TO PUBLIC;
GRANT EXECUTE ON FUNCTION
    outbox.register_table(regclass, text, text, name, name[], name, int, text),
    outbox.unregister_table(regclass),
    outbox.set_replication_version(regclass, int),
    outbox.register_foreign_key(regclass, name, text, text),
    outbox.unregister_foreign_key(regclass, name) TO PUBLIC;

-- pg_monitor reads; it cannot reset, drain, open gates or change anything.
GRANT USAGE ON SCHEMA outbox TO pg_monitor;
GRANT SELECT ON outbox.shard_depth, outbox.backfill_status, outbox.stats, outbox.worker_status,
    outbox.foreign_keys TO pg_monitor;
GRANT EXECUTE ON FUNCTION outbox._shard_depth(bigint, boolean), outbox._backfill_status(), outbox._stats(),
    outbox._stats_untracked(), outbox._worker_status(), outbox._prometheus_label(text),
    outbox.metrics(), outbox._foreign_keys() TO pg_monitor;
