// Draining (drain.hpp).  Written without C++ objects that own resources around
// PostgreSQL calls: errors unwind through it freely, and the subtransaction
// pattern is PL/pgSQL's exception block.
#include "drain/drain.hpp"

#include "pg/guard.hpp"
#include "pg/run_as.hpp"
#include "settings.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "catalog/pg_proc.h"
#include "common/hashfn.h"
#include "storage/itemptr.h"
#include "utils/tuplestore.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/typcache.h"
}

namespace pgoutbox {

namespace {

const char *outbox_name(Silo silo) {
    return silo == Silo::Cell ? "outbox.cell_outbox" : "outbox.control_outbox";
}

const char *silo_text(Silo silo) {
    return silo == Silo::Cell ? "cell" : "control";
}

} // namespace

// The claim is an advisory lock held to the end of the transaction.  Its
// fourth field (pg_advisory_* use 1 and 2) keeps it apart from application
// advisory locks; a hash collision only makes a shard wait a cycle.
bool claim_shard(const DrainShard *shard) {
    uint32 cell_hash = shard->cell_name ? hash_bytes((const unsigned char *)shard->cell_name,
                                                     (int)strlen(shard->cell_name))
                                        : 0;
    uint32 field4 = hash_combine(hash_combine(0x4F42u, (uint32)shard->shard_scope),
                                 cell_hash ^ (shard->silo == Silo::Cell ? 0u : 0x80000000u));
    if (field4 == 1 || field4 == 2)
        field4 += 2;
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32)((uint64)shard->shard_identifier >> 32),
                         (uint32)shard->shard_identifier, field4);
    return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

