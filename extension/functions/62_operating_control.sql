------------------------------------------------------------------------------
-- Operating control (SPEC section 10)
------------------------------------------------------------------------------
-- What an operator needs during an incident.  Only the extension's owner may
-- call these (90_privileges.sql grants them to nobody).  Each one that
-- changes a shard first takes the shard's claim, waiting for a drainer that
-- holds it: a drainer never sees a shard half changed, and one that read
-- the shard before the change finds out after its own claim (drain.cpp).

-- Takes the claim of a shard (the drain's advisory lock) to the end of the
-- transaction, waiting for a drainer that holds it.
CREATE OR REPLACE FUNCTION outbox._claim_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text) RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__claim_shard';

-- Checks a shard's arguments and takes its claim.  A shard is unknown only
-- when its silo, scope or cell is: a shard without rows yet is a shard.
CREATE OR REPLACE FUNCTION outbox._operated_shard(silo text, shard_scope int,
    shard_identifier bigint, cell_name text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(silo, 'silo');
    IF silo NOT IN ('cell', 'control') THEN
        RAISE EXCEPTION 'silo must be ''cell'' or ''control'', not %', quote_literal(silo)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM outbox._require(shard_scope, 'shard_scope');
    PERFORM outbox._require(shard_identifier, 'shard_identifier');
    IF NOT EXISTS (SELECT FROM outbox.scopes s WHERE s.id = _operated_shard.shard_scope) THEN
        RAISE EXCEPTION 'shard_scope % is not a registered scope', shard_scope
            USING ERRCODE = 'undefined_object';
    END IF;
    IF silo = 'cell' AND cell_name IS NOT NULL THEN
        RAISE EXCEPTION 'cell_name is for control shards only'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF silo = 'control' THEN
        PERFORM outbox._require(cell_name, 'cell_name');
        IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = _operated_shard.cell_name) THEN
            RAISE EXCEPTION 'cell_name % is not a registered cell', quote_literal(cell_name)
                USING ERRCODE = 'undefined_object';
        END IF;
    END IF;
    PERFORM outbox._claim_shard(silo, shard_scope, shard_identifier, cell_name);
END
$$;

-- Makes a backed-off shard due now; returns the rows it made due.  Its
-- failure count goes on (max_attempts counts it).
CREATE OR REPLACE FUNCTION outbox.retry_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM outbox._operated_shard(silo, shard_scope, shard_identifier, cell_name);
    -- Static statements, one per silo's outbox (issue 45: no statement
    -- built in SQL).
    IF silo = 'control' THEN
        UPDATE outbox.control_outbox o SET scheduled_from = now(), scheduled_for = now()
         WHERE (o.shard_scope, o.shard_identifier, o.cell_name)
               = (retry_shard.shard_scope, retry_shard.shard_identifier, retry_shard.cell_name)
           AND o.scheduled_for > now();
    ELSE
        UPDATE outbox.cell_outbox o SET scheduled_from = now(), scheduled_for = now()
         WHERE (o.shard_scope, o.shard_identifier)
               = (retry_shard.shard_scope, retry_shard.shard_identifier)
           AND o.scheduled_for > now();
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The drain skips a paused shard, its rows and rows written later, until
-- resume_shard.  Pausing a paused shard changes nothing.
CREATE OR REPLACE FUNCTION outbox.pause_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._operated_shard(silo, shard_scope, shard_identifier, cell_name);
    INSERT INTO outbox.paused_shards (silo, shard_scope, shard_identifier, cell_name)
    VALUES (silo, shard_scope, shard_identifier, coalesce(cell_name, ''))
    ON CONFLICT DO NOTHING;
END
$$;

-- Lifts a pause; a shard that was backed off before still waits for its
-- backoff (retry_shard makes it due now).  Resuming a shard that is not
-- paused is an error: a typo in an incident should not pass silently.
CREATE OR REPLACE FUNCTION outbox.resume_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._operated_shard(silo, shard_scope, shard_identifier, cell_name);
    DELETE FROM outbox.paused_shards p
     WHERE p.silo = resume_shard.silo AND p.shard_scope = resume_shard.shard_scope
       AND p.shard_identifier = resume_shard.shard_identifier
       AND p.cell_name = coalesce(resume_shard.cell_name, '');
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', format('shard (%s, %s, %s%s) is not paused', silo, shard_scope,
                                    shard_identifier, ', ' || quote_literal(cell_name))
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;

