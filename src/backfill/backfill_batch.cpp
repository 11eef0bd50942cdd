// outbox.process_backfill_batch(tbl, batch_size, force_synchronous): one
// batch of Sentry's ID-range backfill (SPEC section 3, planning steps 1-6):
// for every row with an id in [low, up], the outbox rows an UPDATE of it
// would write (capture/outbox_rows.hpp).  The cursor moves when the batch
// commits (cursor_store.hpp).
//
// The registry, options and cursor are read as the extension's owner; the
// table itself as its owner, restricted (pg/run_as.hpp): planning the id
// queries runs the owner's index predicates and operators, and the payload
// runs the owner's casts.  The outbox rows are written by capture's writer,
// which checks no privilege.
//
// Written without C++ objects that own resources around PostgreSQL calls:
// errors unwind through it freely.
#include "backfill/backfill_batch.hpp"

#include "capture/outbox_rows.hpp"
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "pg/subtransaction.hpp"
#include "stats/stats.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "lib/stringinfo.h"
}

namespace pgoutbox {

// Runs inside SPI, as the extension's owner.
Registration load_registration(Oid relid, bool force_synchronous) {
    Oid argtypes[2] = {REGCLASSOID, BOOLOID};
    Datum args[2] = {ObjectIdGetDatum(relid), BoolGetDatum(force_synchronous)};
    pg::spi_run("reading the registration",
                "SELECT r.table_key, r.category, r.replication_version,"
                " outbox.find_replication_version(r.relid, $2),"
                " pg_catalog.jsonb_typeof(o.cells) OPERATOR(pg_catalog.=) 'array',"
                " outbox.target_cells(r.relid)"
                " FROM outbox._registered($1) r,"
                " LATERAL (SELECT outbox.get_option('outbox_replication.' OPERATOR(pg_catalog.||)"
                "  r.table_key OPERATOR(pg_catalog.||) '.backfill.target_cells') AS cells) o",
                2, argtypes, args, nullptr, true, 1, SPI_OK_SELECT);
    if (SPI_processed != 1)
        elog(ERROR, "pg_outbox: registration of %u not found", relid);
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    bool isnull;
    Registration reg;
    reg.table_key = SPI_getvalue(row, desc, 1);
    reg.category = DatumGetInt32(SPI_getbinval(row, desc, 2, &isnull));
    reg.coded_version = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
    reg.target_version = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
    Datum listed = SPI_getbinval(row, desc, 5, &isnull);
    reg.has_target_cells = !isnull && DatumGetBool(listed);
    Datum *items;
    bool *nulls;
    deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(row, desc, 6, &isnull)), TEXTOID, -1, false,
                      TYPALIGN_INT, &items, &nulls, &reg.ntarget_cells);
    reg.target_cells = (char **)palloc(sizeof(char *) * Max(reg.ntarget_cells, 1));
    for (int i = 0; i < reg.ntarget_cells; i++)
        reg.target_cells[i] = TextDatumGetCString(items[i]);
    return reg;
}

// Where the control rows of the batch go: a table without a cell column
// fans out to outbox.target_cells(tbl); a table with one writes each row for
// its cell, and, when the target_cells option is set, only for those cells.
// No cell registered is an ERROR, as for capture.
CellTargets backfill_targets(const TableMeta *meta, const Registration &reg) {
    if (meta->cell_attnum != InvalidAttrNumber)
        return CellTargets{reg.ntarget_cells, reg.target_cells, reg.has_target_cells};
    if (registry_get()->ncells == 0)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("no cell is registered: control table %s has no cell to be "
                               "backfilled to",
                               meta->relname),
                        errhint("Register the cells with outbox.register_cell(name).")));
    return CellTargets{reg.ntarget_cells, reg.target_cells, true};
}

namespace {

// The smallest id, or false when the table is empty.  As the table's owner.
bool min_id(const char *table, int64 *result) {
    pg::spi_run("reading the smallest id",
                psprintf("SELECT pg_catalog.min(t.id)::pg_catalog.int8 FROM %s t", table), 0,
                nullptr, nullptr, nullptr, true, 1, SPI_OK_SELECT);
    bool isnull;
    Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull)
        *result = DatumGetInt64(value);
    return !isnull;
}

} // namespace

bool upper_id(const char *table, int64 lower, int64 limit, int64 *result) {
    Oid argtypes[2] = {INT8OID, INT8OID};
    Datum args[2] = {Int64GetDatum(lower), Int64GetDatum(limit)};
    pg::spi_run("planning the batch",
                psprintf("SELECT pg_catalog.max(s.id)::pg_catalog.int8 FROM"
                         " (SELECT t.id FROM %s t WHERE t.id OPERATOR(pg_catalog.>=) $1"
                         " ORDER BY t.id LIMIT $2) s",
                         table),
                2, argtypes, args, nullptr, true, 1, SPI_OK_SELECT);
    bool isnull;
    Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull)
        *result = DatumGetInt64(value);
    return !isnull;
}

