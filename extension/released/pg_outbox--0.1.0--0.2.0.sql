-- pg_outbox 0.2.0: backfill cursors (Redis or table), version-gated ID-range
-- backfill, the budgeted walk over all tables and the synchronous path.
\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.2.0'" to load this file. \quit

-- Cursors when outbox.cursor_store = table: under PostgreSQL's access control
-- and moved in the batch's own transaction.
CREATE TABLE outbox.cursors (
    table_key   text   PRIMARY KEY,
    lower_bound bigint NOT NULL,
    version     int    NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.cursors', '');

-- What one batch did: Sentry's BackfillBatch (count is its id span) plus the
-- outbox rows actually written.
CREATE TYPE outbox.backfill_batch AS (
    low          bigint,
    up           bigint,
    version      int,
    has_more     boolean,
    count        bigint,
    rows_written bigint
);

CREATE FUNCTION outbox._check_table_key(table_key text) RETURNS void
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

CREATE FUNCTION outbox._cursor_get(table_key text, OUT lower_bound bigint, OUT version int)
    LANGUAGE c AS 'MODULE_PATHNAME', 'cursor_get';
CREATE FUNCTION outbox._cursor_set(table_key text, lower_bound bigint, version int) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'cursor_set';

-- The cursor of a registered table (a missing one is created as [0, 1]).
CREATE FUNCTION outbox.get_processing_state(table_key text)
RETURNS TABLE (lower_bound bigint, version int)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_table_key(table_key);
    RETURN QUERY SELECT * FROM outbox._cursor_get(table_key);
END
$$;

CREATE FUNCTION outbox.set_processing_state(table_key text, lower_bound bigint, version int)
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

CREATE FUNCTION outbox.process_backfill_batch(tbl regclass, batch_size int,
    force_synchronous boolean DEFAULT false) RETURNS outbox.backfill_batch
    LANGUAGE c AS 'MODULE_PATHNAME', 'process_backfill_batch';

-- Registered tables local to a silo mode, in a stable order.
CREATE FUNCTION outbox._local_tables(silo_mode text) RETURNS SETOF regclass
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.relid FROM outbox.registered_tables r
     WHERE silo_mode = 'monolith' OR r.silo = silo_mode
     ORDER BY r.table_key
$$;

-- Sentry's backfill_outboxes_for: one batch per local table from a budget of
-- max_batch_rate - scheduled_count rows; stops when the budget is spent
-- (never runs a batch of size <= 0, which would mark a table complete
-- without its rows).  True when anything was backfilled.
CREATE FUNCTION outbox.backfill_outboxes_for(silo_mode text DEFAULT NULL,
    scheduled_count int DEFAULT 0, max_batch_rate int DEFAULT 10000,
    force_synchronous boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    remaining bigint;
    backfilled bigint := 0;
    tbl regclass;
    batch outbox.backfill_batch;
BEGIN
    silo_mode := coalesce(silo_mode, current_setting('outbox.silo_mode'));
    IF silo_mode NOT IN ('monolith', 'cell', 'control') THEN
        RAISE EXCEPTION 'silo_mode must be monolith, cell or control, not %', quote_literal(silo_mode)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM outbox._require(scheduled_count, 'scheduled_count');
    PERFORM outbox._require(max_batch_rate, 'max_batch_rate');
    PERFORM outbox._require(force_synchronous, 'force_synchronous');
    IF scheduled_count < 0 THEN
        RAISE EXCEPTION 'scheduled_count must be zero or positive, not %', scheduled_count
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batch_rate <= 0 THEN
        RAISE EXCEPTION 'max_batch_rate must be positive, not %', max_batch_rate
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    remaining := max_batch_rate - scheduled_count;
    IF remaining <= 0 THEN
        RETURN false;
    END IF;
    FOR tbl IN SELECT * FROM outbox._local_tables(silo_mode) LOOP
        batch := outbox.process_backfill_batch(tbl, remaining::int, force_synchronous);
        CONTINUE WHEN batch IS NULL;
        remaining := remaining - batch.count;
        backfilled := backfilled + batch.count;
        EXIT WHEN remaining <= 0;
    END LOOP;
    RETURN backfilled > 0;
END
$$;

-- The self-hosted path (Sentry runs it on `sentry upgrade`): backfill every
-- local table to its coded version, options bypassed, 1000 ids at a time,
-- until nothing is left.  Returns the outbox rows written.
CREATE FUNCTION outbox.run_replications_sync() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    silo text := current_setting('outbox.silo_mode');
    written bigint := 0;
    remaining bigint;
    progressed boolean;
    tbl regclass;
    batch outbox.backfill_batch;
BEGIN
    LOOP
        -- backfill_outboxes_for(silo, max_batch_rate => 1000,
        -- force_synchronous => true), counting rows written as well.
        remaining := 1000;
        progressed := false;
        FOR tbl IN SELECT * FROM outbox._local_tables(silo) LOOP
            batch := outbox.process_backfill_batch(tbl, remaining::int, true);
            CONTINUE WHEN batch IS NULL;
            remaining := remaining - batch.count;
            written := written + batch.rows_written;
            progressed := progressed OR batch.count > 0;
            EXIT WHEN remaining <= 0;
        END LOOP;
        EXIT WHEN NOT progressed;
    END LOOP;
    RETURN written;
END
$$;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
               WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname <> '_in_logical_apply' LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
