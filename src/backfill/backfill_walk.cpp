// The budgeted walk's SQL functions and the list of tables it walks
// (backfill_walk.hpp).  The walk runs in the caller's transaction here: a
// batch's ERROR ends the call, as in Sentry.
#include "backfill/backfill_walk.hpp"

#include "backfill/backfill_batch.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

namespace pgoutbox {

int local_tables(int mode, MemoryContext context, Oid **tables, char ***names) {
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(silo_mode_name(mode))};
    int n = (int)pg::spi_run("listing the local tables",
                             "SELECT t::pg_catalog.oid, t::pg_catalog.text"
                             " FROM outbox._local_tables($1) t",
                             1, types, args, nullptr, true, 0, SPI_OK_SELECT);
    // After the statement: SPI switches to its own context on every call.
    MemoryContext old = MemoryContextSwitchTo(context);
    *tables = (Oid *)palloc(sizeof(Oid) * Max(n, 1));
    *names = (char **)palloc(sizeof(char *) * Max(n, 1));
    for (int i = 0; i < n; i++) {
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[i];
        (*tables)[i] = DatumGetObjectId(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        (*names)[i] = SPI_getvalue(row, SPI_tuptable->tupdesc, 2);
    }
    MemoryContextSwitchTo(old);
    return n;
}

namespace {

void require(FunctionCallInfo fcinfo, int arg, const char *name) {
    if (PG_ARGISNULL(arg))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", name)));
}

// One walk over the tables of silo_mode in this transaction.
WalkTotals walk(int mode, int64 budget, bool force_synchronous) {
    MemoryContext caller = CurrentMemoryContext;
    SPI_connect();
    Oid *tables;
    char **names;
    int ntables = local_tables(mode, caller, &tables, &names);
    SPI_finish();
    return backfill_walk(ntables, budget, [&](int i, int32 batch_size, int64 *ids, int64 *written) {
        BatchPlan plan;
        bool throttled;
        if (!backfill_batch(tables[i], batch_size, force_synchronous, 0, &plan, written,
                            &throttled))
            return BatchOutcome::Nothing;
        *ids = plan.count;
        return BatchOutcome::Ran;
    });
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

// outbox.backfill_outboxes_for(silo_mode, scheduled_count, max_batch_rate,
// force_synchronous): one walk with the budget max_batch_rate -
// scheduled_count; whether any batch covered ids (sums of id spans overflow
// a bigint when ids are sparse: only whether anything moved matters).
OUTBOX_FUNCTION(outbox_backfill_outboxes_for) {
    int mode = silo_mode;
    if (!PG_ARGISNULL(0)) {
        const char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
        for (mode = SILO_MODE_MONOLITH; mode <= SILO_MODE_CONTROL; mode++)
            if (strcmp(name, silo_mode_name(mode)) == 0)
                break;
        if (mode > SILO_MODE_CONTROL)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("silo_mode must be monolith, cell or control, not %s",
                                   quote_literal_cstr(name))));
    }
    require(fcinfo, 1, "scheduled_count");
    require(fcinfo, 2, "max_batch_rate");
    require(fcinfo, 3, "force_synchronous");
    int32 scheduled_count = PG_GETARG_INT32(1);
    int32 max_batch_rate = PG_GETARG_INT32(2);
    if (scheduled_count < 0)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("scheduled_count must be zero or positive, not %d", scheduled_count)));
    if (max_batch_rate <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("max_batch_rate must be positive, not %d", max_batch_rate)));
    int64 budget = (int64)max_batch_rate - scheduled_count;
    if (budget <= 0)
        PG_RETURN_BOOL(false);
    PG_RETURN_BOOL(walk(mode, budget, PG_GETARG_BOOL(3)).progressed);
}

// outbox.run_replications_sync(): the self-hosted path (Sentry runs it on
// `sentry upgrade`): walks of 1,000 ids, options bypassed, until one moves
// nothing.  Returns the outbox rows written.
OUTBOX_FUNCTION(outbox_run_replications_sync) {
    int64 written = 0;
    for (;;) {
        CHECK_FOR_INTERRUPTS();
        WalkTotals totals = walk(silo_mode, 1000, true);
        written = saturating_add(written, totals.rows_written);
        if (!totals.progressed)
            break;
    }
    PG_RETURN_INT64(written);
}
