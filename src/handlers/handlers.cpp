// The SQL handler sink (handlers.hpp): a batch's messages to the handler
// functions registered for their categories, under savepoints, each as its
// function's owner.  Written without C++ objects that own resources around
// PostgreSQL calls: errors unwind through it freely, and the savepoint
// pattern is PL/pgSQL's exception block.
#include "handlers/handlers.hpp"

#include "pg/guard.hpp"
#include "settings.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "catalog/pg_proc.h"
#include "storage/latch.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/typcache.h"
}

namespace pgoutbox {

const char *handler_search_path = nullptr;

namespace {

// Subtransactions a batch opens: 1 + 2 per failure.  It takes no new
// failure once it has opened this many, nor when the transaction's cache of
// subtransaction XIDs is nearly full (subtransactions_left).
constexpr int max_savepoints = 48;

TimeoutId handler_timeout_id = MAX_TIMEOUTS;
volatile sig_atomic_t handler_timed_out = false;

void on_handler_timeout() {
    handler_timed_out = true;
    InterruptPending = true;
    QueryCancelPending = true;
    SetLatch(MyLatch);
}

Datum message_datum(const DrainBatch *batch, const RowNow *now_rows, const Message *message,
                    TupleDesc desc) {
    const ShardKey *shard = &batch->segments[message->segment].shard;
    const RowNow *newest = &now_rows[message->newest];
    Datum values[10];
    bool nulls[10] = {false};
    values[0] = CStringGetTextDatum(silo_text(shard->silo));
    values[1] = Int32GetDatum(shard->shard_scope);
    values[2] = Int64GetDatum(shard->shard_identifier);
    values[3] = Int32GetDatum(message->category);
    values[4] = Int64GetDatum(message->object_identifier);
    values[5] = newest->payload;
    nulls[5] = newest->payload == (Datum)0;
    values[6] = shard->cell_name ? CStringGetTextDatum(shard->cell_name) : (Datum)0;
    nulls[6] = shard->cell_name == nullptr;
    values[7] = Int64GetDatum(batch->rows[message->first].id);
    values[8] = Int64GetDatum(batch->rows[message->newest].id);
    values[9] = Int32GetDatum(message->nrows);
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

// A category's handler, resolved for one batch: the function may have been
// dropped since it was registered (then every message of the category fails
// visibly, and nothing is lost), and it runs as its owner.
struct Handler {
    int32 category;
    FmgrInfo function;
    Oid owner;
    const char *missing; // the error when the function is gone, else NULL
};

int resolve_handlers(const Registry *registry, Handler **result) {
    int n = registry->nhandlers;
    auto *handlers = (Handler *)palloc0(sizeof(Handler) * Max(n, 1));
    for (int h = 0; h < n; h++) {
        Handler *handler = &handlers[h];
        Oid function = registry->handler_functions[h];
        handler->category = registry->handler_categories[h];
        HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
        if (!HeapTupleIsValid(proc)) {
            handler->missing = psprintf("the handler function of category %d (OID %u) no longer "
                                        "exists; register another with outbox.register_handler()",
                                        handler->category, function);
            continue;
        }
        handler->owner = ((Form_pg_proc)GETSTRUCT(proc))->proowner;
        ReleaseSysCache(proc);
        fmgr_info(function, &handler->function);
    }
    *result = handlers;
    return n;
}

Handler *handler_of(Handler *handlers, int nhandlers, int32 category) {
    for (int h = 0; h < nhandlers; h++)
        if (handlers[h].category == category)
            return &handlers[h];
    return nullptr;
}

// The savepoint the handlers of a batch run under; what they acquire
// belongs to its resource owner until it is released or rolled back.
void open_savepoint(MemoryContext context) {
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
}

void release_savepoint(MemoryContext context, ResourceOwner owner) {
    ReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
}

void rollback_savepoint(MemoryContext context, ResourceOwner owner) {
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
}

// Calls the handler, inside the open savepoint, as the owner of its function
// (what a SECURITY DEFINER function would do: the message is handed to code
// its owner wrote, with that owner's rights and no more), in a GUC nest level
// of its own: what one handler SETs cannot redirect the next one.  On error
// fills *error and returns false; the caller then rolls the savepoint back,
// which also restores the user, the security context and the GUCs.
bool call_handler(Handler *handler, Datum message, char **error) {
    if (handler->missing != nullptr) {
        *error = pstrdup(handler->missing);
        return false;
    }
    MemoryContext context = CurrentMemoryContext;
    volatile bool ok = true;
    handler_timed_out = false;
    if (handler_timeout_ms > 0) {
        if (handler_timeout_id == MAX_TIMEOUTS)
            handler_timeout_id = RegisterTimeout(USER_TIMEOUT, on_handler_timeout);
        enable_timeout_after(handler_timeout_id, handler_timeout_ms);
    }
    PG_TRY();
    {
        Oid saved_user;
        int saved_context;
        GetUserIdAndSecContext(&saved_user, &saved_context);
        int level = NewGUCNestLevel();
        if (handler_search_path != nullptr)
            (void)set_config_option("search_path", handler_search_path, PGC_USERSET, PGC_S_SESSION,
                                    GUC_ACTION_SAVE, true, 0, false);
        SetUserIdAndSecContext(handler->owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
        // Not FunctionCall1: a void SQL-language function returns NULL.
        LOCAL_FCINFO(call, 1);
        InitFunctionCallInfoData(*call, &handler->function, 1, InvalidOid, nullptr, nullptr);
        call->args[0].value = message;
        call->args[0].isnull = false;
        in_handler = true;
        (void)FunctionCallInvoke(call);
        in_handler = false;
        SetUserIdAndSecContext(saved_user, saved_context);
        AtEOXact_GUC(false, level);
        if (handler_timeout_ms > 0)
            disable_timeout(handler_timeout_id, false);
        MemoryContextSwitchTo(context);
    }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        in_handler = false;
        if (handler_timeout_ms > 0)
            disable_timeout(handler_timeout_id, false);
        MemoryContextSwitchTo(context);
        ErrorData *edata = CopyErrorData();
        FlushErrorState();
        // A cancel or statement_timeout of the caller's is not the
        // handler's failure: it ends the drain (outbox.handler_timeout is).
        if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && !handler_timed_out)
            ReThrowError(edata);
        if (handler_timed_out)
            *error =
                psprintf("handler exceeded outbox.handler_timeout (%d ms)", handler_timeout_ms);
        else
            *error = pstrdup(edata->message ? edata->message : "handler failed");
        FreeErrorData(edata);
        ok = false;
    }
    PG_END_TRY();
    return ok;
}

// Runs the handlers of the messages, in order, under savepoints (delivery.hpp,
// step 4).  delivered[m] tells which messages' effects are kept; for a
// failed segment, failed_at[s] is its failing message and errors[s] the
// error.
void deliver(DrainBatch *batch, const RowNow *now_rows, const Message *messages, int nmessages,
             Handler *handlers, int nhandlers, bool *delivered, int *failed_at, char **errors,
             DrainStats *stats) {
    const Registry *registry = registry_get();
    TupleDesc desc = lookup_rowtype_tupdesc_copy(registry->message_type, -1);
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;

    int savepoints = 0;
    int first = 0;         // first message under the open savepoint
    int release_at = -1;   // after a failure: where the rerun ends
    bool deferred = false; // out of subtransactions: the rest waits
    if (!subtransactions_left()) {
        deferred = true;
    } else {
        open_savepoint(context);
        savepoints++;
    }
    for (int m = 0; m < nmessages && !deferred; m++) {
        if (m == release_at) {
            release_savepoint(context, owner);
            first = m;
            release_at = -1;
            open_savepoint(context);
            savepoints++;
        }
        const Message *message = &messages[m];
        DrainSegment *segment = &batch->segments[message->segment];
        if (segment->outcome == SegmentOutcome::Failed && m >= failed_at[message->segment])
            continue; // the failing message and the rest of its shard stay
        Handler *handler = handler_of(handlers, nhandlers, message->category);
        if (handler == nullptr)
            continue; // no handler: the message stays, visible
        char *error = nullptr;
        if (call_handler(handler, message_datum(batch, now_rows, message, desc), &error)) {
            delivered[m] = true;
            CommandCounterIncrement();
            continue;
        }
        rollback_savepoint(context, owner);
        stats_count_handler_error(message->category);
        segment->outcome = SegmentOutcome::Failed;
        failed_at[message->segment] = m;
        errors[message->segment] = error;
        for (int k = first; k < m; k++)
            delivered[k] = false;
        if (savepoints + 2 > max_savepoints || !subtransactions_left()) {
            // Nothing since the last release is kept: those shards wait
            // for the next pass, untouched; so does the failing one when
            // an earlier message of it was rolled back with it (its rows
            // are not backed off, its error not recorded: the next pass
            // delivers that message first).
            for (int k = first; k < m; k++)
                if (messages[k].segment == message->segment)
                    segment->outcome = SegmentOutcome::Blocked;
            for (int k = first; k < nmessages; k++)
                if (batch->segments[messages[k].segment].outcome == SegmentOutcome::Done)
                    batch->segments[messages[k].segment].outcome = SegmentOutcome::Blocked;
            deferred = true;
            break;
        }
        // Run the messages before the failing one again, keep them, and go
        // on after it under a new savepoint.
        open_savepoint(context);
        savepoints++;
        release_at = m + 1 < nmessages ? m + 1 : -1;
        m = first - 1;
    }
    if (!deferred)
        release_savepoint(context, owner);
    if (deferred && first == 0 && savepoints == 0)
        for (int s = 0; s < batch->nsegments; s++)
            if (batch->segments[s].outcome == SegmentOutcome::Done)
                batch->segments[s].outcome = SegmentOutcome::Blocked;
    TimestampTz delivered_at = GetCurrentTimestamp();
    for (int m = 0; m < nmessages; m++)
        if (delivered[m]) {
            stats_count_delivered(messages[m].category, messages[m].oldest_added, delivered_at);
            stats_count_processed(messages[m].category, messages[m].nrows);
            stats->messages++;
        }
}

} // namespace

void drain_batch(DrainBatch *batch, DrainStats *stats) {
    MemoryContext work = AllocSetContextCreate(CurrentMemoryContext, "pg_outbox drain batch",
                                               ALLOCSET_DEFAULT_SIZES);
    MemoryContext caller = MemoryContextSwitchTo(work);
    RowNow *now_rows;
    Message *messages;
    int nmessages = claim_and_coalesce(batch, stats, &now_rows, &messages);
    bool *delivered = (bool *)palloc0(sizeof(bool) * Max(nmessages, 1));
    int *failed_at = (int *)palloc(sizeof(int) * batch->nsegments);
    char **errors = (char **)palloc0(sizeof(char *) * batch->nsegments);
    Handler *handlers;
    int nhandlers = resolve_handlers(registry_get(), &handlers);
    if (nmessages > 0)
        deliver(batch, now_rows, messages, nmessages, handlers, nhandlers, delivered, failed_at,
                errors, stats);
    settle_batch(batch, now_rows, messages, nmessages, delivered, failed_at, errors, stats);
    MemoryContextSwitchTo(caller);
    MemoryContextDelete(work);
}

} // namespace pgoutbox
