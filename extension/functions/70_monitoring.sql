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
                ['pg_outbox_shards_paused', 'gauge', 'Shards paused by outbox.pause_shard.'],
                ['pg_outbox_shards_claimed', 'gauge',
                 'Shards a consumer holds under a live lease (outbox.claim).'],
                ['pg_outbox_dead_letters', 'gauge', 'Rows in outbox.dead_letters.'],
                ['pg_outbox_dead_letter_oldest_age_seconds', 'gauge',
                 'Age of the oldest dead letter (since it was moved there).'],
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
                 'Whether the backfill is paused by a cursor store failure.'],
                ['pg_outbox_tables_failing', 'gauge',
                 'Tables whose backfill or cascade failed and backs off.'],
                ['pg_outbox_tombstone_checks_waiting', 'gauge',
                 'Objects whose tombstone check failed and waits to be tried again.'],
                ['pg_outbox_link_messages_sent_total', 'counter',
                 'Messages a link handed over to its destination.'],
                ['pg_outbox_link_recovered_total', 'counter',
                 'Messages the destination had taken when the answer was lost, found by recovery.'],
                ['pg_outbox_link_failures', 'gauge',
                 'Failed rounds in a row of a link (0: it works); link_status.last_error says why.'],
                ['pg_outbox_link_unrecognised_batches', 'gauge',
                 'Batches the destination holds whose receipt no key of this side recognises (outbox.link_unrecognised).'],
                ['pg_outbox_model_findings', 'gauge',
                 'Findings of outbox.check_models() (relocation scopes), by kind.'],
                ['pg_outbox_relocations', 'gauge',
                 'Relocations imported here and moves driven from here, by state.'],
                ['pg_outbox_move_write_pause_seconds', 'gauge',
                 'How long a move of an organization has kept its writes paused (so far, or in all).'],
                ['pg_outbox_move_lag', 'gauge',
                 'Changes in the source of an unfinished move that its catch-up has still to apply.'],
                ['pg_outbox_relocation_rows_done', 'gauge',
                 'Rows an unfinished relocation has imported (not complete, not cancelled).'],
                ['pg_outbox_relocation_rows_total', 'gauge',
                 'Rows of an unfinished relocation''s export.'],
                ['pg_outbox_organizations', 'gauge',
                 'Organizations outbox.organization_cells places in each cell.']]) AS a(f),
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
            SELECT v.family, 'silo=' || outbox._prometheus_label(k.silo), v.value, 0::bigint
              FROM (VALUES ('cell'), ('control')) AS k(silo)
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_shards_paused',
                 (SELECT count(*) FROM outbox.paused_shards p WHERE p.silo = k.silo)::text),
                ('pg_outbox_shards_claimed',
                 (SELECT count(*) FROM outbox.consumer_claims c
                   WHERE c.silo = k.silo AND c.lease_until > now())::text),
                ('pg_outbox_dead_letters',
                 (SELECT count(*) FROM outbox.dead_letters l WHERE l.silo = k.silo)::text),
                ('pg_outbox_dead_letter_oldest_age_seconds',
                 (SELECT coalesce(extract(epoch FROM now() - min(l.dead_at)), 0)
                    FROM outbox.dead_letters l WHERE l.silo = k.silo)::text)
             ) AS v(family, value)            UNION ALL
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
                ('pg_outbox_worker_backfill_paused', worker.backfill_paused::int::text),
                ('pg_outbox_tombstone_checks_waiting',
                 (SELECT count(*) FROM outbox.tombstone_checks)::text)
             ) AS v(family, value)
            UNION ALL
            SELECT 'pg_outbox_tables_failing', 'job=' || outbox._prometheus_label(j.job),
                   coalesce(cardinality(outbox._tables_failing(j.job)), 0)::text, 0::bigint
              FROM (VALUES ('backfill'), ('cascade')) AS j(job)
            UNION ALL
            SELECT v.family, 'destination=' || outbox._prometheus_label(l.destination), v.value,
                   0::bigint
              FROM outbox.link_status l
             CROSS JOIN LATERAL (VALUES
                ('pg_outbox_link_messages_sent_total', l.messages_sent::text),
                ('pg_outbox_link_recovered_total', l.recovered::text),
                ('pg_outbox_link_failures', l.failures::text),
                ('pg_outbox_link_unrecognised_batches', l.unrecognised::text)
             ) AS v(family, value)
            UNION ALL
            SELECT 'pg_outbox_model_findings', 'finding=' || outbox._prometheus_label(k.finding),
                   coalesce(c.n, 0)::text, k.pos
              FROM unnest(ARRAY['no_scope', 'excluded_in_set', 'set_without_function', 'no_root',
                                'dangling', 'nullable_path_only', 'unbreakable_cycle',
                                'bad_primary_key', 'forced_row_security',
                                'unregistered_cross_silo']) WITH ORDINALITY AS k(finding, pos)
              -- The model check once a scrape, not once a kind.
              LEFT JOIN (SELECT m.finding, count(*) AS n FROM outbox.check_models() m
                          GROUP BY m.finding) c ON c.finding = k.finding
            UNION ALL
            SELECT 'pg_outbox_relocations', 'state=' || outbox._prometheus_label(k.state),
                   (SELECT count(*) FROM outbox.relocations r WHERE r.state = k.state)::text, k.pos
              FROM unnest(ARRAY['importing', 'moving', 'paused', 'failed', 'imported',
                                'mismatched', 'complete', 'cancelled'])
                   WITH ORDINALITY AS k(state, pos)
            UNION ALL
            SELECT v.family,
                   format('relocation=%s,state=%s', outbox._prometheus_label(r.relocation::text),
                          outbox._prometheus_label(r.state)),
                   v.value, 0::bigint
              FROM outbox.relocations r
             CROSS JOIN LATERAL (VALUES ('pg_outbox_relocation_rows_done', r.rows_done::text),
                                        ('pg_outbox_relocation_rows_total', r.rows_total::text))
                   AS v(family, value)
             WHERE r.state NOT IN ('complete', 'cancelled')
            UNION ALL
            SELECT v.family, 'relocation=' || outbox._prometheus_label(r.relocation::text),
                   v.value, 0::bigint
              FROM outbox.relocations r
             CROSS JOIN LATERAL (VALUES
                       ('pg_outbox_move_write_pause_seconds',
                        extract(epoch FROM r.write_pause)::numeric(20, 3)::text),
                       ('pg_outbox_move_lag', r.lag::text)) AS v(family, value)
             WHERE v.value IS NOT NULL
               AND (r.state NOT IN ('complete', 'cancelled')
                    OR v.family = 'pg_outbox_move_write_pause_seconds')
            UNION ALL
            SELECT 'pg_outbox_organizations', 'cell=' || outbox._prometheus_label(o.cell),
                   count(*)::text, 0::bigint
              FROM outbox.organization_cells o GROUP BY o.cell)
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
