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
    scope_id := outbox._scope_id(scope);
    PERFORM outbox._check_id(id, 'id');
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
    IF EXISTS (SELECT FROM outbox.organization_cells o WHERE o.cell = unregister_cell.name) THEN
        RAISE EXCEPTION 'cell % still holds organizations (%)', quote_literal(name),
            (SELECT count(*) FROM outbox.organization_cells o WHERE o.cell = unregister_cell.name)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'outbox.organization_cells lists them.';
    END IF;
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
-- table; these include the relation itself in every case.  ROWS: the
-- default estimate (1000 rows) made the move's catalog queries cost enough
-- for JIT to compile them, 300 ms a call (a move's steps ran 4x slower).
CREATE OR REPLACE FUNCTION outbox._partition_tree(tbl regclass)
RETURNS TABLE (relid regclass, isleaf boolean)
LANGUAGE sql STABLE ROWS 4
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

-- The DDL of pg_outbox's triggers on tbl (kind: a trigger's name, or
-- drop_trigger or lock), names quoted in C++ (src/registry/trigger_statements.cpp).
CREATE OR REPLACE FUNCTION outbox._trigger_statement(kind text, tbl regclass,
    arguments text[] DEFAULT '{}') RETURNS text
    LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox__trigger_statement';

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
    trigger_name text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = tbl AND g.tgname = 'outbox_capture_apply') THEN
        EXECUTE outbox._trigger_statement('outbox_capture_apply', tbl);
    END IF;
    FOR node IN SELECT t.relid, t.isleaf FROM outbox._partition_tree(tbl) t LOOP
        FOREACH trigger_name IN ARRAY ARRAY['outbox_capture_insert', 'outbox_capture_update',
                                            'outbox_capture_delete', 'outbox_capture_truncate'] LOOP
            CONTINUE WHEN trigger_name = 'outbox_capture_truncate' AND NOT node.isleaf;
            -- Checked per trigger: the DDL event trigger may have made it meanwhile.
            CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g
                                   WHERE g.tgrelid = node.relid AND g.tgname = trigger_name);
            EXECUTE outbox._trigger_statement(trigger_name, node.relid);
        END LOOP;
    END LOOP;
END
$$;

-- Registration also checks what the DDL guard keeps true.
CREATE OR REPLACE FUNCTION outbox._register_table(tbl regclass, category text, silo text,
    shard_column name, payload_columns name[], cell_column name, replication_version int,
    table_key text, relocation_scope text) RETURNS void
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
    -- One scope here; a set, decided per row, needs set_relocation_scope's
    -- scope_function.
    IF relocation_scope IS NOT NULL THEN
        PERFORM outbox._set_relocation_scope(tbl, ARRAY[relocation_scope], NULL, NULL);
    END IF;
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
    table_key text DEFAULT NULL,
    relocation_scope text DEFAULT NULL) RETURNS void
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
