-- pg_outbox 0.3.0: handlers, shard draining with coalescing and backoff, and
-- the background worker.
\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.3.0'" to load this file. \quit

-- What a handler receives: one coalesced message.
CREATE TYPE outbox.message AS (
    silo              text,
    shard_scope       int,
    shard_identifier  bigint,
    category          int,
    object_identifier bigint,
    payload           jsonb,    -- the newest row's
    cell_name         text,     -- control silo only
    first_id          bigint,
    last_id           bigint,
    coalesced         int       -- outbox rows delivered as this message
);

-- One handler per category: a function (outbox.message) RETURNS void.
CREATE TABLE outbox.handlers (
    category int          PRIMARY KEY REFERENCES outbox.categories (id),
    handler  regprocedure NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.handlers', '');

-- The last failure of each shard that has one; removed when it drains.
CREATE TABLE outbox.shard_errors (
    silo              text        NOT NULL,
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    cell_name         text        NOT NULL DEFAULT '',
    attempts          int         NOT NULL,
    last_error        text        NOT NULL,
    last_error_at     timestamptz NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    PRIMARY KEY (silo, shard_scope, shard_identifier, cell_name)
);

CREATE FUNCTION outbox.register_handler(category text, handler regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int;
    f record;
BEGIN
    PERFORM outbox._require(category, 'category');
    PERFORM outbox._require(handler, 'handler');
    SELECT c.id INTO category_id FROM outbox.categories c WHERE c.name = register_handler.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT p.prokind, p.proretset, p.prorettype, p.pronargs, p.proargtypes INTO f
      FROM pg_proc p WHERE p.oid = handler;
    IF f.prokind <> 'f' OR f.proretset OR f.prorettype <> 'void'::regtype OR f.pronargs <> 1
       OR f.proargtypes[0] <> 'outbox.message'::regtype THEN
        RAISE EXCEPTION 'handler % must be a function (outbox.message) RETURNS void', handler
            USING ERRCODE = 'invalid_function_definition';
    END IF;
    INSERT INTO outbox.handlers AS h (category, handler) VALUES (category_id, handler)
        ON CONFLICT ON CONSTRAINT handlers_pkey DO UPDATE SET handler = excluded.handler;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE FUNCTION outbox.unregister_handler(category text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(category, 'category');
    DELETE FROM outbox.handlers h
     USING outbox.categories c
     WHERE h.category = c.id AND c.name = unregister_handler.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % has no handler', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE FUNCTION outbox.drain_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'drain_shard';
CREATE FUNCTION outbox.drain(silo text DEFAULT NULL) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'drain';

-- Wakes the background worker for a cycle now; needs shared_preload_libraries.
CREATE FUNCTION outbox.wake_worker() RETURNS boolean
    LANGUAGE c AS 'MODULE_PATHNAME', 'wake_worker';

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
