// The DDL guard's C side.  Event triggers (extension/functions/30_ddl_guard.sql): two in C,
// here, and outbox._on_sql_drop() in SQL; the checks themselves are SQL
// (outbox._guard_ddl, outbox._check_capture), run as the extension's owner.
//
//   outbox._on_ddl_command_start()   ddl_command_start, every command: loads
//       this library before the command runs, so that the drop hook below
//       sees what a DROP removes (nothing else loads it in a session that
//       only runs DDL), and forgets what an earlier command recorded; refuses
//       DROP INDEX CONCURRENTLY of a registered table's index on id.
//   object_access_hook               records every partition that is dropped,
//       with its root, while the catalogs still say whose partition it was.
//   outbox._dropped_partitions()     what the hook recorded for the command,
//       read (and forgotten) by the sql_drop trigger: a partition of a
//       registered table dropped without its root takes its rows away
//       without a single outbox row, so that is refused.
//   outbox._on_ddl_command_end()     ddl_command_end of the commands that
//       can touch a registered table: runs outbox._guard_ddl.
#include "registry/ddl_guard.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "catalog/objectaccess.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "commands/event_trigger.h"
#include "tcop/deparse_utility.h"
#include "utils/tuplestore.h"
}

namespace pgoutbox {

namespace {

struct DroppedPartition {
    Oid partition;
    Oid root;
};

// In TopMemoryContext; emptied at the start of every DDL command.
DroppedPartition *dropped = nullptr;
int ndropped = 0;
int dropped_capacity = 0;

object_access_hook_type previous_object_access = nullptr;

void on_object_access(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id, void *arg) {
    pg::forget_abandoned_frames();
    if (previous_object_access)
        previous_object_access(access, class_id, object_id, sub_id, arg);
    if (access != OAT_DROP || class_id != RelationRelationId || sub_id != 0 ||
        !get_rel_relispartition(object_id))
        return;
    List *ancestors = get_partition_ancestors(object_id);
    if (ancestors == NIL)
        return;
    if (ndropped == dropped_capacity) {
        dropped_capacity = Max(dropped_capacity * 2, 16);
        dropped = (DroppedPartition *)(dropped == nullptr
                                           ? MemoryContextAlloc(TopMemoryContext,
                                                                sizeof(DroppedPartition) *
                                                                    dropped_capacity)
                                           : repalloc(dropped,
                                                      sizeof(DroppedPartition) * dropped_capacity));
    }
    dropped[ndropped++] = DroppedPartition{object_id, llast_oid(ancestors)};
    list_free(ancestors);
}

} // namespace

void install_drop_hook() {
    previous_object_access = object_access_hook;
    object_access_hook = on_object_access;
}

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox__on_ddl_command_start) {
    if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._on_ddl_command_start() must be an event trigger")));
    ndropped = 0;
    // DROP INDEX CONCURRENTLY commits in stages: by sql_drop the index would
    // already be invalid, so the index on id of a registered table is
    // refused before it starts.  Names resolve as the statement resolves
    // them, with the caller's search_path.
    auto *event = (EventTriggerData *)fcinfo->context;
    if (IsA(event->parsetree, DropStmt) && ((DropStmt *)event->parsetree)->concurrent &&
        ((DropStmt *)event->parsetree)->removeType == OBJECT_INDEX) {
        List *indexes = NIL;
        ListCell *lc;
        foreach (lc, ((DropStmt *)event->parsetree)->objects) {
            Oid index =
                RangeVarGetRelid(makeRangeVarFromNameList((List *)lfirst(lc)), NoLock, true);
            if (OidIsValid(index))
                indexes = lappend_oid(indexes, index);
        }
        int n = list_length(indexes);
        auto *items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
        for (int i = 0; i < n; i++)
            items[i] = ObjectIdGetDatum(list_nth_oid(indexes, i));
        Oid types[1] = {OIDARRAYOID};
        Datum args[1] = {
            PointerGetDatum(construct_array(items, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT))};
        pg::spi_run_as(pg::extension_owner_role, "guarding an index",
                       "SELECT outbox._guard_drop_index($1)", 1, types, args, nullptr, true, 0,
                       SPI_OK_SELECT);
    }
    PG_RETURN_VOID();
}

OUTBOX_FUNCTION(outbox__dropped_partitions) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    for (int i = 0; i < ndropped; i++) {
        Datum values[2] = {ObjectIdGetDatum(dropped[i].partition),
                           ObjectIdGetDatum(dropped[i].root)};
        bool nulls[2] = {false, false};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
    ndropped = 0;
    return (Datum)0;
}

// outbox._on_ddl_command_end(): after CREATE TABLE, ALTER TABLE and the like.
// The partitions an ALTER TABLE attaches or detaches are known only from the
// statement (PostgreSQL 15 collects no address for them), by names that the
// statement resolved with the caller's search_path: so they are resolved
// here, before outbox._guard_ddl(partitions, parents, attached) runs as the
// extension's owner with search_path pinned.
OUTBOX_FUNCTION(outbox__on_ddl_command_end) {
    if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._on_ddl_command_end() must be an event trigger")));
    auto *event = (EventTriggerData *)fcinfo->context;
    List *partitions = NIL;
    List *parents = NIL;
    List *attached = NIL;
    if (IsA(event->parsetree, AlterTableStmt)) {
        auto *stmt = (AlterTableStmt *)event->parsetree;
        Oid parent = stmt->objtype == OBJECT_TABLE || stmt->objtype == OBJECT_FOREIGN_TABLE
                         ? RangeVarGetRelid(stmt->relation, NoLock, true)
                         : InvalidOid;
        ListCell *lc;
        foreach (lc, stmt->cmds) {
            auto *cmd = (AlterTableCmd *)lfirst(lc);
            if (!OidIsValid(parent) ||
                (cmd->subtype != AT_AttachPartition && cmd->subtype != AT_DetachPartition &&
                 cmd->subtype != AT_DetachPartitionFinalize))
                continue;
            Oid partition = RangeVarGetRelid(((PartitionCmd *)cmd->def)->name, NoLock, true);
            if (!OidIsValid(partition))
                continue;
            partitions = lappend_oid(partitions, partition);
            parents = lappend_oid(parents, parent);
            attached = lappend_int(attached, cmd->subtype == AT_AttachPartition);
        }
    }
    int n = list_length(partitions);
    auto *partition_items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    auto *parent_items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    auto *attached_items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    for (int i = 0; i < n; i++) {
        partition_items[i] = ObjectIdGetDatum(list_nth_oid(partitions, i));
        parent_items[i] = ObjectIdGetDatum(list_nth_oid(parents, i));
        attached_items[i] = BoolGetDatum(list_nth_int(attached, i) != 0);
    }
    Oid types[3] = {OIDARRAYOID, OIDARRAYOID, BOOLARRAYOID};
    Datum args[3] = {
        PointerGetDatum(
            construct_array(partition_items, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT)),
        PointerGetDatum(construct_array(parent_items, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT)),
        PointerGetDatum(construct_array(attached_items, n, BOOLOID, 1, true, TYPALIGN_CHAR))};
    pg::spi_run_as(pg::extension_owner_role, "guarding capture against DDL",
                   "SELECT outbox._guard_ddl($1, $2, $3)", 3, types, args, nullptr, false, 0,
                   SPI_OK_SELECT);
    PG_RETURN_VOID();
}
