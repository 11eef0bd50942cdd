// Module entry: magic block, GUCs, shared memory hooks.  Loaded by
// shared_preload_libraries or on first use; the GUCs exist either way.
#include "pg/postgres.hpp"

#include "cascade/cascade.hpp"
#include "registry/ddl_guard.hpp"
#include "relocation/move/move_trigger.hpp"
#include "delivery/compaction.hpp"
#include "delivery/delivery.hpp"
#include "pg/executor_depth.hpp"
#include "pg/run_as.hpp"
#include "settings.hpp"
#include "stats/stats.hpp"
#include "worker/worker.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
}

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace pgoutbox {

int silo_mode = SILO_MODE_MONOLITH;

static const struct config_enum_entry silo_mode_options[] = {
    {"monolith", SILO_MODE_MONOLITH, false},
    {"cell", SILO_MODE_CELL, false},
    {"control", SILO_MODE_CONTROL, false},
    {nullptr, 0, false},
};

int cursor_store = CURSOR_STORE_REDIS;
char *redis_host = nullptr;
int redis_port = 6379;
char *redis_password_file = nullptr;
int redis_db = 0;
int redis_connect_timeout_ms = 1000;
int redis_command_timeout_ms = 1000;
char *redis_key_prefix = nullptr;
int backfill_rate_per_minute = 10000;
int backfill_min_rate_per_minute = 0;
int backfill_max_shard_depth = 0;
int handler_timeout_ms = 30000;
char *database_name = nullptr;
bool worker_enabled = true;
bool notify_consumers = true;
bool wake_on_commit = true;
int inbox_retention_s = 7 * 24 * 3600;
int link_batch_size = 5000;
int link_timeout_ms = 30000;
int max_lease_s = 300;
int naptime_ms = 1000;
bool self_hosted = false;
int metrics_top_shards = 20;      // read by outbox.metrics() through current_setting
int relocation_chunk_rows = 1000; // read by the import through current_setting

static const struct config_enum_entry cursor_store_options[] = {
    {"redis", CURSOR_STORE_REDIS, false},
    {"table", CURSOR_STORE_TABLE, false},
    {nullptr, 0, false},
};

const char *silo_mode_name(int mode) {
    return silo_mode_options[mode].name;
}

// Shared memory (with the preload only): the worker's state and the counters.
static shmem_request_hook_type previous_shmem_request = nullptr;
static shmem_startup_hook_type previous_shmem_startup = nullptr;

static void request_shmem() {
    if (previous_shmem_request)
        previous_shmem_request();
    worker_shmem_request();
    stats_shmem_request();
}

static void startup_shmem() {
    if (previous_shmem_startup)
        previous_shmem_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    worker_shmem_startup();
    stats_shmem_startup();
    LWLockRelease(AddinShmemInitLock);
}

} // namespace pgoutbox

