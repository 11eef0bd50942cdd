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
    SELECT c.relname, n.nspname, c.relkind, c.relispartition, c.relpersistence INTO rel
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
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
    -- The watermark keys' table part: unique per table.  A table outside
    -- public is named with its schema (own.monitor and public.monitor must
    -- not share a walk); Sentry's keys stay for public tables.
    child_key := coalesce((SELECT r.table_key FROM outbox.registered_tables r WHERE r.relid = tbl),
                          CASE WHEN rel.nspname = 'public' THEN rel.relname::text
                               ELSE rel.nspname || '.' || rel.relname END);
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
-- watermark), idle (caught up), failing (its last step failed: the worker
-- retries it when its pause ends) or watermark_unavailable (the cursor store
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
                      WHEN f.relid::oid = ANY (outbox._tables_failing('cascade')) THEN 'failing'
                      WHEN pending_tombstones > 0 THEN 'pending' ELSE 'idle' END;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW outbox.foreign_keys AS
SELECT * FROM outbox._foreign_keys();