bool shard_at_bound(Relation rel, const TableMeta *meta, const char *table, const char *condition,
                    int nargs, Oid *argtypes, Datum *args, int32 max_depth) {
    AttrNumber shard =
        meta->shard_attnum != InvalidAttrNumber ? meta->shard_attnum : meta->id_attnum;
    pg::spi_run("reading the batch's shards",
                psprintf("SELECT pg_catalog.array_agg(DISTINCT t.%s::pg_catalog.int8) FROM %s t"
                         " WHERE %s",
                         quote_identifier(
                             NameStr(TupleDescAttr(RelationGetDescr(rel), shard - 1)->attname)),
                         table, condition),
                nargs, argtypes, args, nullptr, true, 1, SPI_OK_SELECT);
    bool isnull;
    Datum shards = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (isnull)
        return false;
    shards = PointerGetDatum(DatumGetArrayTypePCopy(shards));
    bool control = meta->silo == Silo::Control;
    Oid depth_types[3] = {INT8ARRAYOID, INT4OID, INT4OID};
    Datum depth_args[3] = {shards, Int32GetDatum(meta->scope), Int32GetDatum(max_depth)};
    bool deep = false;
    pg::spi_run_as(
        pg::extension_owner_role, "reading the depth of the batch's shards",
        psprintf("SELECT EXISTS (SELECT FROM outbox.%s o"
                 " WHERE o.shard_identifier = ANY ($1) AND o.shard_scope = $2"
                 " GROUP BY o.shard_identifier%s HAVING pg_catalog.count(*) >= $3)",
                 control ? "control_outbox" : "cell_outbox", control ? ", o.cell_name" : ""),
        3, depth_types, depth_args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
            bool null;
            deep =
                DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &null));
        });
    return deep;
}

int64 write_rows(Relation rel, const TableMeta *meta, const CellTargets &targets, const char *table,
                 const char *condition, int nargs, Oid *argtypes, Datum *args) {
    TableMeta view = *meta;
    StringInfoData sql;
    initStringInfo(&sql);
    appendStringInfoString(&sql, "SELECT t.id");
    view.id_attnum = 1;
    AttrNumber next = 2;
    auto select = [&](AttrNumber attnum) {
        appendStringInfo(
            &sql, ", t.%s",
            quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname)));
        return next++;
    };
    if (meta->shard_attnum != InvalidAttrNumber)
        view.shard_attnum = select(meta->shard_attnum);
    if (meta->cell_attnum != InvalidAttrNumber)
        view.cell_attnum = select(meta->cell_attnum);
    view.payload = (PayloadColumn *)palloc(sizeof(PayloadColumn) * Max(meta->npayload, 1));
    for (int i = 0; i < meta->npayload; i++) {
        view.payload[i] = meta->payload[i];
        view.payload[i].attnum = select(meta->payload[i].attnum);
    }
    appendStringInfo(&sql, " FROM %s t WHERE %s", table, condition);

    Portal portal =
        SPI_cursor_open_with_args(nullptr, sql.data, nargs, argtypes, args, nullptr, true, 0);
    OutboxWriter *writer = outbox_writer_begin(registry_get(), false);
    MemoryContext per_row = AllocSetContextCreate(CurrentMemoryContext, "pg_outbox backfill row",
                                                  ALLOCSET_DEFAULT_SIZES);
    TupleTableSlot *slot = nullptr;
    for (;;) {
        SPI_cursor_fetch(portal, true, 1000);
        if (SPI_processed == 0)
            break;
        // A copy: each chunk's tuple table, its descriptor included, is freed
        // before the next is fetched.
        if (slot == nullptr)
            slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(SPI_tuptable->tupdesc),
                                            &TTSOpsHeapTuple);
        for (uint64 i = 0; i < SPI_processed; i++) {
            MemoryContext old = MemoryContextSwitchTo(per_row);
            ExecStoreHeapTuple(SPI_tuptable->vals[i], slot, false);
            write_row(writer, &view, targets, slot);
            ExecClearTuple(slot);
            MemoryContextSwitchTo(old);
            MemoryContextReset(per_row);
        }
        SPI_freetuptable(SPI_tuptable);
    }
    SPI_cursor_close(portal);
    int64 written = outbox_writer_finish(writer);
    if (slot != nullptr)
        ExecDropSingleTupleTableSlot(slot);
    MemoryContextDelete(per_row);
    return written;
}