void _PG_init(void) {
    DefineCustomEnumVariable(
        "outbox.silo_mode", "Silo this database runs as: monolith, cell or control.",
        "Writes to registered tables of the other silo are refused; monolith allows all.",
        &pgoutbox::silo_mode, pgoutbox::SILO_MODE_MONOLITH, pgoutbox::silo_mode_options, PGC_SIGHUP,
        0, nullptr, nullptr, nullptr);

    using namespace pgoutbox;
    // Where backfill cursors live, and who may move them: whoever can write
    // the store can move a cursor past rows, so these are superuser settings.
    DefineCustomEnumVariable("outbox.cursor_store",
                             "Where backfill cursors are kept: redis or table.",
                             "table keeps them in outbox.cursors, under PostgreSQL's access "
                             "control and in the batch's own transaction.",
                             &cursor_store, CURSOR_STORE_REDIS, cursor_store_options, PGC_SUSET, 0,
                             nullptr, nullptr, nullptr);
    // Where the connection goes, and so where the password is sent (AUTH):
    // the server's configuration only, never a session, a role or a
    // database setting.
    DefineCustomStringVariable("outbox.redis_host", "Redis host holding backfill cursors.", nullptr,
                               &redis_host, "127.0.0.1", PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.redis_port", "Redis port.", nullptr, &redis_port, 6379, 1,
                            65535, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.redis_db", "Redis database number (SELECT).", nullptr,
                            &redis_db, 0, 0, 1000000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    // The password is not a setting: no PostgreSQL 15 flag hides a custom
    // setting from pg_read_all_settings (pg_monitor), and ALTER DATABASE ...
    // SET values are readable by every role.  It lives in a file only the
    // server's OS user can read (redis_client.cpp checks).  outbox is a
    // reserved prefix, so a leftover outbox.redis_password of 0.4.0 is
    // dropped with a WARNING that names only the parameter.
    DefineCustomStringVariable("outbox.redis_password_file",
                               "File whose first line is the Redis password.",
                               "Owned by the server's OS user, mode 600.", &redis_password_file, "",
                               PGC_SIGHUP, GUC_SUPERUSER_ONLY, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.redis_connect_timeout_ms", "Bound on connecting to Redis.",
                            nullptr, &redis_connect_timeout_ms, 1000, 1, 600000, PGC_SUSET,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.redis_command_timeout_ms", "Bound on each Redis command.",
                            nullptr, &redis_command_timeout_ms, 1000, 1, 600000, PGC_SUSET,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomStringVariable("outbox.redis_key_prefix",
                               "Prefix of every Redis key pg_outbox uses.",
                               "Cursor keys are <prefix>outbox_backfill.<table_key>.",
                               &redis_key_prefix, "", PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.backfill_rate_per_minute",
                            "Rows the background worker backfills per minute, at most.", nullptr,
                            &backfill_rate_per_minute, 10000, 1, INT_MAX, PGC_SIGHUP, 0, nullptr,
                            nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.backfill_min_rate_per_minute",
        "Ids the background worker backfills per minute even when live traffic uses the budget.",
        "0: none (Sentry's behaviour); at most outbox.backfill_rate_per_minute counts.",
        &backfill_min_rate_per_minute, 0, 0, INT_MAX, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.backfill_max_shard_depth",
        "Outbox rows a shard may hold before the worker's backfill waits for it to drain.",
        "0: no bound (Sentry's behaviour).  A batch is then at most this many ids.",
        &backfill_max_shard_depth, 0, 0, INT_MAX, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);

    DefineCustomIntVariable("outbox.handler_timeout",
                            "A handler running longer fails its message (0: no limit).", nullptr,
                            &handler_timeout_ms, 30000, 0, INT_MAX, PGC_SUSET, GUC_UNIT_MS, nullptr,
                            nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.max_lease", "The longest lease outbox.claim() grants.",
        "A claimed shard holds the messages of every category in it; at most a day.", &max_lease_s,
        300, 1, 86400, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.owner_code_timeout",
        "Owner code that pg_outbox runs on its own is stopped after this long (0: no limit).",
        "Backfill batches, cascade steps, tombstone checks and status reads of a user's table: "
        "the table then fails visibly and backs off, and the other tables go on.",
        &pg::owner_code_timeout_ms, 5000, 0, INT_MAX, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "outbox.owner_lock_timeout",
        "pg_outbox waits this long at most for a lock on a user's table (0: no limit).",
        "Also the lock_timeout of the owner code it runs on its own.", &pg::owner_lock_timeout_ms,
        1000, 0, INT_MAX, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.drain_batch_size", "Outbox rows a drainer holds and delivers in one batch.",
        "Bounds a drainer's memory whatever the depth of a shard; the worker commits each batch.",
        &drain_batch_size, 10000, 1, 1000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.cascade_chunk_size",
        "Child rows one step of a cross-silo cascade deletes or updates, about.",
        "A batch that is not done leaves its watermark where it was and goes on in the next step.",
        &cascade_chunk_size, 10000, 1, 1000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.compact_min_size",
        "Size from which the worker compacts an outbox partition that is mostly dead tuples.",
        "0: never.  Compaction truncates the partition and writes its live rows back.",
        &compact_min_size_kb, 1024, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_KB, nullptr, nullptr, nullptr);

    // The worker reads it at start.  A PGC_POSTMASTER variable cannot be
    // defined by a library loaded after startup, so without the preload
    // (no worker) it is an ordinary reloadable setting.
    DefineCustomStringVariable(
        "outbox.database_name", "Database the background worker serves.", nullptr, &database_name,
        "postgres", process_shared_preload_libraries_in_progress ? PGC_POSTMASTER : PGC_SIGHUP, 0,
        nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("outbox.worker_enabled", "Whether the background worker works.",
                             nullptr, &worker_enabled, true, PGC_SIGHUP, 0, nullptr, nullptr,
                             nullptr);
    DefineCustomBoolVariable(
        "outbox.notify_consumers",
        "Whether the worker NOTIFYs pg_outbox after commits that wrote outbox rows.",
        "Consumers outside the database LISTEN on it.", &notify_consumers, true, PGC_SIGHUP, 0,
        nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "outbox.wake_on_commit",
        "Whether a commit that wrote outbox rows a handler takes wakes the worker to drain them.",
        "Off: they wait for the worker's next cycle (outbox.naptime).", &wake_on_commit, true,
        PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.inbox_retention",
                            "How long outbox.inbox remembers what another cluster handed over.",
                            "A batch sent again later than this would be taken twice.  0: forever.",
                            &inbox_retention_s, 7 * 24 * 3600, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S,
                            nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.link_batch_size", "Outbox rows a link hands over in one call to the other cluster.",
        "A round sends up to four such batches in one transaction.", &link_batch_size, 5000, 1,
        100000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.link_timeout",
                            "How long a link waits to connect, or for an answer, from the other "
                            "cluster.",
                            "Past it the link gives the round up and backs off.", &link_timeout_ms,
                            30000, 100, 3600000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
                            nullptr);
    DefineCustomIntVariable("outbox.naptime", "Pause between the worker's cycles.", nullptr,
                            &naptime_ms, 1000, 10, 3600000, PGC_SIGHUP, GUC_UNIT_MS, nullptr,
                            nullptr, nullptr);
    DefineCustomBoolVariable(
        "outbox.self_hosted", "The worker backfills to the coded versions, options ignored.",
        nullptr, &self_hosted, false, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);

    DefineCustomIntVariable("outbox.metrics_top_shards",
                            "Deepest shards outbox.metrics() reports one by one.",
                            "Totals cover every shard whatever this is.", &metrics_top_shards, 20,
                            0, 10000, PGC_USERSET, 0, nullptr, nullptr, nullptr);

    // Read by outbox.import_organizations (69_relocation/21_import_run.sql): the
    // rows of one chunk, one transaction each.
    DefineCustomIntVariable(
        "outbox.relocation_chunk_rows", "Rows an import writes in one chunk, one transaction each.",
        "A chunk is recorded in outbox.import_chunks when it commits.", &relocation_chunk_rows,
        1000, 1, 100000, PGC_USERSET, 0, nullptr, nullptr, nullptr);

    MarkGUCPrefixReserved("outbox");
    install_drop_hook();
    relocation::install_stale_statement_check();
    pg::install_executor_depth();
    if (process_shared_preload_libraries_in_progress) {
        previous_shmem_request = shmem_request_hook;
        shmem_request_hook = request_shmem;
        previous_shmem_startup = shmem_startup_hook;
        shmem_startup_hook = startup_shmem;
        register_workers();
    }
}
