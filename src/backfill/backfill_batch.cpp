// outbox.process_backfill_batch(tbl, batch_size, force_synchronous): one
// batch of Sentry's ID-range backfill (SPEC section 3, planning steps 1-6),
// written as one INSERT ... SELECT: the outbox rows an UPDATE of each row in
// [low, up] would write.  The cursor moves when the batch commits
// (cursor_store.hpp).
//
// Written without C++ objects that own resources around PostgreSQL calls:
// errors unwind through it freely.
#include "backfill/batch_plan.hpp"
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"
#include "pg/privileged.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "lib/stringinfo.h"
}

namespace pgoutbox {

namespace {

struct Registration {
    char *table_key;
    bool control;
    int32 category;
    int32 scope;
    char *shard_column; // NULL: id
    char *cell_column;
    Datum payload_columns; // text[], or 0
    int32 coded_version;
    int32 target_version;
    Datum target_cells; // jsonb option, or 0 when unset
};

char *column(HeapTuple row, TupleDesc desc, int n) {
    return SPI_getvalue(row, desc, n);
}

// Runs inside SPI and the privileged scope.
Registration load_registration(Oid relid, bool force_synchronous) {
    Oid argtypes[2] = {REGCLASSOID, BOOLOID};
    Datum args[2] = {ObjectIdGetDatum(relid), BoolGetDatum(force_synchronous)};
    int rc = SPI_execute_with_args(
        "SELECT r.table_key, r.silo, r.category, c.scope, r.shard_column::text,"
        " r.cell_column::text, r.payload_columns::text[], r.replication_version,"
        " outbox.find_replication_version(r.relid, $2),"
        " outbox.get_option('outbox_replication.' || r.table_key || '.backfill.target_cells')"
        " FROM outbox._registered($1) r JOIN outbox.categories c ON c.id = r.category",
        2, argtypes, args, nullptr, true, 1);
    if (rc != SPI_OK_SELECT || SPI_processed != 1)
        elog(ERROR, "pg_outbox: registry lookup failed: %s", SPI_result_code_string(rc));
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    bool isnull;
    Registration reg;
    reg.table_key = column(row, desc, 1);
    reg.control = strcmp(column(row, desc, 2), "control") == 0;
    reg.category = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
    reg.scope = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
    reg.shard_column = column(row, desc, 5);
    reg.cell_column = column(row, desc, 6);
    Datum payload = SPI_getbinval(row, desc, 7, &isnull);
    reg.payload_columns = isnull ? (Datum)0 : SPI_datumTransfer(payload, false, -1);
    reg.coded_version = DatumGetInt32(SPI_getbinval(row, desc, 8, &isnull));
    reg.target_version = DatumGetInt32(SPI_getbinval(row, desc, 9, &isnull));
    Datum cells = SPI_getbinval(row, desc, 10, &isnull);
    reg.target_cells = isnull ? (Datum)0 : SPI_datumTransfer(cells, false, -1);
    return reg;
}

char *qualified_name(Oid relid) {
    return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
                                      get_rel_name(relid));
}

// NULL when the table is empty.
bool min_id(const char *table, int64 *result) {
    char *sql = psprintf("SELECT pg_catalog.min(t.id)::pg_catalog.int8 FROM %s t", table);
    SPI_execute(sql, true, 1);
    bool isnull;
    Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull)
        *result = DatumGetInt64(value);
    return !isnull;
}

// The largest id among the first limit rows with id >= lower, or 0.
int64 upper_id(const char *table, int64 lower, int64 limit) {
    char *sql = psprintf("SELECT pg_catalog.max(s.id)::pg_catalog.int8 FROM"
                         " (SELECT t.id FROM %s t WHERE t.id >= $1 ORDER BY t.id LIMIT $2) s",
                         table);
    Oid argtypes[2] = {INT8OID, INT8OID};
    Datum args[2] = {Int64GetDatum(lower), Int64GetDatum(limit)};
    SPI_execute_with_args(sql, 2, argtypes, args, nullptr, true, 1);
    bool isnull;
    Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    return isnull ? 0 : DatumGetInt64(value);
}

// Cells a fan-out (no cell column) control backfill writes to: the
// target_cells option intersected with the registered cells, else all of
// them.  No cell registered is an error, as it is for capture.
Datum fan_out_cells(const Registration &reg, const char *table) {
    Oid argtypes[1] = {JSONBOID};
    Datum args[1] = {reg.target_cells};
    char nulls[2] = {reg.target_cells == (Datum)0 ? 'n' : ' ', '\0'};
    SPI_execute_with_args(
        "SELECT (SELECT pg_catalog.count(*) FROM outbox.cells),"
        " ARRAY(SELECT c.name FROM outbox.cells c WHERE $1 IS NULL"
        "   OR pg_catalog.jsonb_typeof($1) = 'null'"
        "   OR c.name IN (SELECT pg_catalog.jsonb_array_elements_text($1)) ORDER BY c.name)",
        1, argtypes, args, nulls, true, 1);
    bool isnull;
    int64 registered =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    if (registered == 0)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("no cell is registered: control table %s has no cell to be "
                               "backfilled to",
                               table),
                        errhint("Register the cells with outbox.register_cell(name).")));
    Datum cells = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
    return SPI_datumTransfer(cells, false, -1);
}

