// SQL entry points over the cursor store: outbox._cursor_get(table_key) and
// outbox._cursor_set(table_key, lower_bound, version), behind
// get_processing_state / set_processing_state (which check the arguments).
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"

using namespace pgoutbox;

OUTBOX_FUNCTION(cursor_get) {
    char *table_key = text_to_cstring(PG_GETARG_TEXT_PP(0));
    Cursor cursor = cursor_read(table_key);
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: _cursor_get must return a composite");
    Datum values[2] = {Int64GetDatum(cursor.lower_bound), Int32GetDatum(cursor.version)};
    bool nulls[2] = {false, false};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

OUTBOX_FUNCTION(cursor_set) {
    char *table_key = text_to_cstring(PG_GETARG_TEXT_PP(0));
    cursor_write(table_key, Cursor{PG_GETARG_INT64(1), PG_GETARG_INT32(2)});
    PG_RETURN_VOID();
}
