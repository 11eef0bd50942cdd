#include "pg/spi.hpp"

extern "C" {
#include "utils/array.h"
}

namespace pgoutbox::pg {

uint64 spi_run(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
               const char *nulls, bool read_only, long limit, int expected) {
    int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, limit);
    // A statement that ran but is of another kind than expected can only be
    // a caller's (outbox._run_as_table_owner): a bad argument, not a bug.
    if (rc >= 0 && rc != expected)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("pg_outbox: %s: the statement is %s, not %s", what,
                               SPI_result_code_string(rc), SPI_result_code_string(expected))));
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    return SPI_processed;
}

SPIPlanPtr spi_prepare_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs,
                            Oid *types, int cursor_options) {
    if (*plan == nullptr) {
        SPIPlanPtr prepared = SPI_prepare_cursor(sql, nargs, types, cursor_options);
        if (prepared == nullptr)
            elog(ERROR, "pg_outbox: preparing %s failed: %s", what,
                 SPI_result_code_string(SPI_result));
        (void)SPI_keepplan(prepared);
        *plan = prepared;
    }
    return *plan;
}

uint64 spi_run_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                    Datum *values, const char *nulls, bool read_only, int expected) {
    int rc =
        SPI_execute_plan(spi_prepare_kept(plan, what, sql, nargs, types, CURSOR_OPT_GENERIC_PLAN),
                         values, nulls, read_only, 0);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    return SPI_processed;
}

Datum int4_array(const int32 *values, int n) {
    Datum *items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    for (int i = 0; i < n; i++)
        items[i] = Int32GetDatum(values[i]);
    return PointerGetDatum(construct_array(items, n, INT4OID, 4, true, TYPALIGN_INT));
}

uint64 spi_run_here(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                    bool read_only, int expected) {
    MemoryContext caller = CurrentMemoryContext;
    uint64 n = spi_run(what, sql, nargs, types, values, nullptr, read_only, 0, expected);
    MemoryContextSwitchTo(caller);
    return n;
}

Datum int8_array(const int64 *values, int n) {
    Datum *items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    for (int i = 0; i < n; i++)
        items[i] = Int64GetDatum(values[i]);
    return PointerGetDatum(construct_array(items, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

Datum tid_array(const ItemPointerData *tids, int n) {
    Datum *items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    for (int i = 0; i < n; i++)
        items[i] = PointerGetDatum(&tids[i]);
    return PointerGetDatum(
        construct_array(items, n, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT));
}

} // namespace pgoutbox::pg
