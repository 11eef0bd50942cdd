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

-- The view adds the shards that are paused or have dead letters but no
-- rows (depth 0), and for each shard: its state (due, backed_off, paused,
-- claimed by a consumer under a live lease, or empty), the failing message (what outbox.skip_message takes) and its
-- dead letters; claimed_by and claimed_until: the role holding a claimed
-- shard and the end of its lease.  attempts counts the failing message's
-- failures in a row.
-- Written so that the shards' rows stream in the function's order (deepest
-- first) through hashed lookups of the small tables, then come the shards
-- without rows: a join on the shards would sort them (a million one-row
-- shards: a second more).
CREATE OR REPLACE VIEW outbox.shard_depth AS
WITH d AS MATERIALIZED (SELECT *, coalesce(d.cell_name, '') AS cell_key
                          FROM outbox._shard_depth(NULL, false) d),
     x AS (SELECT p.silo, p.shard_scope, p.shard_identifier, p.cell_name AS cell_key
             FROM outbox.paused_shards p
           UNION
           SELECT l.silo, l.shard_scope, l.shard_identifier, coalesce(l.cell_name, '')
             FROM outbox.dead_letters l),
     s AS (SELECT * FROM d
           UNION ALL
           SELECT x.silo, x.shard_scope, x.shard_identifier, nullif(x.cell_key, ''), 0, NULL, NULL,
                  NULL, NULL, NULL, NULL, x.cell_key
             FROM x LEFT JOIN d USING (silo, shard_scope, shard_identifier, cell_key)
            WHERE d.depth IS NULL)
SELECT s.silo, s.shard_scope, s.shard_identifier, s.cell_name, s.depth, s.oldest_date_added,
       s.next_scheduled_for, s.last_error, s.last_error_at, s.attempts,
       CASE WHEN (s.silo, s.shard_scope, s.shard_identifier, s.cell_key)
                 IN (SELECT p.silo, p.shard_scope, p.shard_identifier, p.cell_name
                       FROM outbox.paused_shards p) THEN 'paused'
            WHEN (s.silo, s.shard_scope, s.shard_identifier, s.cell_key)
                 IN (SELECT c.silo, c.shard_scope, c.shard_identifier, c.cell_name
                       FROM outbox.consumer_claims c WHERE c.lease_until > now()) THEN 'claimed'
            WHEN s.depth = 0 THEN 'empty'
            WHEN s.next_scheduled_for > now() THEN 'backed_off'
            ELSE 'due' END AS state,
       e.category, e.object_identifier,
       CASE WHEN (s.silo, s.shard_scope, s.shard_identifier, s.cell_key)
                 IN (SELECT l.silo, l.shard_scope, l.shard_identifier, coalesce(l.cell_name, '')
                       FROM outbox.dead_letters l)
            THEN (SELECT count(*) FROM outbox.dead_letters l
                   WHERE (l.silo, l.shard_scope, l.shard_identifier, coalesce(l.cell_name, ''))
                       = (s.silo, s.shard_scope, s.shard_identifier, s.cell_key))
            ELSE 0 END AS dead_letters,
       h.consumer AS claimed_by, h.lease_until AS claimed_until
  FROM s
  -- The consumer holding the shard under a live lease (by the unique key).
  LEFT JOIN LATERAL (SELECT c.consumer, c.lease_until FROM outbox.consumer_claims c
                      WHERE (c.silo, c.shard_scope, c.shard_identifier, c.cell_name)
                          = (s.silo, s.shard_scope, s.shard_identifier, s.cell_key)
                        AND c.lease_until > now()) h ON true
  -- Only failing shards look their error up (by its primary key).
  LEFT JOIN LATERAL (SELECT e.category, e.object_identifier FROM outbox.shard_errors e
                      WHERE s.attempts > 0
                        AND (e.silo, e.shard_scope, e.shard_identifier, e.cell_name)
                          = (s.silo, s.shard_scope, s.shard_identifier, s.cell_key)) e ON true;

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

-- Tables whose backfill the worker holds back: a shard they write to holds
-- outbox.backfill_max_shard_depth rows (src/worker/worker.cpp).
CREATE OR REPLACE FUNCTION outbox._backfill_throttled() RETURNS oid[]
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__backfill_throttled';

-- Tables whose backfill or cascade (job) the worker holds back after a
-- failure, until its pause ends (src/worker/worker.cpp).
CREATE OR REPLACE FUNCTION outbox._tables_failing(job text) RETURNS oid[]
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__tables_failing';

CREATE OR REPLACE FUNCTION outbox._backfill_status()
RETURNS TABLE (table_key text, relation regclass, silo text, coded_version int,
               option_version int, effective_version int, cursor_lower_bound bigint,
               cursor_version int, max_id bigint, fraction_done float8, state text,
               eta_at_budget interval)
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
    throttled oid[] := outbox._backfill_throttled();
    failing oid[] := outbox._tables_failing('backfill');
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
        -- The ids left, at the whole budget: one batch a minute spanning
        -- the budget plus one id (as outbox.plan_backfill counts).
        eta_at_budget := CASE
            WHEN state NOT IN ('pending', 'in_progress') THEN NULL
            WHEN max_id IS NULL THEN interval '0'
            ELSE ceil(greatest(max_id::float8 + 1 - CASE WHEN state = 'pending' OR lower = 0
                                                    THEN min_id::float8 ELSE lower::float8 END, 0)
                      / (current_setting('outbox.backfill_rate_per_minute')::float8 + 1))
                 * interval '1 minute' END;
        -- Waiting for a hot shard to drain (outbox.backfill_max_shard_depth).
        IF state IN ('pending', 'in_progress') AND r.relid::oid = ANY (throttled) THEN
            state := 'throttled';
        END IF;
        -- Its last batch failed (worker_status.last_error says why); retried
        -- when its pause ends, while the other tables go on.
        IF state IN ('pending', 'in_progress', 'throttled') AND r.relid::oid = ANY (failing) THEN
            state := 'failing';
        END IF;
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
-- outbox.stats_reset(); last_error is the last failure the worker logged;
-- backfill_max_shard_depth is the hot-shard guard the worker applies now
-- (it reads a reload before each backfill step, so a gate may be opened
-- right after the reload).
CREATE OR REPLACE FUNCTION outbox._worker_status(OUT state text, OUT pid int, OUT database text,
    OUT last_cycle_start timestamptz, OUT last_cycle_end timestamptz, OUT shards_drained bigint,
    OUT messages_delivered bigint, OUT rows_scheduled bigint, OUT rows_backfilled bigint,
    OUT backfill_budget_left bigint, OUT backfill_paused boolean,
    OUT backfill_max_shard_depth int, OUT last_error text,
    OUT last_error_at timestamptz)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__worker_status';

CREATE OR REPLACE VIEW outbox.worker_status AS
SELECT * FROM outbox._worker_status();
