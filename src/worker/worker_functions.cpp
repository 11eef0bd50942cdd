// SQL entry points over the worker's shared state: outbox.wake_worker() and
// outbox._worker_status() (behind the view outbox.worker_status) and
// outbox._backfill_throttled() (behind outbox.backfill_status).
#include "pg/guard.hpp"
#include "settings.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/trigger.h"
}

using namespace pgoutbox;

// Wakes the worker for a cycle now; returns whether it is running.
OUTBOX_FUNCTION(outbox_wake_worker) {
    if (worker_shared == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("the pg_outbox worker is not available"),
                        errhint("Add pg_outbox to shared_preload_libraries and restart.")));
    PG_RETURN_BOOL(worker_wake_for_cycle());
}

namespace {

bool wake_at_commit = false;

// Runs at commit: raises no ERROR (worker_wake_for_cycle takes a spinlock
// and sets a latch).
void wake_cycle_at_commit(XactEvent event, void *) {
    if (event == XACT_EVENT_COMMIT && wake_at_commit)
        (void)worker_wake_for_cycle();
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
        wake_at_commit = false;
}

} // namespace

OUTBOX_FUNCTION(outbox__wake_worker_at_commit) {
    static bool registered = false;
    if (worker_shared == nullptr)
        PG_RETURN_VOID();
    if (!registered) {
        RegisterXactCallback(wake_cycle_at_commit, nullptr);
        registered = true;
    }
    wake_at_commit = true;
    PG_RETURN_VOID();
}

// The statement trigger of SQL that writes the outboxes, registers a
// handler or resumes a paused shard (extension/functions/60_drain.sql): its
// argument names the silo ('cell', 'control' or 'both') whose partitions
// the worker reads again once the transaction commits
// (delivery/partition_watch.hpp), or 'handlers' (both, and the worker's
// registry is read again first).  Capture and backfill write the outbox
// without SQL and say which partitions themselves.
OUTBOX_FUNCTION(outbox__drain_soon) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._drain_soon() is a trigger function")));
    const Trigger *trigger = ((TriggerData *)fcinfo->context)->tg_trigger;
    const char *silo = trigger->tgnargs == 1 ? trigger->tgargs[0] : "";
    bool handlers = strcmp(silo, "handlers") == 0;
    bool cell = strcmp(silo, "cell") == 0 || strcmp(silo, "both") == 0 || handlers;
    bool control = strcmp(silo, "control") == 0 || strcmp(silo, "both") == 0 || handlers;
    if (!cell && !control)
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._drain_soon() takes one argument: 'cell', 'control', "
                               "'both' or 'handlers'")));
    if (handlers)
        handlers_changed_at_commit();
    if (cell)
        drain_at_commit(0, ~uint64(0));
    if (control)
        drain_at_commit(1, ~uint64(0));
    return PointerGetDatum(nullptr);
}

// One row, always: without the preload the state says so and the rest is
// NULL, so monitoring never fails on it.
OUTBOX_FUNCTION(outbox__worker_status) {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: _worker_status must return a composite");
    enum {
        STATE,
        PID,
        DATABASE,
        CYCLE_START,
        CYCLE_END,
        SHARDS,
        MESSAGES,
        SCHEDULED,
        BACKFILLED,
        BUDGET,
        PAUSED,
        GUARD,
        ERROR_TEXT,
        ERROR_AT,
        NCOLUMNS
    };
    Datum values[NCOLUMNS];
    bool nulls[NCOLUMNS];
    for (int i = 0; i < NCOLUMNS; i++)
        nulls[i] = true;
    if (worker_shared == nullptr) {
        values[STATE] = CStringGetTextDatum("not_preloaded");
        nulls[STATE] = false;
        return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
    }
    WorkerShared copy;
    SpinLockAcquire(&worker_shared->mutex);
    copy = *worker_shared;
    SpinLockRelease(&worker_shared->mutex);
    const char *state = copy.pid != 0 ? (copy.enabled ? "running" : "disabled") : "stopped";
    for (int i = 0; i < NCOLUMNS; i++)
        nulls[i] = false;
    values[STATE] = CStringGetTextDatum(state);
    values[PID] = Int32GetDatum(copy.pid);
    nulls[PID] = copy.pid == 0;
    values[DATABASE] = CStringGetTextDatum(database_name);
    values[CYCLE_START] = TimestampTzGetDatum(copy.last_cycle_start);
    nulls[CYCLE_START] = copy.last_cycle_start == 0;
    values[CYCLE_END] = TimestampTzGetDatum(copy.last_cycle_end);
    nulls[CYCLE_END] = copy.last_cycle_end == 0;
    values[SHARDS] = Int64GetDatum(copy.shards_drained);
    values[MESSAGES] = Int64GetDatum(copy.messages_delivered);
    values[SCHEDULED] = Int64GetDatum(copy.rows_scheduled);
    values[BACKFILLED] = Int64GetDatum(copy.rows_backfilled);
    values[BUDGET] = Int64GetDatum(copy.backfill_budget_left);
    nulls[BUDGET] = copy.last_cycle_end == 0;
    values[PAUSED] = BoolGetDatum(copy.backfill_paused);
    values[GUARD] = Int32GetDatum(copy.backfill_max_shard_depth);
    nulls[GUARD] = copy.pid == 0;
    values[ERROR_TEXT] = CStringGetTextDatum(copy.last_error);
    nulls[ERROR_TEXT] = copy.last_error_at == 0;
    values[ERROR_AT] = TimestampTzGetDatum(copy.last_error_at);
    nulls[ERROR_AT] = copy.last_error_at == 0;
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

// The tables whose backfill waits for a shard to drain
// (outbox.backfill_max_shard_depth), as an oid[]; empty without the preload.
OUTBOX_FUNCTION(outbox__backfill_throttled) {
    Datum items[lengthof(worker_shared->throttled)];
    int n = 0;
    if (worker_shared != nullptr) {
        SpinLockAcquire(&worker_shared->mutex);
        for (int i = 0; i < worker_shared->nthrottled; i++)
            items[n++] = ObjectIdGetDatum(worker_shared->throttled[i]);
        SpinLockRelease(&worker_shared->mutex);
    }
    PG_RETURN_ARRAYTYPE_P(construct_array(items, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

// The tables whose backfill or cascade (job) the worker holds back after a
// failure, as an oid[]; empty without the preload.
OUTBOX_FUNCTION(outbox__tables_failing) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job must not be NULL")));
    char *job = text_to_cstring(PG_GETARG_TEXT_PP(0));
    if (strcmp(job, "backfill") != 0 && strcmp(job, "cascade") != 0)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("job must be 'backfill' or 'cascade', not %s", quote_literal_cstr(job))));
    Datum items[lengthof(worker_shared->failing)];
    int n = 0;
    if (worker_shared != nullptr) {
        SpinLockAcquire(&worker_shared->mutex);
        for (int i = 0; i < worker_shared->nfailing; i++)
            if (worker_shared->failing_job[i] == job[0])
                items[n++] = ObjectIdGetDatum(worker_shared->failing[i]);
        SpinLockRelease(&worker_shared->mutex);
    }
    PG_RETURN_ARRAYTYPE_P(construct_array(items, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}
