// SQL entry points over the counters: outbox._stats() (behind the view
// outbox.stats), outbox._stats_untracked() (for metrics) and
// outbox.stats_reset().
#include "pg/guard.hpp"
#include "stats/stats.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "funcapi.h"
#include "utils/timestamp.h"
}

using namespace pgoutbox;

namespace {

void require_preload() {
    if (!stats_available())
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pg_outbox statistics need pg_outbox in shared_preload_libraries"),
                        errhint("Add pg_outbox to shared_preload_libraries and restart.")));
}

Datum lag_interval(int64 micros) {
    auto *interval = (Interval *)palloc0(sizeof(Interval));
    interval->time = micros;
    return IntervalPGetDatum(interval);
}

} // namespace

OUTBOX_FUNCTION(outbox__stats) {
    require_preload();
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    CategoryStats *rows;
    int n = stats_read(&rows);
    for (int i = 0; i < n; i++) {
        const CategoryStats &r = rows[i];
        Datum values[12] = {Int32GetDatum(r.category),
                            Int64GetDatum(r.saved),
                            Int64GetDatum(r.backfilled),
                            Int64GetDatum(r.backfill_batches),
                            Int64GetDatum(r.delivered),
                            Int64GetDatum(r.processed),
                            Int64GetDatum(r.handler_errors),
                            lag_interval(r.lag_p50),
                            lag_interval(r.lag_p99),
                            lag_interval(r.lag_max),
                            TimestampTzGetDatum(r.last_delivery_at),
                            TimestampTzGetDatum(r.since)};
        bool nulls[12] = {false};
        nulls[7] = nulls[8] = nulls[9] = r.delivered == 0;
        nulls[10] = r.last_delivery_at == 0;
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
    return (Datum)0;
}

OUTBOX_FUNCTION(outbox__stats_untracked) {
    require_preload();
    PG_RETURN_INT64(stats_untracked());
}

// outbox._stats_reset(keep int[]): zeroes this database's counters of the
// categories in keep (the registered ones), forgets the others, and zeroes
// the worker's totals.
OUTBOX_FUNCTION(outbox__stats_reset) {
    require_preload();
    ArrayType *array = PG_GETARG_ARRAYTYPE_P(0);
    Datum *items;
    bool *nulls;
    int n;
    deconstruct_array(array, INT4OID, sizeof(int32), true, TYPALIGN_INT, &items, &nulls, &n);
    auto *keep = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    for (int i = 0; i < n; i++)
        keep[i] = DatumGetInt32(items[i]);
    stats_reset(keep, n);
    worker_reset_totals();
    PG_RETURN_VOID();
}