namespace {

// The partition that holds a shard's rows, routed as capture routes them.
Oid partition_of(const DrainShard *shard) {
    const Registry *registry = registry_get();
    const OutboxTable *table =
        shard->silo == Silo::Cell ? &registry->cell_outbox : &registry->control_outbox;
    Datum key = Int64GetDatum(shard->shard_identifier);
    bool key_null = false;
    uint64 hash =
        compute_partition_hash_value(1, const_cast<FmgrInfo *>(&table->hash_function),
                                     const_cast<Oid *>(&table->hash_collation), &key, &key_null);
    return table->by_remainder[hash % (uint64)table->nremainders].relid;
}

// Keeps the rows that are still there, with their current schedule: fetched
// by ctid with the latest snapshot, taken after the claim, so a delivery
// another drainer committed before the claim is seen.  The ctids then stay
// valid to the end of the transaction (rows it can see are not vacuumed
// away under it), and nobody else drains the shard meanwhile.
void verify_rows(DrainShard *shard) {
    Relation rel = table_open(partition_of(shard), AccessShareLock);
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    int kept = 0;
    for (int i = 0; i < shard->nrows; i++) {
        DrainRow *row = &shard->rows[i];
        if (!table_tuple_fetch_row_version(rel, &row->ctid, snapshot, slot))
            continue;
        bool isnull;
        if (DatumGetInt64(slot_getattr(slot, 1, &isnull)) != row->id)
            continue; // the ctid holds another row now
        TimestampTz from = DatumGetTimestampTz(slot_getattr(slot, 7, &isnull));
        row->scheduled_for = DatumGetTimestampTz(slot_getattr(slot, 8, &isnull));
        row->backed_off = row->scheduled_for > from;
        shard->rows[kept++] = *row;
    }
    UnregisterSnapshot(snapshot);
    ExecDropSingleTupleTableSlot(slot);
    table_close(rel, AccessShareLock);
    shard->nrows = kept;
}

struct Message {
    int first;  // index of its first row
    int newest; // index of its newest row
    int nrows;
    int32 category;
    int64 object_identifier;
    TimestampTz oldest_added; // for the delivery lag
};

struct MessageKey {
    int64 object_identifier;
    int64 category; // 64 bits: no padding in the hashed key
};

struct MessageEntry {
    MessageKey key;
    int message;
};

// Groups rows by (category, object_identifier), in the order of first rows;
// row_message[i] is the message of row i.
int coalesce(const DrainShard *shard, Message *messages, int *row_message) {
    HASHCTL ctl;
    memset(&ctl, 0, sizeof ctl);
    ctl.keysize = sizeof(MessageKey);
    ctl.entrysize = sizeof(MessageEntry);
    ctl.hcxt = CurrentMemoryContext;
    HTAB *index = hash_create("pg_outbox messages", Max(shard->nrows, 16), &ctl,
                              HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    int n = 0;
    for (int i = 0; i < shard->nrows; i++) {
        const DrainRow *row = &shard->rows[i];
        MessageKey key = {row->object_identifier, row->category};
        bool found;
        auto *entry = (MessageEntry *)hash_search(index, &key, HASH_ENTER, &found);
        if (!found) {
            entry->message = n;
            messages[n++] =
                Message{i, i, 0, row->category, row->object_identifier, row->date_added};
        }
        Message *message = &messages[entry->message];
        message->oldest_added = Min(message->oldest_added, row->date_added);
        message->newest = i; // rows are in id order
        message->nrows++;
        row_message[i] = entry->message;
    }
    hash_destroy(index);
    return n;
}

// Set while a handler runs: a handler that drains would nest drains (and
// handler timeouts) without end.
bool in_handler = false;

TimeoutId handler_timeout_id = MAX_TIMEOUTS;
volatile sig_atomic_t handler_timed_out = false;

void on_handler_timeout() {
    handler_timed_out = true;
    InterruptPending = true;
    QueryCancelPending = true;
    SetLatch(MyLatch);
}

Datum message_datum(const DrainShard *shard, const Message *message, TupleDesc desc) {
    const DrainRow *first = &shard->rows[message->first];
    const DrainRow *newest = &shard->rows[message->newest];
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
    values[7] = Int64GetDatum(first->id);
    values[8] = Int64GetDatum(newest->id);
    values[9] = Int32GetDatum(message->nrows);
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

// A category's handler, resolved for one shard: the function may have been
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

// Calls the handler in a subtransaction, as the owner of its function (what
// a SECURITY DEFINER function would do: the message is handed to code its
// owner wrote, with that owner's rights and no more); on error fills *error
// and returns false.  The PL/pgSQL exception-block pattern: rolling the
// subtransaction back also restores the user and security context.
bool call_handler(Handler *handler, Datum message, char **error) {
    if (handler->missing != nullptr) {
        *error = pstrdup(handler->missing);
        return false;
    }
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile bool ok = true;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
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
        if (handler_timeout_ms > 0)
            disable_timeout(handler_timeout_id, false);
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
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
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
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

// By ctid: the rows were read (and, when read before the claim, checked) in
// this transaction, so each ctid still holds the row that was delivered.
void delete_delivered(const DrainShard *shard, const bool *delivered) {
    Relation rel = table_open(partition_of(shard), RowExclusiveLock);
    Snapshot snapshot = GetActiveSnapshot();
    for (int i = 0; i < shard->nrows; i++)
        if (delivered[i])
            simple_table_tuple_delete(rel, &shard->rows[i].ctid, snapshot);
    table_close(rel, NoLock);
}

// The shard key as SQL conditions and arguments $1.. (scope, identifier,
// cell); returns the number of arguments.
int shard_condition(const DrainShard *shard, char **where, Oid *types, Datum *args) {
    types[0] = INT4OID;
    types[1] = INT8OID;
    args[0] = Int32GetDatum(shard->shard_scope);
    args[1] = Int64GetDatum(shard->shard_identifier);
    if (shard->cell_name == nullptr) {
        *where = pstrdup("shard_scope = $1 AND shard_identifier = $2");
        return 2;
    }
    types[2] = TEXTOID;
    args[2] = CStringGetTextDatum(shard->cell_name);
    *where = pstrdup("shard_scope = $1 AND shard_identifier = $2 AND cell_name = $3");
    return 3;
}

// Sentry's backoff for every row of the shard, and the error for monitoring.
void back_off(const DrainShard *shard, const Message *failed, const char *error) {
    char *where;
    Oid types[4];
    Datum args[4];
    int n = shard_condition(shard, &where, types, args);
    pg::spi_run("backing off a shard",
                psprintf("UPDATE %s SET scheduled_from = now(), scheduled_for = now() +"
                         " LEAST(2 * GREATEST(scheduled_for - scheduled_from, interval '1 second'),"
                         " interval '1 hour') WHERE %s",
                         outbox_name(shard->silo), where),
                n, types, args, nullptr, false, 0, SPI_OK_UPDATE);
    Oid etypes[7] = {TEXTOID, INT4OID, INT8OID, TEXTOID, TEXTOID, INT4OID, INT8OID};
    Datum eargs[7] = {CStringGetTextDatum(silo_text(shard->silo)),
                      Int32GetDatum(shard->shard_scope),
                      Int64GetDatum(shard->shard_identifier),
                      CStringGetTextDatum(shard->cell_name ? shard->cell_name : ""),
                      CStringGetTextDatum(error),
                      Int32GetDatum(failed->category),
                      Int64GetDatum(failed->object_identifier)};
    pg::spi_run(
        "recording a shard's error",
        "INSERT INTO outbox.shard_errors AS e (silo, shard_scope, shard_identifier, cell_name,"
        " attempts, last_error, last_error_at, category, object_identifier)"
        " VALUES ($1, $2, $3, $4, 1, $5, now(), $6, $7)"
        " ON CONFLICT (silo, shard_scope, shard_identifier, cell_name) DO UPDATE SET"
        " attempts = e.attempts + 1, last_error = excluded.last_error,"
        " last_error_at = excluded.last_error_at, category = excluded.category,"
        " object_identifier = excluded.object_identifier",
        7, etypes, eargs, nullptr, false, 0, SPI_OK_INSERT);
}

void clear_error(const DrainShard *shard) {
    Oid types[4] = {TEXTOID, INT4OID, INT8OID, TEXTOID};
    Datum args[4] = {CStringGetTextDatum(silo_text(shard->silo)), Int32GetDatum(shard->shard_scope),
                     Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    pg::spi_run("clearing a shard's error",
                "DELETE FROM outbox.shard_errors WHERE silo = $1 AND shard_scope = $2"
                " AND shard_identifier = $3 AND cell_name = $4",
                4, types, args, nullptr, false, 0, SPI_OK_DELETE);
}

} // namespace

void refuse_drain_in_handler(const char *function) {
    if (in_handler)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("%s cannot be called from a handler", function),
                        errdetail("A handler that drains would start drains without end.")));
}

int drain_claimed(DrainShard *shard, bool verify, DrainStats *stats) {
    if (verify && shard->nrows > 0)
        verify_rows(shard);
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    bool due = false;
    for (int i = 0; i < shard->nrows && !due; i++)
        due = shard->rows[i].scheduled_for <= now;
    if (!due)
        return 0;
    stats->shards++;

    Message *messages = (Message *)palloc(sizeof(Message) * shard->nrows);
    int *row_message = (int *)palloc(sizeof(int) * shard->nrows);
    int nmessages = coalesce(shard, messages, row_message);
    bool *message_delivered = (bool *)palloc0(sizeof(bool) * nmessages);
    const Registry *registry = registry_get();
    TupleDesc desc = lookup_rowtype_tupdesc_copy(registry->message_type, -1);
    Handler *handlers;
    int nhandlers = resolve_handlers(registry, &handlers);

    int delivered = 0;
    const Message *failed = nullptr;
    char *error = nullptr;
    for (int m = 0; m < nmessages; m++) {
        Handler *handler = nullptr;
        for (int h = 0; h < nhandlers && handler == nullptr; h++)
            if (handlers[h].category == messages[m].category)
                handler = &handlers[h];
        if (handler == nullptr)
            continue; // no handler: the message stays, visible
        if (!call_handler(handler, message_datum(shard, &messages[m], desc), &error)) {
            failed = &messages[m];
            stats_count_handler_error(failed->category);
            break;
        }
        stats_count_delivered(messages[m].category, messages[m].oldest_added,
                              GetCurrentTimestamp());
        stats_count_processed(messages[m].category, messages[m].nrows);
        CommandCounterIncrement();
        message_delivered[m] = true;
        delivered++;
    }

    bool *row_delivered = (bool *)palloc(sizeof(bool) * shard->nrows);
    int nrows = 0;
    for (int i = 0; i < shard->nrows; i++) {
        row_delivered[i] = message_delivered[row_message[i]];
        nrows += row_delivered[i];
    }
    if (nrows > 0)
        delete_delivered(shard, row_delivered);
    if (failed != nullptr) {
        back_off(shard, failed, error);
        stats->failures++;
    } else {
        // Only a shard that failed before has an error to clear: its rows
        // were backed off.
        bool backed_off = false;
        for (int i = 0; i < shard->nrows && !backed_off; i++)
            backed_off = shard->rows[i].backed_off;
        if (backed_off)
            clear_error(shard);
    }
    stats->messages += delivered;
    stats->rows += nrows;
    return delivered;
}

// Columns of a drain query: ctid, id, category, object_identifier,
// scheduled_for, scheduled_for > scheduled_from, date_added, shard_scope,
// shard_identifier, cell_name, payload (variable-width columns last).
enum DrainColumn {
    DC_CTID,
    DC_ID,
    DC_CATEGORY,
    DC_OBJECT,
    DC_SCHEDULED_FOR,
    DC_BACKED_OFF,
    DC_DATE_ADDED,
    DC_SCOPE,
    DC_SHARD,
    DC_CELL,
    DC_PAYLOAD,
    DC_COUNT
};
static const char *drain_columns =
    "o.ctid, o.id, o.category, o.object_identifier, o.scheduled_for,"
    " o.scheduled_for > o.scheduled_from, o.date_added, o.shard_scope, o.shard_identifier, %s,"
    " o.payload";

// One row, deformed once; copies into the current memory context.
static void fill_row(DrainRow *row, const Datum *values, const bool *nulls) {
    row->ctid = *(ItemPointer)DatumGetPointer(values[DC_CTID]);
    row->id = DatumGetInt64(values[DC_ID]);
    row->category = DatumGetInt32(values[DC_CATEGORY]);
    row->object_identifier = DatumGetInt64(values[DC_OBJECT]);
    row->scheduled_for = DatumGetTimestampTz(values[DC_SCHEDULED_FOR]);
    row->backed_off = DatumGetBool(values[DC_BACKED_OFF]);
    row->date_added = DatumGetTimestampTz(values[DC_DATE_ADDED]);
    row->payload =
        nulls[DC_PAYLOAD] ? (Datum)0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(values[DC_PAYLOAD]));
}

void read_shard(DrainShard *shard, MemoryContext context) {
    char *where;
    Oid types[3];
    Datum args[3];
    int n = shard_condition(shard, &where, types, args);
    char *sql = psprintf("SELECT %s FROM %s o WHERE %s ORDER BY o.id",
                         psprintf(drain_columns, "NULL::text"), outbox_name(shard->silo), where);
    pg::spi_run("reading a shard", sql, n, types, args, nullptr, true, 0, SPI_OK_SELECT);
    MemoryContext old = MemoryContextSwitchTo(context);
    shard->nrows = (int)SPI_processed;
    shard->rows = (DrainRow *)palloc(sizeof(DrainRow) * Max(shard->nrows, 1));
    Datum values[DC_COUNT];
    bool nulls[DC_COUNT];
    for (int i = 0; i < shard->nrows; i++) {
        heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, values, nulls);
        fill_row(&shard->rows[i], values, nulls);
    }
    MemoryContextSwitchTo(old);
}

