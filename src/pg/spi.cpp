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

uint64 spi_run_generic(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                       int expected) {
    SPIPlanPtr plan = SPI_prepare_cursor(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
    if (plan == nullptr)
        elog(ERROR, "pg_outbox: preparing %s failed: %s", what, SPI_result_code_string(SPI_result));
    int rc = SPI_execute_plan(plan, values, nullptr, true, 0);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    SPI_freeplan(plan);
    return SPI_processed;
}

namespace {

// The DestReceiver of spi_each.
struct EachReceiver {
    DestReceiver receiver;
    void (*row)(TupleTableSlot *slot, void *arg);
    void *arg;
    uint64 rows;
};

bool each_receive(TupleTableSlot *slot, DestReceiver *self) {
    auto *each = reinterpret_cast<EachReceiver *>(self);
    each->row(slot, each->arg);
    each->rows++;
    return true;
}

void each_startup(DestReceiver *, int, TupleDesc) {}

void each_nothing(DestReceiver *) {}

} // namespace

uint64 spi_each(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                void (*row)(TupleTableSlot *slot, void *arg), void *arg) {
    // Prepared, then run once with its parameters: a custom plan for
    // them, as SPI_execute_with_args makes.
    SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
    if (plan == nullptr)
        elog(ERROR, "pg_outbox: preparing %s failed: %s", what, SPI_result_code_string(SPI_result));
    ParamListInfo params = makeParamList(nargs);
    for (int i = 0; i < nargs; i++) {
        params->params[i].value = values[i];
        params->params[i].isnull = false;
        params->params[i].pflags = PARAM_FLAG_CONST;
        params->params[i].ptype = types[i];
    }
    EachReceiver each = {
        {each_receive, each_startup, each_nothing, each_nothing, DestNone}, row, arg, 0};
    SPIExecuteOptions options = {};
    options.params = params;
    options.read_only = true;
    options.dest = &each.receiver;
    // A SELECT whose rows went to a receiver of its own is SPI_OK_UTILITY
    // (spi.c: _SPI_pquery).
    int rc = SPI_execute_plan_extended(plan, &options);
    if (rc != SPI_OK_UTILITY)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    SPI_freeplan(plan);
    return each.rows;
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

// construct_array's array, built without its copy of the values as Datums:
// a re-sync's find built arrays of 10,000 ids in each of its reads.
Datum int8_array(const int64 *values, int n) {
    if (n == 0)
        return PointerGetDatum(construct_empty_array(INT8OID));
    Size bytes = ARR_OVERHEAD_NONULLS(1) + sizeof(int64) * (Size)n;
    if (!AllocSizeIsValid(bytes))
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("array size exceeds the maximum allowed (%d)", (int)MaxArraySize)));
    auto *array = (ArrayType *)palloc(bytes);
    SET_VARSIZE(array, bytes);
    array->ndim = 1;
    array->dataoffset = 0; // no NULLs
    array->elemtype = INT8OID;
    ARR_DIMS(array)[0] = n;
    ARR_LBOUND(array)[0] = 1;
    memcpy(ARR_DATA_PTR(array), values, sizeof(int64) * (Size)n);
    return PointerGetDatum(array);
}

Datum tid_array(const ItemPointerData *tids, int n) {
    Datum *items = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    for (int i = 0; i < n; i++)
        items[i] = PointerGetDatum(&tids[i]);
    return PointerGetDatum(
        construct_array(items, n, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT));
}

} // namespace pgoutbox::pg
