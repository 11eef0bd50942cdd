------------------------------------------------------------------------------
-- Handlers, draining and the worker
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.register_handler(category text, handler regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int;
    f record;
BEGIN
    category_id := outbox._category_id(category);
    PERFORM outbox._require(handler, 'handler');
    SELECT p.prokind, p.proretset, p.prorettype, p.pronargs, p.proargtypes INTO f
      FROM pg_proc p WHERE p.oid = handler;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'handler: function with OID % does not exist', handler::oid
            USING ERRCODE = 'undefined_function';
    END IF;
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

CREATE OR REPLACE FUNCTION outbox.unregister_handler(category text) RETURNS void
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

CREATE OR REPLACE FUNCTION outbox.drain_shard(silo text, shard_scope int, shard_identifier bigint,
    cell_name text DEFAULT NULL) RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_drain_shard';
CREATE OR REPLACE FUNCTION outbox.drain(silo text DEFAULT NULL) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_drain';

-- Rewrites the outbox partitions that are mostly dead tuples (a snapshot
-- held for long keeps them from VACUUM): src/drain/compaction.hpp.  The
-- worker does it every cycle; force compacts every partition with a file.
CREATE OR REPLACE FUNCTION outbox.compact_outbox(silo text DEFAULT NULL, force boolean DEFAULT false)
    RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_compact_outbox';

-- Wakes the background worker for a cycle now; needs shared_preload_libraries.
CREATE OR REPLACE FUNCTION outbox.wake_worker() RETURNS boolean
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_wake_worker';

-- Wakes the worker for a cycle when this transaction commits (nothing
-- without the preload, nothing on rollback): a move's steps use it, so
-- that the worker does not look before what it is woken for is there.
CREATE OR REPLACE FUNCTION outbox._wake_worker_at_commit() RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__wake_worker_at_commit';

-- SQL that writes the outbox (outbox.receive(), retry_dead_letters(),
-- retry_shard(), an operator), registers a handler or resumes a paused
-- shard: the worker reads the silo's partitions again once it commits, at
-- once with outbox.wake_on_commit (src/delivery/partition_watch.hpp).
-- Capture and backfill write the outbox without SQL and wake the worker
-- themselves.  A statement trigger: one call per statement.
CREATE OR REPLACE FUNCTION outbox._drain_soon() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__drain_soon';
CREATE OR REPLACE TRIGGER drain_soon AFTER INSERT OR UPDATE ON outbox.cell_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('cell');
CREATE OR REPLACE TRIGGER drain_soon AFTER INSERT OR UPDATE ON outbox.control_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('control');
CREATE OR REPLACE TRIGGER drain_soon AFTER INSERT OR UPDATE ON outbox.handlers
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('handlers');
CREATE OR REPLACE TRIGGER drain_soon AFTER DELETE ON outbox.paused_shards
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('both');
-- A link removed or changed: the rows it was to take are the handlers'
-- again (src/delivery/drain_pass.cpp, rows_hidden).
CREATE OR REPLACE TRIGGER drain_soon AFTER UPDATE OR DELETE ON outbox.cells
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('control');
CREATE OR REPLACE TRIGGER drain_soon AFTER UPDATE OR DELETE ON outbox.control_link
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._drain_soon('cell');
