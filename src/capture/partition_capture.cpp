// outbox._capture_partition_rows(rel regclass, root regclass): the DDL event
// trigger calls it when a partition joins or leaves the registered table
// root (ATTACH or DETACH PARTITION, any form).  Rows that join are inserted
// into the registered table, rows that leave are deleted from it: either
// way, one outbox row per row, as capture writes for an INSERT or a DELETE.
// Without it a partition attached full of rows, or detached and then dropped,
// would change what the registered table holds without a single outbox row.
//
// Each leaf is read as its owner, restricted: the payload runs the owner's
// casts.  Calls PostgreSQL directly and owns no C++ objects with destructors.
#include "capture/outbox_rows.hpp"
#include "pg/guard.hpp"
#include "pg/run_as.hpp"

extern "C" {
#include "catalog/pg_inherits.h"
}

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox__capture_partition_rows) {
    if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("%s must not be NULL", PG_ARGISNULL(0) ? "rel" : "root")));
    Oid relid = PG_GETARG_OID(0);
    Oid root = PG_GETARG_OID(1);
    // ACCESS EXCLUSIVE, as ATTACH and DETACH take on the partition: a writer
    // still at work on it (DETACH ... CONCURRENTLY) finishes first, and the
    // scan sees every row.
    if (!OidIsValid(root))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("root must be a registered table, not OID 0")));
    Relation top = try_relation_open(relid, AccessExclusiveLock);
    if (top == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("rel: relation with OID %u does not exist", relid)));
    relation_close(top, NoLock);
    List *relids = find_all_inheritors(relid, AccessExclusiveLock, nullptr);
    const Registry *registry = registry_get();
    CellTargets targets{registry->ncells, registry->cells, false};
    OutboxWriter *writer = outbox_writer_begin(registry, true);
    ListCell *lc;
    foreach (lc, relids) {
        Relation rel = table_open(lfirst_oid(lc), NoLock);
        if (rel->rd_rel->relkind == RELKIND_RELATION) {
            const TableMeta *meta = table_meta_build(rel, root);
            if (!meta->registered)
                ereport(ERROR,
                        (errcode(ERRCODE_UNDEFINED_OBJECT),
                         errmsg("table with OID %u is not registered with pg_outbox", root)));
            check_silo(meta);
            pg::RunAs as_owner;
            pg::run_as_table_owner_for_caller(&as_owner, rel);
            write_all_rows(writer, rel, meta, targets);
            pg::run_as_end(&as_owner);
        }
        table_close(rel, NoLock);
    }
    int64 written = outbox_writer_finish(writer);
    PG_RETURN_INT64(written);
}
