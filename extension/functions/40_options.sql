------------------------------------------------------------------------------
-- Options and the version gate (src/options/option_functions.cpp)
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.set_option(key text, value jsonb) RETURNS void
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_set_option';

-- The GUC of the same name (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE or
-- SET) when set, else the options table, else the default.
CREATE OR REPLACE FUNCTION outbox.get_option(key text) RETURNS jsonb
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_get_option';

CREATE OR REPLACE FUNCTION outbox.unset_option(key text) RETURNS void
LANGUAGE c SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_unset_option';

-- min(gate option, coded version); the coded version when force_synchronous.
CREATE OR REPLACE FUNCTION outbox.find_replication_version(tbl regclass,
    force_synchronous boolean DEFAULT false) RETURNS int
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_find_replication_version';

-- The cells a backfill of tbl writes to: the registered cells, or those of
-- them that outbox_replication.<table_key>.backfill.target_cells lists (a
-- listed cell that is not registered gets nothing).  The one resolver:
-- process_backfill_batch reads it too.
CREATE OR REPLACE FUNCTION outbox.target_cells(tbl regclass) RETURNS text[]
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'outbox_target_cells';
