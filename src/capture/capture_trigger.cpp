// Capture: the trigger functions that register_table installs, on the
// registered table and on every partition below it (statement triggers are
// not inherited, and a statement on a partition fires only its own):
//
//   outbox.capture_statement()  AFTER INSERT / UPDATE / DELETE FOR EACH
//                               STATEMENT, with transition tables: one
//                               trigger call per statement, all its outbox
//                               rows written with multi-inserts
//   outbox.capture_truncate()   BEFORE TRUNCATE FOR EACH STATEMENT
//   outbox.capture_row()        AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW
//                               WHEN (outbox._in_logical_apply()): logical
//                               replication's apply worker fires row
//                               triggers only, never statement triggers
//
// All are ENABLE ALWAYS, so session_replication_role cannot switch them off.
// An UPDATE writes the row for the new key; when the shard, the id or the
// target cell changed, it also writes one for the old key (the object left
// that shard), with the old row's payload, as a deletion would.
//
// This file calls PostgreSQL directly and owns no C++ objects with
// destructors: an ERROR may unwind through any of its frames.
#include "capture/outbox_rows.hpp"
#include "capture/uncaptured.hpp"
#include "pg/guard.hpp"
#include "pg/hash.hpp"
#include "pg/transition_rows.hpp"
#include "registry/table_meta.hpp"
#include "settings.hpp"

extern "C" {
#include "replication/logicalworker.h"
#include "replication/worker_internal.h"
#include "utils/tuplestore.h"
}

namespace pgoutbox {

namespace {

// Capture's control rows go to the row's cell, or to every registered cell.
CellTargets capture_targets(const Registry *registry) {
    return CellTargets{registry->ncells, registry->cells, false};
}

using pg::for_each_row;

// What an UPDATE's new row keeps of its key, by id (ids are unique).
struct NewKey {
    int64 object_identifier;
    int64 shard_identifier;
    char *cell;
};

// An UPDATE: rows for every new key, then, unless no key column can have
// changed, for every old key that is no longer there (the row moved to
// another shard or cell, or its id changed).
// Transition tables do not pair old and new rows, so the new keys are
// indexed by id, which the registration requires to be unique.
// Whether an UPDATE statement may have changed a row's key.  The updated
// columns are known, but a BEFORE UPDATE row trigger may change others (on
// this table, or on any partition of a partitioned one): then assume so.
bool key_may_change(const TableMeta *meta, TriggerData *td) {
    Relation rel = td->tg_relation;
    if (rel->rd_rel->relkind != RELKIND_RELATION || td->tg_updatedcols == nullptr ||
        (rel->trigdesc != nullptr && rel->trigdesc->trig_update_before_row))
        return true;
    auto updated = [&](AttrNumber attnum) {
        return attnum != InvalidAttrNumber &&
               bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, td->tg_updatedcols);
    };
    return updated(meta->id_attnum) || updated(meta->shard_attnum) || updated(meta->cell_attnum);
}

void capture_update(OutboxWriter *writer, const CellTargets &targets, const TableMeta *meta,
                    TriggerData *td, TupleTableSlot *slot, MemoryContext per_row) {
    if (!key_may_change(meta, td)) {
        for_each_row(td->tg_newtable, slot, per_row,
                     [&](TupleTableSlot *row) { write_row(writer, meta, targets, row); });
        return;
    }
    HTAB *new_keys = pg::blob_hash("pg_outbox update keys", 1024, sizeof(int64), sizeof(NewKey),
                                   CurrentMemoryContext);
    MemoryContext keys_context = CurrentMemoryContext;
    for_each_row(td->tg_newtable, slot, per_row, [&](TupleTableSlot *row) {
        RowKey key = row_key(meta, row);
        write_key_rows(writer, meta, targets, key, row_payload(meta, row));
        auto *entry = (NewKey *)hash_search(new_keys, &key.object_identifier, HASH_ENTER, nullptr);
        entry->shard_identifier = key.shard_identifier;
        entry->cell = key.cell ? MemoryContextStrdup(keys_context, key.cell) : nullptr;
    });
    for_each_row(td->tg_oldtable, slot, per_row, [&](TupleTableSlot *row) {
        RowKey key = row_key(meta, row);
        auto *entry = (NewKey *)hash_search(new_keys, &key.object_identifier, HASH_FIND, nullptr);
        bool unchanged =
            entry != nullptr && entry->shard_identifier == key.shard_identifier &&
            (entry->cell == nullptr ? key.cell == nullptr
                                    : key.cell != nullptr && strcmp(entry->cell, key.cell) == 0);
        if (!unchanged)
            write_key_rows(writer, meta, targets, key, row_payload(meta, row));
    });
    hash_destroy(new_keys);
}

TriggerData *trigger_data(FunctionCallInfo fcinfo, const char *function) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("%s was not called by the trigger manager", function)));
    return (TriggerData *)fcinfo->context;
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

