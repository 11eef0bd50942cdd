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
-- Deletes a cursor at commit (a re-sync job's, when the job is cancelled).
CREATE OR REPLACE FUNCTION outbox._cursor_forget(table_key text) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__cursor_forget';

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

-- What a backfill of tbl would write, before its gate opens: outbox rows
-- (control tables: for each target cell), shards, the ten hottest shards,
-- the id span, the batches and time at outbox.backfill_rate_per_minute, and
-- the deepest a shard gets without and with outbox.backfill_max_shard_depth,
-- and the time at the rate the worker's batches have run at (NULL before
-- the worker has run any).
-- Exact, or estimated from sample_percent of the table's pages.  Reads the
-- table as its owner (src/backfill/backfill_plan.cpp).
CREATE OR REPLACE FUNCTION outbox.plan_backfill(tbl regclass, sample_percent float8 DEFAULT NULL,
    OUT method text, OUT rows bigint, OUT shards bigint, OUT hottest_shards jsonb,
    OUT id_span bigint, OUT batches bigint, OUT eta_at_budget interval,
    OUT peak_shard_depth bigint, OUT peak_shard_depth_guarded bigint,
    OUT eta_at_worker_rate interval)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_plan_backfill';
