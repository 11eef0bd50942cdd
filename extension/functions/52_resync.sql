------------------------------------------------------------------------------
-- Targeted re-sync (issue 49; docs/guide.md, "Sending rows again")
------------------------------------------------------------------------------
-- outbox.resync(tbl, ids), outbox.resync(tbl, low, up),
-- outbox.resync_shard(tbl, shard_scope, shard_identifier) and
-- outbox.resync_organization(organization): a job that writes an outbox
-- row, as a backfill batch does, for the current version of each row it
-- targets; the worker runs it (src/resync/).  Returns its id.  The
-- extension's owner (or a role granted EXECUTE: the functions run as the
-- owner); no version bump, and the backfill's cursor is not touched.
-- The shard and organization targets have names of their own: an overload
-- resync(tbl, integer, bigint) would take resync('t', 1, 100), meant as a
-- range, for a shard.

-- Fills in the job's rows_total and records its rows (an ids job's ids, an
-- organization's rows): C.
CREATE OR REPLACE FUNCTION outbox._resync_start(job bigint, ids bigint[] DEFAULT NULL)
RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__resync_start';

CREATE OR REPLACE FUNCTION outbox._resync_job(target text, tbl regclass, ids bigint[] DEFAULT NULL,
    low bigint DEFAULT NULL, up bigint DEFAULT NULL, shard_scope int DEFAULT NULL,
    shard_identifier bigint DEFAULT NULL, organization bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job bigint;
BEGIN
    IF tbl IS NOT NULL THEN
        PERFORM outbox._registered(tbl);
    END IF;
    INSERT INTO outbox.resync_jobs AS j (target, relid, low, up, shard_scope, shard_identifier,
                                         organization, created_by)
    VALUES (target, tbl, low, up, shard_scope, shard_identifier, organization,
            session_user::regrole)
    RETURNING j.id INTO job;
    PERFORM outbox._resync_start(job, ids);
    RETURN job;
END
$$;

CREATE OR REPLACE FUNCTION outbox.resync(tbl regclass, ids bigint[]) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bound constant int := 1000000;
    n bigint;
BEGIN
    PERFORM outbox._require(tbl, 'tbl');
    PERFORM outbox._require(ids, 'ids');
    n := cardinality(ids);
    IF n = 0 THEN
        RAISE EXCEPTION 'ids must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n > bound THEN
        RAISE EXCEPTION 'ids holds % ids, more than the % one re-sync takes', n, bound
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Split them into several re-syncs, or re-sync an id range.';
    END IF;
    IF array_position(ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN outbox._resync_job('ids', tbl,
                              ids => ARRAY(SELECT DISTINCT i FROM unnest(ids) i ORDER BY i));
END
$$;

CREATE OR REPLACE FUNCTION outbox.resync(tbl regclass, low bigint, up bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(tbl, 'tbl');
    PERFORM outbox._require(low, 'low');
    PERFORM outbox._require(up, 'up');
    IF low > up THEN
        RAISE EXCEPTION 'low (%) must not be greater than up (%)', low, up
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN outbox._resync_job('range', tbl, low => low, up => up);
END
$$;

-- The shard must be of the table's scope (its category's): a shard of
-- another scope has none of its rows, and is a mistake worth saying.
CREATE OR REPLACE FUNCTION outbox.resync_shard(tbl regclass, shard_scope int,
                                               shard_identifier bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    table_scope int;
BEGIN
    PERFORM outbox._require(tbl, 'tbl');
    PERFORM outbox._require(shard_scope, 'shard_scope');
    PERFORM outbox._require(shard_identifier, 'shard_identifier');
    SELECT c.scope INTO table_scope
      FROM outbox._registered(tbl) r JOIN outbox.categories c ON c.id = r.category;
    IF table_scope <> shard_scope THEN
        RAISE EXCEPTION 'shard_scope % is not the scope of table % (%)', shard_scope, tbl,
                        table_scope
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN outbox._resync_job('shard', tbl, shard_scope => shard_scope,
                              shard_identifier => shard_identifier);
END
$$;

-- Every registered table of the Organization relocation scope (a set of
-- scopes decided row by row, as the export does), the rows that belong to
-- the organization, parents first.  Refused while the organization moves.
CREATE OR REPLACE FUNCTION outbox.resync_organization(organization bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m record;
BEGIN
    PERFORM outbox._require(organization, 'organization');
    SELECT * INTO m FROM outbox.organization_moves o
     WHERE o.organization = resync_organization.organization
       AND o.state NOT IN ('complete', 'cancelled')
     ORDER BY o.started_at DESC LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'organization % is moving: % % from cell % to cell % (state %, step %)',
                        organization, m.mode, m.relocation, m.from_cell, m.to_cell, m.state,
                        m.step
            USING ERRCODE = 'object_in_use',
                  HINT = 'Re-sync it once the move is complete or cancelled.';
    END IF;
    RETURN outbox._resync_job('organization', NULL, organization => organization);
END
$$;

-- One batch of a running job, in the caller's transaction: the outbox rows
-- it wrote, or NULL when the job is not running (done, paused, cancelled,
-- failed).  The worker runs the same batches, with the hot-shard guard.
CREATE OR REPLACE FUNCTION outbox.process_resync_batch(job bigint, batch_size int) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_process_resync_batch';

-- Pause, resume and cancel: each names the job and says what it found.
-- A failed job (its table unregistered, say) resumes where it failed.
CREATE OR REPLACE FUNCTION outbox._resync_set_state(job bigint, wanted text, allowed text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was text;
BEGIN
    PERFORM outbox._require(job, 'job');
    SELECT j.state INTO was FROM outbox.resync_jobs j WHERE j.id = job FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 're-sync job % does not exist', job USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT was = ANY (allowed) THEN
        RAISE EXCEPTION 're-sync job % is %, not %', job, was, array_to_string(allowed, ' or ')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE outbox.resync_jobs j
       SET state = wanted,
           paused_at = CASE WHEN wanted = 'paused' THEN now() END,
           stopped_for = j.stopped_for + CASE WHEN wanted = 'running'
               THEN now() - coalesce(j.paused_at, j.finished_at, now()) ELSE '0' END,
           last_error = CASE WHEN wanted = 'running' THEN NULL ELSE j.last_error END,
           finished_at = CASE WHEN wanted = 'cancelled' THEN now() END
     WHERE j.id = job;
    IF wanted = 'cancelled' THEN
        DELETE FROM outbox.resync_rows r WHERE r.job = _resync_set_state.job;
        PERFORM outbox._cursor_forget('resync.' || job);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox.pause_resync(job bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'paused', '{running}') $$;

CREATE OR REPLACE FUNCTION outbox.resume_resync(job bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'running', '{paused,failed}') $$;

CREATE OR REPLACE FUNCTION outbox.cancel_resync(job bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'cancelled', '{running,paused,failed}') $$;

-- Dry runs: what outbox.resync(...) would send, found by the same code in
-- a subtransaction rolled back before it returns (the job's id is used
-- up).  eta_at_budget: at outbox.backfill_rate_per_minute, were nothing
-- else to share it.
CREATE OR REPLACE FUNCTION outbox._resync_plan(job bigint, OUT "rows" bigint, OUT shards bigint,
    OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT j.rows_total, j.shards,
       CASE WHEN j.target = 'organization'
            THEN (SELECT count(DISTINCT r.relid) FROM outbox.resync_rows r WHERE r.job = j.id)
            ELSE 1 END,
       make_interval(secs => ceil(j.rows_total::float8
           / greatest(current_setting('outbox.backfill_rate_per_minute')::float8, 1)) * 60)
  FROM outbox.resync_jobs j WHERE j.id = job
$$;

CREATE OR REPLACE FUNCTION outbox._plan_resync(target text, tbl regclass DEFAULT NULL,
    ids bigint[] DEFAULT NULL, low bigint DEFAULT NULL, up bigint DEFAULT NULL,
    shard_scope int DEFAULT NULL, shard_identifier bigint DEFAULT NULL,
    organization bigint DEFAULT NULL,
    OUT "rows" bigint, OUT shards bigint, OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job bigint;
BEGIN
    BEGIN
        job := CASE target
               WHEN 'ids' THEN outbox.resync(tbl, ids)
               WHEN 'range' THEN outbox.resync(tbl, low, up)
               WHEN 'shard' THEN outbox.resync_shard(tbl, shard_scope, shard_identifier)
               ELSE outbox.resync_organization(organization) END;
        SELECT * INTO "rows", shards, tables, eta_at_budget FROM outbox._resync_plan(job);
        RAISE EXCEPTION USING ERRCODE = 'assert_failure';
    EXCEPTION WHEN assert_failure THEN
        NULL; -- the job, its rows and its cursor rolled back
    END;
END
$$;

CREATE OR REPLACE FUNCTION outbox.plan_resync(tbl regclass, ids bigint[],
    OUT "rows" bigint, OUT shards bigint, OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM outbox._plan_resync('ids', tbl, ids => ids) $$;

CREATE OR REPLACE FUNCTION outbox.plan_resync(tbl regclass, low bigint, up bigint,
    OUT "rows" bigint, OUT shards bigint, OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM outbox._plan_resync('range', tbl, low => low, up => up) $$;

CREATE OR REPLACE FUNCTION outbox.plan_resync_shard(tbl regclass, shard_scope int,
    shard_identifier bigint,
    OUT "rows" bigint, OUT shards bigint, OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
SELECT * FROM outbox._plan_resync('shard', tbl, shard_scope => shard_scope,
                                  shard_identifier => shard_identifier)
$$;

CREATE OR REPLACE FUNCTION outbox.plan_resync_organization(organization bigint,
    OUT "rows" bigint, OUT shards bigint, OUT tables bigint, OUT eta_at_budget interval)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM outbox._plan_resync('organization', organization => organization) $$;

-- Every job: its target, state, rows done and left, ETA at its rate so far
-- (of the time it ran: not paused or failed).
CREATE OR REPLACE VIEW outbox.resyncs AS
SELECT j.id AS job, j.target,
       CASE j.target
       WHEN 'ids' THEN format('%s: %s ids', j.relid, j.rows_total)
       WHEN 'range' THEN format('%s: ids %s to %s', j.relid, j.low, j.up)
       WHEN 'shard' THEN format('%s: shard %s of scope %s', j.relid, j.shard_identifier,
                                j.shard_scope)
       ELSE format('organization %s', j.organization) END AS filter,
       j.relid AS "table", j.organization, j.state, j.rows_total, j.rows_done,
       CASE WHEN j.state IN ('running', 'paused', 'failed')
            THEN greatest(j.rows_total - j.rows_done, 0) ELSE 0 END AS rows_left,
       j.shards, j.outbox_rows, j.throttled,
       CASE WHEN j.state = 'running' AND j.rows_done > 0
            THEN (now() - j.created_at - j.stopped_for)
                 * (greatest(j.rows_total - j.rows_done, 0)::float8 / j.rows_done) END AS eta,
       j.last_error, j.created_by, j.created_at, j.finished_at
  FROM outbox.resync_jobs j
 ORDER BY j.id;
