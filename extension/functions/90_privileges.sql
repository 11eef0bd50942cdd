------------------------------------------------------------------------------
-- Privileges
------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace LOOP
        EXECUTE format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- The capture row trigger's WHEN condition runs as whoever writes the table.
GRANT EXECUTE ON FUNCTION outbox._in_logical_apply() TO PUBLIC;

-- Every object keeps its own privileges; the schema itself gives nothing.
-- The table functions check the caller in C: it must own the table and,
-- to register it, hold REGISTER on its category (outbox.grant_category).
GRANT USAGE ON SCHEMA outbox TO PUBLIC;
-- PostgreSQL clones the capture row trigger onto every new partition as the
-- role that creates or attaches it, and checks that role may execute it.
-- Called as anything but a trigger, it raises an error.
GRANT EXECUTE ON FUNCTION outbox.capture_row() TO PUBLIC;
GRANT EXECUTE ON FUNCTION
    outbox.register_table(regclass, text, text, name, name[], name, int, text, text),
    outbox.set_relocation_scope(regclass, text[], regprocedure, name[]),
    outbox.set_relocation_collision_hook(regclass, regprocedure),
    outbox.unregister_table(regclass),
    outbox.set_replication_version(regclass, int),
    outbox.register_foreign_key(regclass, name, text, text),
    outbox.unregister_foreign_key(regclass, name) TO PUBLIC;
-- Routing: the cell of an organization (69_organization_cells.sql).
GRANT EXECUTE ON FUNCTION outbox.organization_cell(bigint) TO PUBLIC;
-- Consumers: checked in C against CONSUME grants (64_consumers.sql).
GRANT EXECUTE ON FUNCTION outbox.claim(int, interval, text[], text, text),
    outbox.claim_json(int, interval, text[], text, text), outbox.complete(bigint[], int[]), outbox.fail(bigint, int, text) TO PUBLIC;

-- pg_monitor reads; it cannot reset, drain, open gates or change anything.
GRANT USAGE ON SCHEMA outbox TO pg_monitor;
GRANT SELECT ON outbox.shard_depth, outbox.backfill_status, outbox.stats, outbox.worker_status,
    outbox.foreign_keys, outbox.resyncs TO pg_monitor;
-- metrics() counts paused shards and dead letters, without their payloads.
GRANT SELECT ON outbox.paused_shards TO pg_monitor;
-- metrics() counts the model check's findings (catalog reads only).
GRANT EXECUTE ON FUNCTION outbox.check_models() TO pg_monitor;
GRANT SELECT (silo, dead_at) ON outbox.dead_letters TO pg_monitor;
-- and the shards consumers hold, never their claim tokens (which complete).
GRANT SELECT (silo, lease_until) ON outbox.consumer_claims TO pg_monitor;
-- and how the links to other clusters are doing.
GRANT SELECT ON outbox.link_status, outbox.link_unrecognised TO pg_monitor;
-- and the relocations imported here: their state, never their rows.
GRANT SELECT ON outbox.relocations TO pg_monitor;
-- and where the organizations live.
GRANT SELECT ON outbox.organization_cells TO pg_monitor;
GRANT EXECUTE ON FUNCTION outbox._shard_depth(bigint, boolean), outbox._backfill_status(),
    outbox._backfill_throttled(), outbox._stats(),
    outbox._stats_untracked(), outbox._worker_status(), outbox._prometheus_label(text),
    outbox.metrics(), outbox._foreign_keys(), outbox._tables_failing(text),
    outbox._metric_families(), outbox._metrics_stats(boolean), outbox._metrics_depth(),
    outbox._metrics_backfill_and_cascade(), outbox._metrics_worker(outbox.worker_status),
    outbox._metrics_links(), outbox._metrics_relocation(), outbox._metrics_resync() TO pg_monitor;
-- How many tombstone checks wait, and of which tables; not their errors.
GRANT SELECT (table_key, control, first_failed_at, attempts) ON outbox.tombstone_checks
    TO pg_monitor;
