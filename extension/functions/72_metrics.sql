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

-- Every family of metrics(), in the order of the output: name, type, help.
CREATE OR REPLACE FUNCTION outbox._metric_families()
RETURNS TABLE (ord int, family text, type text, help text)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
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
         'Organizations outbox.organization_cells places in each cell.'],
        ['pg_outbox_resync_jobs', 'gauge', 'Targeted re-sync jobs in each state.'],
        ['pg_outbox_resync_rows_left', 'gauge',
         'Rows a running, paused or failed re-sync job has still to send.'],
        ['pg_outbox_resync_throttled', 'gauge',
         'Whether a re-sync job''s last batch waited for a shard at the guard''s bound.']]) AS a(f),
           generate_subscripts(a.f, 1) AS i
$$;

-- The samples of metrics(), one function per subject, each row a family,
-- its labels, its value and pos, which orders samples within a family
-- (then their labels).

-- Counters of outbox.stats: only with the preload (without it the view
-- raises an ERROR; with_stats false skips the scan altogether).
CREATE OR REPLACE FUNCTION outbox._metrics_stats(with_stats boolean)
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- The outboxes: the outbox.metrics_top_shards deepest shards, totals per
-- silo, paused and claimed shards, dead letters.
CREATE OR REPLACE FUNCTION outbox._metrics_depth()
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH depth AS MATERIALIZED (
            SELECT *, row_number() OVER () AS pos
              FROM outbox._shard_depth(current_setting('outbox.metrics_top_shards')::bigint, true)),
         totals AS (
            SELECT d.silo, d.depth AS rows, d.shards,
                   coalesce(extract(epoch FROM now() - d.oldest_date_added), 0) AS oldest,
                   d.attempts AS failing
              FROM depth d WHERE d.shard_identifier IS NULL)
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
     ) AS v(family, value)
$$;

-- Each table's backfill cursor (Sentry's backfill_outboxes.low_bound) and
-- each cross-silo reference's cascade watermarks.
CREATE OR REPLACE FUNCTION outbox._metrics_backfill_and_cascade()
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- The worker (outbox.worker_status, read once by metrics()), the tables
-- whose jobs back off, the tombstone checks waiting.
CREATE OR REPLACE FUNCTION outbox._metrics_worker(worker outbox.worker_status)
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- The links to other clusters.
CREATE OR REPLACE FUNCTION outbox._metrics_links()
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.family, 'destination=' || outbox._prometheus_label(l.destination), v.value,
           0::bigint
      FROM outbox.link_status l
     CROSS JOIN LATERAL (VALUES
        ('pg_outbox_link_messages_sent_total', l.messages_sent::text),
        ('pg_outbox_link_recovered_total', l.recovered::text),
        ('pg_outbox_link_failures', l.failures::text),
        ('pg_outbox_link_unrecognised_batches', l.unrecognised::text)
     ) AS v(family, value)
$$;

-- Relocation: the model check's findings, relocations and moves by state,
-- an unfinished one's rows, a move's write pause and lag, where the
-- organizations live.
CREATE OR REPLACE FUNCTION outbox._metrics_relocation()
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
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
      FROM outbox.organization_cells o GROUP BY o.cell
$$;

CREATE OR REPLACE FUNCTION outbox._metrics_resync()
RETURNS TABLE (family text, labels text, value text, pos bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'pg_outbox_resync_jobs', 'state=' || outbox._prometheus_label(k.state),
           (SELECT count(*) FROM outbox.resyncs r WHERE r.state = k.state)::text, k.pos
      FROM unnest(ARRAY['running', 'paused', 'failed', 'done', 'cancelled'])
           WITH ORDINALITY AS k(state, pos)
    UNION ALL
    SELECT v.family, 'job=' || outbox._prometheus_label(r.job::text), v.value, 0::bigint
      FROM outbox.resyncs r
     CROSS JOIN LATERAL (VALUES ('pg_outbox_resync_rows_left', r.rows_left::text),
                                ('pg_outbox_resync_throttled', r.throttled::int::text))
           AS v(family, value)
     WHERE r.state IN ('running', 'paused', 'failed')
$$;

-- The text exposition format (version 0.0.4) of pg_outbox's state, from
-- the subjects above.  Reads what the views read: whoever may read the
-- views may scrape.
CREATE OR REPLACE FUNCTION outbox.metrics() RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    worker outbox.worker_status;
BEGIN
    SELECT * INTO worker FROM outbox.worker_status;
    RETURN coalesce((
    WITH samples AS (
            -- Without the preload there are no counters; the rest is still
            -- reported.
            SELECT * FROM outbox._metrics_stats(worker.state <> 'not_preloaded')
            UNION ALL SELECT * FROM outbox._metrics_depth()
            UNION ALL SELECT * FROM outbox._metrics_backfill_and_cascade()
            UNION ALL SELECT * FROM outbox._metrics_worker(worker)
            UNION ALL SELECT * FROM outbox._metrics_links()
            UNION ALL SELECT * FROM outbox._metrics_relocation()
            UNION ALL SELECT * FROM outbox._metrics_resync())
    SELECT string_agg(b.block, '' ORDER BY b.ord)
      FROM (SELECT f.ord,
                   format(E'# HELP %s %s\n# TYPE %s %s\n', f.family, f.help, f.family, f.type)
                   || string_agg(m.family || CASE WHEN m.labels = '' THEN ''
                                 ELSE '{' || m.labels || '}' END || ' ' || m.value || E'\n', ''
                                 ORDER BY m.pos, m.labels) AS block
              FROM outbox._metric_families() f JOIN samples m ON m.family = f.family
             WHERE m.value IS NOT NULL
             GROUP BY f.ord, f.family, f.type, f.help) b), '');
END
$$;
