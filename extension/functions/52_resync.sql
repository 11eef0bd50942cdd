------------------------------------------------------------------------------
-- Targeted re-sync (issue 49; docs/guide.md, "Sending rows again")
------------------------------------------------------------------------------
-- outbox.resync(tbl, ids) and outbox.resync(tbl, low, up): a job that
-- writes an outbox row, as a backfill batch does, for the current version
-- of each row of tbl among those ids or in that range.  Returns its id.
-- The extension's owner (or a role granted EXECUTE); no version bump, and
-- the backfill's cursor is not touched.
CREATE OR REPLACE FUNCTION outbox._resync_job(tbl regclass, ids bigint[], low bigint, up bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job bigint;
BEGIN
    PERFORM outbox._registered(tbl);
    INSERT INTO outbox.resync_jobs (relid, ids, low, up, created_by)
    VALUES (tbl, ids, low, up, session_user::regrole)
    RETURNING id INTO job;
    RETURN job;
END
$$;

CREATE OR REPLACE FUNCTION outbox.resync(tbl regclass, ids bigint[]) RETURNS bigint
LANGUAGE plpgsql
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
    RETURN outbox._resync_job(tbl, ARRAY(SELECT DISTINCT i FROM unnest(ids) i ORDER BY i),
                              NULL, NULL);
END
$$;

CREATE OR REPLACE FUNCTION outbox.resync(tbl regclass, low bigint, up bigint) RETURNS bigint
LANGUAGE plpgsql
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
    RETURN outbox._resync_job(tbl, NULL, low, up);
END
$$;

-- One batch of a running job, in the caller's transaction: the outbox rows
-- it wrote, or NULL when the job is not running (done, paused, cancelled).
CREATE OR REPLACE FUNCTION outbox.process_resync_batch(job bigint, batch_size int) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_process_resync_batch';

-- Pause, resume and cancel: each names the job and says what it found.
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
           finished_at = CASE WHEN wanted = 'cancelled' THEN now() END
     WHERE j.id = job;
END
$$;

CREATE OR REPLACE FUNCTION outbox.pause_resync(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'paused', '{running}') $$;

CREATE OR REPLACE FUNCTION outbox.resume_resync(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'running', '{paused}') $$;

CREATE OR REPLACE FUNCTION outbox.cancel_resync(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT outbox._resync_set_state(job, 'cancelled', '{running,paused}') $$;

-- Every job: its target, its state, the outbox rows written.
CREATE OR REPLACE VIEW outbox.resyncs AS
SELECT j.id AS job, j.relid AS "table",
       CASE WHEN j.ids IS NOT NULL THEN 'ids' ELSE 'range' END AS target,
       cardinality(j.ids) AS ids, j.low, j.up, j.state, j.outbox_rows, j.last_error,
       j.created_by, j.created_at, j.finished_at
  FROM outbox.resync_jobs j
 ORDER BY j.id;