-- Moves the rows of one message (category, object_identifier) of a shard to
-- outbox.dead_letters; returns how many.  When it was the shard's failing
-- message, the shard's error is cleared and the rest of the shard is due
-- now.  A row committed after the move stays in the outbox.
CREATE OR REPLACE FUNCTION outbox.skip_message(silo text, shard_scope int, shard_identifier bigint,
    category int, object_identifier bigint, cell_name text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    failure outbox.shard_errors;
    n bigint;
BEGIN
    PERFORM outbox._require(category, 'category');
    PERFORM outbox._require(object_identifier, 'object_identifier');
    PERFORM outbox._operated_shard(silo, shard_scope, shard_identifier, cell_name);
    IF NOT EXISTS (SELECT FROM outbox.categories c WHERE c.id = skip_message.category) THEN
        RAISE EXCEPTION 'category % is not registered', category USING ERRCODE = 'undefined_object';
    END IF;
    SELECT * INTO failure FROM outbox.shard_errors e
     WHERE e.silo = skip_message.silo AND e.shard_scope = skip_message.shard_scope
       AND e.shard_identifier = skip_message.shard_identifier
       AND e.cell_name = coalesce(skip_message.cell_name, '')
       AND e.category = skip_message.category
       AND e.object_identifier = skip_message.object_identifier;
    -- One static statement over both silos' outboxes; the silo's own is
    -- the one deleted from (a one-time filter each).
    WITH moved AS (
        DELETE FROM outbox.cell_outbox o
         WHERE skip_message.silo = 'cell'
           AND (o.shard_scope, o.shard_identifier, o.category, o.object_identifier)
               = (skip_message.shard_scope, skip_message.shard_identifier, skip_message.category,
                  skip_message.object_identifier)
        RETURNING o.shard_scope, o.shard_identifier, NULL::text AS cell_name, o.category,
                  o.object_identifier, o.payload, o.id, o.date_added
    ), moved_control AS (
        DELETE FROM outbox.control_outbox o
         WHERE skip_message.silo = 'control' AND o.cell_name = skip_message.cell_name
           AND (o.shard_scope, o.shard_identifier, o.category, o.object_identifier)
               = (skip_message.shard_scope, skip_message.shard_identifier, skip_message.category,
                  skip_message.object_identifier)
        RETURNING o.shard_scope, o.shard_identifier, o.cell_name, o.category,
                  o.object_identifier, o.payload, o.id, o.date_added
    )
    INSERT INTO outbox.dead_letters (silo, shard_scope, shard_identifier, cell_name, category,
                                     object_identifier, payload, outbox_id, date_added, attempts,
                                     last_error)
    SELECT skip_message.silo, m.shard_scope, m.shard_identifier, m.cell_name, m.category,
           m.object_identifier, m.payload, m.id, m.date_added, coalesce(failure.attempts, 0),
           coalesce(failure.last_error, 'skipped by outbox.skip_message()')
      FROM (SELECT * FROM moved UNION ALL SELECT * FROM moved_control) m
     ORDER BY m.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF failure.silo IS NOT NULL THEN
        DELETE FROM outbox.shard_errors e
         WHERE e.silo = failure.silo AND e.shard_scope = failure.shard_scope
           AND e.shard_identifier = failure.shard_identifier AND e.cell_name = failure.cell_name;
        PERFORM outbox.retry_shard(silo, shard_scope, shard_identifier, cell_name);
    END IF;
    RETURN n;
END
$$;

-- Puts dead letters (all of them, or those with these ids) back in their
-- shards, after the rows there now, in their original order relative to
-- each other; returns how many.  An id that is not a dead letter is an
-- error, and then nothing moves.
CREATE OR REPLACE FUNCTION outbox.requeue_dead_letters(ids bigint[] DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
    n bigint;
BEGIN
    IF ids IS NOT NULL THEN
        IF array_position(ids, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'ids must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT i INTO missing FROM unnest(ids) i
         WHERE NOT EXISTS (SELECT FROM outbox.dead_letters d WHERE d.id = i) LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'ids: dead letter % does not exist', missing
                USING ERRCODE = 'undefined_object';
        END IF;
    END IF;
    -- Rows of a shard enter in outbox_id order, so they take ascending ids.
    -- They come after the rows waiting there, and a message's payload is its
    -- newest row's: when newer rows of the object wait, they take the newest
    -- waiting payload, never bringing back an older state over it.
    WITH moved AS (
        DELETE FROM outbox.dead_letters d WHERE ids IS NULL OR d.id = ANY (ids) RETURNING d.*
    ), requeued AS (
        SELECT m.*, CASE WHEN w.found THEN w.payload ELSE m.payload END AS newest
          FROM moved m
          LEFT JOIN LATERAL (
              SELECT o.id, o.payload, true AS found FROM outbox.cell_outbox o
               WHERE m.silo = 'cell'
                 AND (o.shard_scope, o.shard_identifier, o.category, o.object_identifier)
                     = (m.shard_scope, m.shard_identifier, m.category, m.object_identifier)
              UNION ALL
              SELECT o.id, o.payload, true FROM outbox.control_outbox o
               WHERE m.silo = 'control' AND o.cell_name = m.cell_name
                 AND (o.shard_scope, o.shard_identifier, o.category, o.object_identifier)
                     = (m.shard_scope, m.shard_identifier, m.category, m.object_identifier)
               ORDER BY id DESC LIMIT 1) w ON true
    ), cell AS (
        INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category,
                                        object_identifier, payload, date_added)
        SELECT r.shard_scope, r.shard_identifier, r.category, r.object_identifier, r.newest,
               r.date_added
          FROM requeued r WHERE r.silo = 'cell' ORDER BY r.outbox_id, r.id
        RETURNING 1
    ), control AS (
        INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category,
                                           object_identifier, payload, date_added, cell_name)
        SELECT r.shard_scope, r.shard_identifier, r.category, r.object_identifier, r.newest,
               r.date_added, r.cell_name
          FROM requeued r WHERE r.silo = 'control' ORDER BY r.outbox_id, r.id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM cell) + (SELECT count(*) FROM control) INTO n;
    RETURN n;
END
$$;

-- A category's max_attempts: a message that failed that many times in a
-- row moves to outbox.dead_letters (0: retry forever).
CREATE OR REPLACE FUNCTION outbox.set_max_attempts(category text, max_attempts int) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(category, 'category');
    PERFORM outbox._require(max_attempts, 'max_attempts');
    IF max_attempts < 0 THEN
        RAISE EXCEPTION 'max_attempts must be zero or positive, not %', max_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE outbox.categories c SET max_attempts = set_max_attempts.max_attempts
     WHERE c.name = set_max_attempts.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
