#include "capture/outbox_rows.hpp"

#include "settings.hpp"

namespace pgoutbox {

RowKey row_key(const TableMeta *meta, TupleTableSlot *slot) {
    RowKey key;
    bool isnull;
    Datum id = slot_getattr(slot, meta->id_attnum, &isnull);
    if (isnull)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                        errmsg("id of a row of registered table %s is NULL", meta->relname)));
    key.object_identifier = integer_datum(id, meta->id_type);
    key.shard_identifier = key.object_identifier;
    if (meta->shard_attnum != InvalidAttrNumber) {
        Datum shard = slot_getattr(slot, meta->shard_attnum, &isnull);
        if (isnull)
            ereport(ERROR,
                    (errcode(ERRCODE_NOT_NULL_VIOLATION),
                     errmsg("shard column of registered table %s is NULL for id " INT64_FORMAT,
                            meta->relname, key.object_identifier),
                     errdetail("Every outbox row needs a shard identifier.")));
        key.shard_identifier = integer_datum(shard, meta->shard_type);
    }
    key.cell = nullptr;
    if (meta->cell_attnum != InvalidAttrNumber) {
        Datum cell = slot_getattr(slot, meta->cell_attnum, &isnull);
        if (isnull)
            ereport(ERROR,
                    (errcode(ERRCODE_NOT_NULL_VIOLATION),
                     errmsg("cell column of registered table %s is NULL for id " INT64_FORMAT,
                            meta->relname, key.object_identifier)));
        // name is a fixed-width NUL-terminated type, not a varlena.
        key.cell = meta->cell_type == NAMEOID ? pstrdup(NameStr(*DatumGetName(cell)))
                                              : TextDatumGetCString(cell);
    }
    return key;
}

void check_silo(const TableMeta *meta) {
    if (silo_mode == SILO_MODE_MONOLITH)
        return;
    bool local = (silo_mode == SILO_MODE_CELL) == (meta->silo == Silo::Cell);
    if (!local)
        ereport(
            ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("table %s belongs to the %s silo; this database runs in %s mode", meta->relname,
                    meta->silo == Silo::Cell ? "cell" : "control", silo_mode_name(silo_mode)),
             errhint("Writes to a table of another silo are refused (outbox.silo_mode).")));
}

bool same_key(const RowKey &a, const RowKey &b) {
    if (a.object_identifier != b.object_identifier || a.shard_identifier != b.shard_identifier)
        return false;
    if (a.cell == nullptr || b.cell == nullptr)
        return a.cell == b.cell;
    return strcmp(a.cell, b.cell) == 0;
}

Datum row_payload(const TableMeta *meta, TupleTableSlot *slot) {
    if (meta->npayload == 0)
        return (Datum)0;
    JsonbParseState *state = nullptr;
    pushJsonbValue(&state, WJB_BEGIN_OBJECT, nullptr);
    for (int i = 0; i < meta->npayload; i++) {
        const PayloadColumn *column = &meta->payload[i];
        JsonbValue key;
        key.type = jbvString;
        key.val.string.val = const_cast<char *>(column->name);
        key.val.string.len = (int)strlen(column->name);
        pushJsonbValue(&state, WJB_KEY, &key);

        bool isnull;
        Datum value = slot_getattr(slot, column->attnum, &isnull);
        JsonbValue json;
        if (isnull) {
            json.type = jbvNull;
        } else {
            Jsonb *jsonb =
                DatumGetJsonbP(FunctionCall1(const_cast<FmgrInfo *>(&column->to_jsonb), value));
            if (JB_ROOT_IS_SCALAR(jsonb)) {
                JsonbExtractScalar(&jsonb->root, &json);
            } else {
                json.type = jbvBinary;
                json.val.binary.data = &jsonb->root;
                json.val.binary.len = (int)(VARSIZE(jsonb) - VARHDRSZ);
            }
        }
        pushJsonbValue(&state, WJB_VALUE, &json);
    }
    JsonbValue *object = pushJsonbValue(&state, WJB_END_OBJECT, nullptr);
    return JsonbPGetDatum(JsonbValueToJsonb(object));
}

static bool listed(const CellTargets &targets, const char *cell) {
    for (int i = 0; i < targets.ncells; i++)
        if (strcmp(targets.cells[i], cell) == 0)
            return true;
    return false;
}

void write_key_rows(OutboxWriter *writer, const TableMeta *meta, const CellTargets &targets,
                    const RowKey &key, Datum payload) {
    OutboxRow row;
    row.shard_scope = meta->scope;
    row.shard_identifier = key.shard_identifier;
    row.category = meta->category;
    row.object_identifier = key.object_identifier;
    row.payload = payload;
    row.cell_name = nullptr;
    if (meta->silo == Silo::Cell) {
        outbox_writer_add(writer, Silo::Cell, &row);
        return;
    }
    if (key.cell != nullptr) {
        if (targets.only_listed && !listed(targets, key.cell))
            return;
        row.cell_name = key.cell;
        outbox_writer_add(writer, Silo::Control, &row);
        return;
    }
    if (targets.ncells == 0 && !targets.only_listed)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("no cell is registered: a change to control table %s has no "
                               "cell to be delivered to",
                               meta->relname),
                        errhint("Register the cells with outbox.register_cell(name).")));
    for (int i = 0; i < targets.ncells; i++) {
        row.cell_name = targets.cells[i];
        outbox_writer_add(writer, Silo::Control, &row);
    }
}

void write_row(OutboxWriter *writer, const TableMeta *meta, const CellTargets &targets,
               TupleTableSlot *slot) {
    write_key_rows(writer, meta, targets, row_key(meta, slot), row_payload(meta, slot));
}

} // namespace pgoutbox

namespace pgoutbox {

void write_all_rows(OutboxWriter *writer, Relation rel, const TableMeta *meta,
                    const CellTargets &targets) {
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TableScanDesc scan = table_beginscan(rel, snapshot, 0, nullptr);
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    MemoryContext per_row = AllocSetContextCreate(CurrentMemoryContext, "pg_outbox scanned row",
                                                  ALLOCSET_DEFAULT_SIZES);
    MemoryContext old = MemoryContextSwitchTo(per_row);
    uint32 n = 0;
    while (table_scan_getnextslot(scan, ForwardScanDirection, slot)) {
        if ((++n & 1023) == 0)
            CHECK_FOR_INTERRUPTS();
        write_row(writer, meta, targets, slot);
        MemoryContextReset(per_row);
    }
    MemoryContextSwitchTo(old);
    MemoryContextDelete(per_row);
    ExecDropSingleTupleTableSlot(slot);
    table_endscan(scan);
    UnregisterSnapshot(snapshot);
}

} // namespace pgoutbox