int pgoutbox::capture_suppressed_depth = 0;

OUTBOX_FUNCTION(outbox_capture_row) {
    TriggerData *td = trigger_data(fcinfo, "outbox.capture_row()");
    if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox.capture_row() must be an AFTER ... FOR EACH ROW trigger")));
    if (capture_suppressed())
        return PointerGetDatum(nullptr);
    const TableMeta *meta = table_meta_get(td->tg_relation);
    if (!meta->registered)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("table %s is not registered with pg_outbox", meta->relname),
                        errhint("outbox.capture_row() is installed by outbox.register_table().")));
    check_silo(meta);
    const Registry *registry = registry_get();
    CellTargets targets = capture_targets(registry);
    OutboxWriter *writer = outbox_writer_begin(registry, true);
    if (TRIGGER_FIRED_BY_UPDATE(td->tg_event)) {
        RowKey old_key = row_key(meta, td->tg_trigslot);
        RowKey new_key = row_key(meta, td->tg_newslot);
        if (!same_key(old_key, new_key))
            write_key_rows(writer, meta, targets, old_key, row_payload(meta, td->tg_trigslot));
        write_key_rows(writer, meta, targets, new_key, row_payload(meta, td->tg_newslot));
    } else {
        write_row(writer, meta, targets, td->tg_trigslot);
    }
    outbox_writer_finish(writer);
    return PointerGetDatum(nullptr);
}

OUTBOX_FUNCTION(outbox_capture_statement) {
    TriggerData *td = trigger_data(fcinfo, "outbox.capture_statement()");
    if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) ||
        TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox.capture_statement() must be an AFTER ... FOR EACH "
                               "STATEMENT trigger with transition tables")));
    bool update = TRIGGER_FIRED_BY_UPDATE(td->tg_event);
    Tuplestorestate *rows =
        TRIGGER_FIRED_BY_DELETE(td->tg_event) ? td->tg_oldtable : td->tg_newtable;
    if (rows == nullptr || (update && td->tg_oldtable == nullptr))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox.capture_statement() needs its transition tables")));
    if (tuplestore_tuple_count(rows) == 0 || capture_suppressed())
        return PointerGetDatum(nullptr);
    Relation rel = td->tg_relation;
    const TableMeta *meta = table_meta_get(rel);
    // Not registered (any more): a partition detached by a version before
    // 0.5.0 kept its triggers, and a statement already queued can outlive
    // its registration.
    if (!meta->registered)
        return PointerGetDatum(nullptr);
    check_silo(meta);
    const Registry *registry = registry_get();
    CellTargets targets = capture_targets(registry);

    OutboxWriter *writer = outbox_writer_begin(registry, true);
    TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
    MemoryContext per_row =
        AllocSetContextCreate(CurrentMemoryContext, "pg_outbox row", ALLOCSET_DEFAULT_SIZES);
    if (update)
        capture_update(writer, targets, meta, td, slot, per_row);
    else
        for_each_row(rows, slot, per_row,
                     [&](TupleTableSlot *row) { write_row(writer, meta, targets, row); });
    outbox_writer_finish(writer);
    MemoryContextDelete(per_row);
    ExecDropSingleTupleTableSlot(slot);
    return PointerGetDatum(nullptr);
}

// outbox._in_logical_apply(): the WHEN condition of the row trigger.  True
// in logical replication's apply worker, where statement triggers do not
// fire; false in the table sync worker, whose COPY fires them.
OUTBOX_FUNCTION(outbox__in_logical_apply) {
    PG_RETURN_BOOL(IsLogicalWorker() && !am_tablesync_worker());
}

OUTBOX_FUNCTION(outbox_capture_truncate) {
    TriggerData *td = trigger_data(fcinfo, "outbox.capture_truncate()");
    if (!TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) || !TRIGGER_FIRED_BEFORE(td->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox.capture_truncate() must be a BEFORE TRUNCATE trigger")));
    Relation rel = td->tg_relation;
    const TableMeta *meta = table_meta_get(rel);
    // Not registered (any more), as above.  A partitioned table holds no
    // rows of its own.
    if (!meta->registered || rel->rd_rel->relkind != RELKIND_RELATION)
        return PointerGetDatum(nullptr);
    check_silo(meta);
    const Registry *registry = registry_get();
    CellTargets targets = capture_targets(registry);
    OutboxWriter *writer = outbox_writer_begin(registry, true);
    write_all_rows(writer, rel, meta, targets);
    outbox_writer_finish(writer);
    return PointerGetDatum(nullptr);
}