char *payload_expression(const Registration &reg) {
    if (reg.payload_columns == (Datum)0)
        return pstrdup("NULL::pg_catalog.jsonb");
    Datum *names;
    bool *nulls;
    int count;
    deconstruct_array(DatumGetArrayTypeP(reg.payload_columns), TEXTOID, -1, false, TYPALIGN_INT,
                      &names, &nulls, &count);
    StringInfoData sql;
    initStringInfo(&sql);
    appendStringInfoString(&sql, "pg_catalog.jsonb_build_object(");
    for (int i = 0; i < count; i++) {
        char *name = TextDatumGetCString(names[i]);
        appendStringInfo(&sql, "%s%s, t.%s", i > 0 ? ", " : "", quote_literal_cstr(name),
                         quote_identifier(name));
    }
    appendStringInfoChar(&sql, ')');
    return sql.data;
}

// Writes the outbox rows of ids [low, up]; returns how many.
int64 write_rows(const Registration &reg, const char *table, int64 low, int64 up) {
    const char *shard = reg.shard_column ? quote_identifier(reg.shard_column) : "id";
    char *payload = payload_expression(reg);
    Oid argtypes[5] = {INT8OID, INT8OID, INT4OID, INT4OID, TEXTARRAYOID};
    Datum args[5] = {Int64GetDatum(low), Int64GetDatum(up), Int32GetDatum(reg.scope),
                     Int32GetDatum(reg.category), (Datum)0};
    char nulls[6] = "    n";
    char *sql;
    if (!reg.control) {
        sql = psprintf("INSERT INTO outbox.cell_outbox"
                       " (shard_scope, shard_identifier, category, object_identifier, payload)"
                       " SELECT $3, t.%s, $4, t.id, %s FROM %s t"
                       " WHERE t.id >= $1 AND t.id <= $2",
                       shard, payload, table);
    } else if (reg.cell_column == nullptr) {
        args[4] = fan_out_cells(reg, table);
        nulls[4] = ' ';
        sql = psprintf("INSERT INTO outbox.control_outbox (shard_scope, shard_identifier,"
                       " category, object_identifier, payload, cell_name)"
                       " SELECT $3, t.%s, $4, t.id, %s, c.cell"
                       " FROM %s t CROSS JOIN pg_catalog.unnest($5) AS c(cell)"
                       " WHERE t.id >= $1 AND t.id <= $2",
                       shard, payload, table);
    } else {
        // A cell column: rows of the listed cells only, when a list is set.
        if (reg.target_cells != (Datum)0) {
            Oid cell_argtypes[1] = {JSONBOID};
            Datum cell_args[1] = {reg.target_cells};
            SPI_execute_with_args("SELECT CASE WHEN pg_catalog.jsonb_typeof($1) = 'array' THEN"
                                  " ARRAY(SELECT pg_catalog.jsonb_array_elements_text($1)) END",
                                  1, cell_argtypes, cell_args, nullptr, true, 1);
            bool isnull;
            Datum cells = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
            if (!isnull) {
                args[4] = SPI_datumTransfer(cells, false, -1);
                nulls[4] = ' ';
            }
        }
        const char *cell = quote_identifier(reg.cell_column);
        sql = psprintf("INSERT INTO outbox.control_outbox (shard_scope, shard_identifier,"
                       " category, object_identifier, payload, cell_name)"
                       " SELECT $3, t.%s, $4, t.id, %s, t.%s FROM %s t"
                       " WHERE t.id >= $1 AND t.id <= $2"
                       " AND ($5 IS NULL OR t.%s = ANY ($5))",
                       shard, payload, cell, table, cell);
    }
    int rc = SPI_execute_with_args(sql, 5, argtypes, args, nulls, false, 0);
    if (rc != SPI_OK_INSERT)
        elog(ERROR, "pg_outbox: backfill insert failed: %s", SPI_result_code_string(rc));
    return (int64)SPI_processed;
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(process_backfill_batch) {
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

    SPI_connect();
    pg::PrivilegedScope scope;
    pg::privileged_begin(&scope);
    Registration reg = load_registration(relid, force_synchronous);
    Cursor cursor = cursor_read(reg.table_key);
    std::optional<Cursor> start = batch_start(cursor, reg.target_version);
    if (!start) {
        pg::privileged_end(&scope);
        SPI_finish();
        PG_RETURN_NULL();
    }
    char *table = qualified_name(relid);
    int64 smallest;
    bool has_rows = min_id(table, &smallest);
    int64 low =
        clamp_lower(start->lower_bound, has_rows ? std::optional<int64_t>(smallest) : std::nullopt);
    int64 up = has_rows ? upper_id(table, low, (int64)batch_size + 1) : 0;
    BatchPlan plan = finish_plan(low, start->version, up, reg.coded_version);
    int64 written = plan.count > 0 && has_rows ? write_rows(reg, table, plan.low, plan.up) : 0;
    cursor_write(reg.table_key, plan.next);
    stats_count_backfill(reg.category, written);
    pg::privileged_end(&scope);
    SPI_finish();

    MemoryContextSwitchTo(caller);
    Datum values[6] = {Int64GetDatum(plan.low),     Int64GetDatum(plan.up),
                       Int32GetDatum(plan.version), BoolGetDatum(plan.has_more),
                       Int64GetDatum(plan.count),   Int64GetDatum(written)};
    bool nulls[6] = {false, false, false, false, false, false};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(result_desc), values, nulls));
}
