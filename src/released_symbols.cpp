// The C symbols of released versions' scripts (extension/released/).  From
// 0.7.0 on, every C function's symbol is its SQL name with the schema's dot
// made an underscore (outbox.drain: outbox_drain; outbox._stats:
// outbox__stats).  The scripts of 0.1.0 to 0.6.0 name the symbols they had,
// and PostgreSQL resolves a C function's symbol when it creates it and when
// it first calls it: these keep those scripts installing, and a database
// working between installing this library and ALTER EXTENSION UPDATE.
#include "pg/guard.hpp"

extern "C" {
#include "tcop/deparse_utility.h"
}

// OLD forwards to NEW, the same function under its 0.7.0 name.
#define RELEASED_SYMBOL(OLD, NEW)                                                                  \
    extern "C" {                                                                                   \
    Datum NEW(PG_FUNCTION_ARGS);                                                                   \
    PG_FUNCTION_INFO_V1(OLD);                                                                      \
    Datum OLD(PG_FUNCTION_ARGS) {                                                                  \
        return NEW(fcinfo);                                                                        \
    }                                                                                              \
    }

RELEASED_SYMBOL(capture_statement, outbox_capture_statement)
RELEASED_SYMBOL(capture_row, outbox_capture_row)
RELEASED_SYMBOL(in_logical_apply, outbox__in_logical_apply)
RELEASED_SYMBOL(capture_truncate, outbox_capture_truncate)
RELEASED_SYMBOL(invalidate_cache, outbox__invalidate_cache)
RELEASED_SYMBOL(option_kind, outbox__option_kind)
RELEASED_SYMBOL(valid_table_key, outbox__valid_table_key)
RELEASED_SYMBOL(boundary_selftest, outbox__boundary_selftest)
RELEASED_SYMBOL(on_ddl_command_start, outbox__on_ddl_command_start)
RELEASED_SYMBOL(dropped_partitions, outbox__dropped_partitions)
RELEASED_SYMBOL(capture_partition_rows, outbox__capture_partition_rows)
RELEASED_SYMBOL(on_ddl_command_end, outbox__on_ddl_command_end)
RELEASED_SYMBOL(cursor_get, outbox__cursor_get)
RELEASED_SYMBOL(cursor_set, outbox__cursor_set)
RELEASED_SYMBOL(process_backfill_batch, outbox_process_backfill_batch)
RELEASED_SYMBOL(drain_shard, outbox_drain_shard)
RELEASED_SYMBOL(drain, outbox_drain)
RELEASED_SYMBOL(compact_outbox, outbox_compact_outbox)
RELEASED_SYMBOL(wake_worker, outbox_wake_worker)
RELEASED_SYMBOL(shard_depth, outbox__shard_depth)
RELEASED_SYMBOL(cursor_peek, outbox__cursor_peek)
RELEASED_SYMBOL(table_id_range, outbox__table_id_range)
RELEASED_SYMBOL(stats_rows, outbox__stats)
RELEASED_SYMBOL(stats_untracked, outbox__stats_untracked)
RELEASED_SYMBOL(stats_reset_all, outbox__stats_reset)
RELEASED_SYMBOL(worker_status, outbox__worker_status)

// 0.1.0 to 0.6.0 ran register_table, unregister_table and
// set_replication_version through this one symbol, telling them apart by the
// calling function's name.
extern "C" {
Datum outbox_register_table(PG_FUNCTION_ARGS);
Datum outbox_unregister_table(PG_FUNCTION_ARGS);
Datum outbox_set_replication_version(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(table_owner_gate);
Datum table_owner_gate(PG_FUNCTION_ARGS) {
    const char *name = get_func_name(fcinfo->flinfo->fn_oid);
    if (strcmp(name, "register_table") == 0)
        return outbox_register_table(fcinfo);
    if (strcmp(name, "unregister_table") == 0)
        return outbox_unregister_table(fcinfo);
    return outbox_set_replication_version(fcinfo);
}
}

// outbox._ddl_attaches_partition(pg_ddl_command), the event trigger helper of
// 0.1.0 to 0.4.0 (0.5.0 dropped it).
OUTBOX_FUNCTION(ddl_attaches_partition) {
    auto *command = (CollectedCommand *)PG_GETARG_POINTER(0);
    if (command->type != SCT_AlterTable)
        PG_RETURN_BOOL(false);
    ListCell *lc;
    foreach (lc, command->d.alterTable.subcmds) {
        auto *sub = (CollectedATSubcmd *)lfirst(lc);
        if (IsA(sub->parsetree, AlterTableCmd) &&
            ((AlterTableCmd *)sub->parsetree)->subtype == AT_AttachPartition)
            PG_RETURN_BOOL(true);
    }
    PG_RETURN_BOOL(false);
}
