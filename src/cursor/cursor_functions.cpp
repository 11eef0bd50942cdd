// SQL entry points over the cursor store: outbox._cursor_get(table_key) and
// outbox._cursor_set(table_key, lower_bound, version), behind
// get_processing_state / set_processing_state (which check the arguments),
// outbox._cursor_forget(table_key), behind cancel_resync,
// and outbox._cursor_peek(table_key), behind outbox.backfill_status;
// outbox._watermark_peek(key), behind outbox.foreign_keys.
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"

using namespace pgoutbox;

namespace {

// (lower_bound, version), or two NULLs for no cursor.
Datum cursor_datum(FunctionCallInfo fcinfo, const Cursor *cursor) {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: cursor functions must return a composite");
    Datum values[2] = {cursor ? Int64GetDatum(cursor->lower_bound) : (Datum)0,
                       cursor ? Int32GetDatum(cursor->version) : (Datum)0};
    bool nulls[2] = {cursor == nullptr, cursor == nullptr};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

// The table key argument; these are internal functions, but NULL from any
// caller is an ERROR, not a crash.
char *table_key_argument(FunctionCallInfo fcinfo) {
    if (PG_ARGISNULL(0))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("table_key must not be NULL")));
    return text_to_cstring(PG_GETARG_TEXT_PP(0));
}

} // namespace

OUTBOX_FUNCTION(outbox__cursor_get) {
    char *table_key = table_key_argument(fcinfo);
    Cursor cursor = cursor_read(table_key);
    return cursor_datum(fcinfo, &cursor);
}

OUTBOX_FUNCTION(outbox__cursor_peek) {
    char *table_key = table_key_argument(fcinfo);
    Cursor cursor;
    bool found = cursor_peek(table_key, &cursor);
    return cursor_datum(fcinfo, found ? &cursor : nullptr);
}

OUTBOX_FUNCTION(outbox__cursor_set) {
    char *table_key = table_key_argument(fcinfo);
    if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                 errmsg("%s must not be NULL", PG_ARGISNULL(1) ? "lower_bound" : "version")));
    cursor_write(table_key, Cursor{PG_GETARG_INT64(1), PG_GETARG_INT32(2)});
    PG_RETURN_VOID();
}

OUTBOX_FUNCTION(outbox__cursor_forget) {
    cursor_forget(table_key_argument(fcinfo));
    PG_RETURN_VOID();
}

OUTBOX_FUNCTION(outbox__watermark_peek) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("key must not be NULL")));
    StoredWatermark watermark;
    bool found = watermark_peek(text_to_cstring(PG_GETARG_TEXT_PP(0)), &watermark);
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: _watermark_peek must return a composite");
    Datum values[2] = {found ? Int64GetDatum(watermark.low) : (Datum)0,
                       found ? CStringGetTextDatum(watermark.transaction_id) : (Datum)0};
    bool nulls[2] = {!found, !found};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