int read_due_shards(Silo silo, int max_shards, MemoryContext context, DrainShard **result) {
    bool control = silo == Silo::Control;
    const char *key =
        control ? "shard_scope, shard_identifier, cell_name" : "shard_scope, shard_identifier";
    char *sql = psprintf("WITH due AS (SELECT %s, pg_catalog.min(scheduled_for) AS oldest FROM %s"
                         " GROUP BY %s HAVING pg_catalog.min(scheduled_for) <= pg_catalog.now()"
                         " ORDER BY oldest LIMIT $1)"
                         " SELECT %s FROM %s o JOIN due d USING (%s) ORDER BY d.oldest, %s, o.id",
                         key, outbox_name(silo), key,
                         psprintf(drain_columns, control ? "o.cell_name" : "NULL::text"),
                         outbox_name(silo), key,
                         control ? "o.shard_scope, o.shard_identifier, o.cell_name"
                                 : "o.shard_scope, o.shard_identifier");
    Oid types[1] = {INT4OID};
    Datum args[1] = {Int32GetDatum(max_shards)};
    // The rows are sorted by shard and id in one go: give the sort memory
    // rather than spill it.
    int level = NewGUCNestLevel();
    (void)set_config_option("work_mem", "65536", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true,
                            0, false);
    pg::spi_run("finding due shards", sql, 1, types, args, nullptr, true, 0, SPI_OK_SELECT);
    AtEOXact_GUC(true, level);

    MemoryContext old = MemoryContextSwitchTo(context);
    uint64 n = SPI_processed;
    DrainShard *shards = (DrainShard *)palloc0(sizeof(DrainShard) * Max(max_shards, 1));
    DrainRow *rows = (DrainRow *)palloc(sizeof(DrainRow) * Max(n, 1));
    int nshards = 0;
    TupleDesc desc = SPI_tuptable->tupdesc;
    for (uint64 i = 0; i < n; i++) {
        Datum values[DC_COUNT];
        bool nulls[DC_COUNT];
        heap_deform_tuple(SPI_tuptable->vals[i], desc, values, nulls);
        int32 scope = DatumGetInt32(values[DC_SCOPE]);
        int64 identifier = DatumGetInt64(values[DC_SHARD]);
        char *cell = control ? TextDatumGetCString(values[DC_CELL]) : nullptr;
        DrainShard *shard = nshards > 0 ? &shards[nshards - 1] : nullptr;
        if (shard == nullptr || shard->shard_scope != scope ||
            shard->shard_identifier != identifier ||
            (control && strcmp(shard->cell_name, cell) != 0)) {
            shard = &shards[nshards++];
            shard->silo = silo;
            shard->shard_scope = scope;
            shard->shard_identifier = identifier;
            shard->cell_name = cell;
            shard->rows = &rows[i];
            shard->nrows = 0;
        }
        fill_row(&shard->rows[shard->nrows++], values, nulls);
    }
    MemoryContextSwitchTo(old);
    *result = shards;
    return nshards;
}

} // namespace pgoutbox