bool backfill_batch(Oid relid, int32 batch_size, bool force_synchronous, int32 max_shard_depth,
                    BatchPlan *plan, int64 *written, bool *throttled) {
    *throttled = false;
    // Locked before anything is read of it, and to the end of the
    // transaction: a concurrent DROP waits, or has already happened.
    Relation rel = pg::open_user_table(relid, AccessShareLock);
    if (rel == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Registration reg = load_registration(relid, force_synchronous);
    Cursor cursor = cursor_read(reg.table_key);
    pg::run_as_end(&scope);
    std::optional<Cursor> start = batch_start(cursor, reg.target_version);
    if (!start) {
        SPI_finish();
        relation_close(rel, NoLock);
        return false;
    }
    const TableMeta *meta = table_meta_get(rel);
    CellTargets targets =
        meta->silo == Silo::Control ? backfill_targets(meta, reg) : CellTargets{0, nullptr, true};
    char *table = pg::qualified_name(rel);

    pg::refuse_forced_row_security(rel);
    pg::RunAs as_owner;
    pg::run_as_table_owner(&as_owner, rel);
    int64 smallest;
    bool has_rows = min_id(table, &smallest);
    int64 low =
        clamp_lower(start->lower_bound, has_rows ? std::optional<int64_t>(smallest) : std::nullopt);
    int64 up = 0;
    if (has_rows)
        upper_id(table, low, (int64)batch_size + 1, &up);
    *plan = finish_plan(low, start->version, up, reg.coded_version);
    Oid range_types[2] = {INT8OID, INT8OID};
    Datum range[2] = {Int64GetDatum(plan->low), Int64GetDatum(plan->up)};
    if (max_shard_depth > 0 && plan->count > 0 && has_rows &&
        shard_at_bound(rel, meta, table, id_range_condition, 2, range_types, range,
                       max_shard_depth)) {
        // Backpressure: nothing written, the cursor where it was; the same
        // batch again once the drain has brought the shard down.
        pg::run_as_end(&as_owner);
        SPI_finish();
        relation_close(rel, NoLock);
        *throttled = true;
        return false;
    }
    *written = 0;
    if (plan->count > 0 && has_rows) {
        *written = write_rows(rel, meta, targets, table, id_range_condition, 2, range_types, range);
    }
    pg::run_as_end(&as_owner);

    cursor_write(reg.table_key, plan->next);
    stats_count_backfill(reg.category, *written);
    if (*written > 0)
        notify_consumers_at_commit();
    SPI_finish();
    relation_close(rel, NoLock);
    return true;
}

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox_process_backfill_batch) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("tbl must not be NULL")));
    if (PG_ARGISNULL(1))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("batch_size must not be NULL")));
    if (PG_ARGISNULL(2))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("force_synchronous must not be NULL")));
    Oid relid = PG_GETARG_OID(0);
    int32 batch_size = PG_GETARG_INT32(1);
    bool force_synchronous = PG_GETARG_BOOL(2);
    if (batch_size <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("batch_size must be positive, not %d", batch_size)));

    TupleDesc result_desc;
    if (get_call_result_type(fcinfo, nullptr, &result_desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: process_backfill_batch must return outbox.backfill_batch");
    MemoryContext caller = CurrentMemoryContext;
    BatchPlan plan;
    int64 written;
    bool throttled;
    if (!backfill_batch(relid, batch_size, force_synchronous, 0, &plan, &written, &throttled))
        PG_RETURN_NULL();
    MemoryContextSwitchTo(caller);
    Datum values[6] = {Int64GetDatum(plan.low),     Int64GetDatum(plan.up),
                       Int32GetDatum(plan.version), BoolGetDatum(plan.has_more),
                       Int64GetDatum(plan.count),   Int64GetDatum(written)};
    bool nulls[6] = {false, false, false, false, false, false};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(result_desc), values, nulls));
}

// outbox._table_id_range(tbl, OUT min_id, OUT max_id), behind
// outbox.backfill_status and outbox.foreign_keys (which pg_monitor members
// read): the smallest and largest id, read as the table's owner like a
// batch; NULLs for an empty table, or one dropped meanwhile, and, with a
// WARNING, for one whose lock or owner code passed its bound
// (pg/run_as.hpp): one tenant's table does not make the views fail.
OUTBOX_FUNCTION(outbox__table_id_range) {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: _table_id_range must return a composite");
    Datum values[2] = {0, 0};
    bool nulls[2] = {true, true};
    if (PG_ARGISNULL(0))
        return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
    Oid relid = PG_GETARG_OID(0);
    ErrorData *error = pg::in_subtransaction(
        [&] {
            Relation rel = pg::open_user_table(relid, AccessShareLock);
            if (rel == nullptr)
                return;
            char *table = pg::qualified_name(rel);
            pg::refuse_forced_row_security(rel);
            // int8 values are passed by value: they outlive the SPI connection.
            pg::spi_run_as(pg::table_owner_role(rel), "reading the id range",
                           psprintf("SELECT pg_catalog.min(t.id)::pg_catalog.int8,"
                                    " pg_catalog.max(t.id)::pg_catalog.int8 FROM %s t",
                                    table),
                           0, nullptr, nullptr, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                               for (int i = 0; i < 2; i++)
                                   values[i] =
                                       SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
                                                     i + 1, &nulls[i]);
                           });
            relation_close(rel, NoLock);
        },
        pg::owner_bound_passed);
    if (error != nullptr) {
        ereport(WARNING, (errcode(error->sqlerrcode),
                          errmsg("pg_outbox: the id range of table with OID %u is unknown: %s",
                                 relid, error->message)));
        values[0] = values[1] = 0;
        nulls[0] = nulls[1] = true;
    }
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
