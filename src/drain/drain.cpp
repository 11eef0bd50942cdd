// Delivering a batch (drain.hpp).  Written without C++ objects that own
// resources around PostgreSQL calls: errors unwind through it freely, and the
// savepoint pattern is PL/pgSQL's exception block.
#include "drain/drain.hpp"

#include "cascade/tombstones.hpp"

#include "pg/guard.hpp"
#include "pg/hash.hpp"
#include "pg/spi.hpp"
#include "registry/outbox_layout.hpp"
#include "settings.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "catalog/pg_proc.h"
#include "common/hashfn.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/typcache.h"
}

namespace pgoutbox {

int drain_batch_size = 10000;

namespace {

const char *silo_text(Silo silo) {
    return silo == Silo::Cell ? "cell" : "control";
}

// Subtransactions a batch opens: 1 + 2 per failure.  It takes no new
// failure once it has opened this many, nor when the transaction's cache of
// subtransaction XIDs (PGPROC_MAX_CACHED_SUBXIDS, 64) is this close to full.
constexpr int max_savepoints = 48;
constexpr int cache_reserve = 8;

} // namespace

const char *not_held(Silo silo) {
    return silo == Silo::Cell
               ? " AND NOT EXISTS (SELECT FROM outbox.paused_shards p WHERE p.silo = 'cell'"
                 " AND p.shard_scope = o.shard_scope AND p.shard_identifier = o.shard_identifier"
                 " AND p.cell_name = '')"
                 " AND NOT EXISTS (SELECT FROM outbox.consumer_claims l WHERE l.silo = 'cell'"
                 " AND l.shard_scope = o.shard_scope AND l.shard_identifier = o.shard_identifier"
                 " AND l.cell_name = '' AND l.lease_until > pg_catalog.now())"
               : " AND NOT EXISTS (SELECT FROM outbox.paused_shards p WHERE p.silo = 'control'"
                 " AND p.shard_scope = o.shard_scope AND p.shard_identifier = o.shard_identifier"
                 " AND p.cell_name = o.cell_name)"
                 " AND NOT EXISTS (SELECT FROM outbox.consumer_claims l WHERE l.silo = 'control'"
                 " AND l.shard_scope = o.shard_scope AND l.shard_identifier = o.shard_identifier"
                 " AND l.cell_name = o.cell_name AND l.lease_until > pg_catalog.now())";
}

const char *linked_elsewhere(Silo silo) {
    return silo == Silo::Cell
               ? " AND NOT EXISTS (SELECT FROM outbox.control_link)"
               : " AND NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = o.cell_name"
                 " AND c.server IS NOT NULL)";
}

// The claim is an advisory lock held to the end of the transaction.  Its
// fourth field (pg_advisory_* use 1 and 2) keeps it apart from application
// advisory locks; a hash collision only makes a shard wait a cycle.
bool claim_shard(const ShardKey *shard, bool wait) {
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
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

Oid shard_partition(const ShardKey *shard) {
    const Registry *registry = registry_get();
    const OutboxTable *table =
        shard->silo == Silo::Cell ? &registry->cell_outbox : &registry->control_outbox;
    return table->by_remainder[outbox_remainder(table, shard->shard_identifier)].relid;
}

Oid partition_filenode(Oid partition) {
    Relation rel = table_open(partition, AccessShareLock);
    Oid filenode = rel->rd_node.relNode;
    table_close(rel, NoLock);
    return filenode;
}

bool subtransactions_left() {
    return !MyProc->subxidStatus.overflowed &&
           MyProc->subxidStatus.count < PGPROC_MAX_CACHED_SUBXIDS - cache_reserve;
}

namespace {

// pg::spi_run, leaving the caller's memory context current (SPI leaves its
// procedure context current, which SPI_finish frees: what a batch allocates
// belongs in the batch's own context).
uint64 spi(const char *what, const char *sql, int nargs, Oid *types, Datum *values, bool read_only,
           int expected) {
    MemoryContext caller = CurrentMemoryContext;
    uint64 n = pg::spi_run(what, sql, nargs, types, values, nullptr, read_only, 0, expected);
    MemoryContextSwitchTo(caller);
    return n;
}

// A row as it is now, found from the ctid it was read at.
struct RowNow {
    bool present;
    ItemPointerData ctid; // of its latest version
    Datum payload;        // jsonb, 0 for NULL
    bool backed_off;      // scheduled_for > scheduled_from
    int message;          // -1: not part of a message
};

// The latest version of the row with this id that was at tid, into slot:
// through a HOT chain (the outbox has no index, so an update that backs a
// row off is usually HOT and its old version is pruned to a redirect), else
// through the update chain; false when it is gone (its ctid holds another
// id now, or its page was truncated away).
bool fetch_latest(Relation rel, TableScanDesc scan, IndexFetchTableData *fetch,
                  TupleTableSlot *slot, Snapshot snapshot, ItemPointerData tid, int64 id) {
    if (!table_tuple_tid_valid(scan, &tid))
        return false;
    bool call_again = false, all_dead = false;
    bool fetched = table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again, &all_dead);
    if (!fetched) {
        table_tuple_get_latest_tid(scan, &tid);
        fetched = table_tuple_fetch_row_version(rel, &tid, snapshot, slot);
    }
    bool isnull;
    return fetched && DatumGetInt64(slot_getattr(slot, outbox_attnum(OUTBOX_ID), &isnull)) == id;
}

// Finds each row of a segment as it is now (fetch_latest), with the latest
// snapshot (taken after the claim, so a delivery another drainer committed
// before it is seen).  Returns false when a row was backed off since it was
// read (someone else failed the shard meanwhile), or when the partition was
// rewritten since (its ctids mean nothing now).
bool find_rows(const DrainBatch *batch, const DrainSegment *segment, RowNow *now_rows,
               TimestampTz now) {
    Relation rel = table_open(segment->partition, AccessShareLock);
    if (rel->rd_node.relNode != segment->filenode) {
        // Rewritten since the read (compacted): nothing read before holds.
        table_close(rel, NoLock);
        return false;
    }
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    IndexFetchTableData *fetch = table_index_fetch_begin(rel);
    TableScanDesc scan = table_beginscan_tid(rel, snapshot);
    bool unchanged = true;
    for (int i = segment->first; i < segment->first + segment->nrows; i++) {
        const DrainRow *row = &batch->rows[i];
        RowNow *found = &now_rows[i];
        found->present = false;
        found->message = -1;
        if (!fetch_latest(rel, scan, fetch, slot, snapshot, row->ctid, row->id))
            continue;
        bool isnull;
        TimestampTz from =
            DatumGetTimestampTz(slot_getattr(slot, outbox_attnum(OUTBOX_SCHEDULED_FROM), &isnull));
        TimestampTz until =
            DatumGetTimestampTz(slot_getattr(slot, outbox_attnum(OUTBOX_SCHEDULED_FOR), &isnull));
        if (until != row->scheduled_for && until > now)
            unchanged = false;
        found->present = true;
        found->ctid = slot->tts_tid;
        found->backed_off = until > from;
        Datum payload = slot_getattr(slot, outbox_attnum(OUTBOX_PAYLOAD), &isnull);
        found->payload = isnull ? (Datum)0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(payload));
    }
    table_endscan(scan);
    table_index_fetch_end(fetch);
    ExecDropSingleTupleTableSlot(slot);
    UnregisterSnapshot(snapshot);
    table_close(rel, AccessShareLock);
    return unchanged;
}

// The shards of the batch that must not be delivered now, though they were
// read: those paused (outbox.pause_shard), those a consumer holds under a
// live lease (outbox.claim, this session's own claims included), and those
// that failed in another session after the batch's rows were read (their outbox.shard_errors row
// was written by a transaction the read snapshot did not see).  One query
// per silo and batch.
void skip_stopped_shards(DrainBatch *batch) {
    for (int silo = 0; silo < 2; silo++) {
        Silo which = silo == 0 ? Silo::Cell : Silo::Control;
        int n = 0;
        Datum *scopes = (Datum *)palloc(sizeof(Datum) * batch->nsegments);
        Datum *identifiers = (Datum *)palloc(sizeof(Datum) * batch->nsegments);
        Datum *cells = (Datum *)palloc(sizeof(Datum) * batch->nsegments);
        for (int s = 0; s < batch->nsegments; s++) {
            const DrainSegment *segment = &batch->segments[s];
            if (segment->action != SegmentAction::Deliver || segment->shard.silo != which ||
                segment->outcome != SegmentOutcome::Done)
                continue;
            scopes[n] = Int32GetDatum(segment->shard.shard_scope);
            identifiers[n] = Int64GetDatum(segment->shard.shard_identifier);
            cells[n] =
                CStringGetTextDatum(segment->shard.cell_name ? segment->shard.cell_name : "");
            n++;
        }
        if (n == 0)
            continue;
        Oid types[4] = {TEXTOID, INT4ARRAYOID, INT8ARRAYOID, TEXTARRAYOID};
        Datum args[4] = {
            CStringGetTextDatum(silo_text(which)),
            PointerGetDatum(construct_array(scopes, n, INT4OID, 4, true, TYPALIGN_INT)),
            PointerGetDatum(
                construct_array(identifiers, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
            PointerGetDatum(construct_array(cells, n, TEXTOID, -1, false, TYPALIGN_INT))};
        // With the latest snapshot, taken after the claims: a failure or a
        // pause committed before them is seen, whatever the isolation level
        // (pause_shard waits for the claim).
        PushActiveSnapshot(GetLatestSnapshot());
        uint64 found = spi("looking up stopped shards",
                           "WITH k (s, i, c) AS (SELECT * FROM ROWS FROM (pg_catalog.unnest($2),"
                           " pg_catalog.unnest($3), pg_catalog.unnest($4)))"
                           " SELECT e.shard_scope, e.shard_identifier, e.cell_name, e.xmin, false"
                           " FROM outbox.shard_errors e JOIN k ON e.shard_scope = k.s"
                           " AND e.shard_identifier = k.i AND e.cell_name = k.c WHERE e.silo = $1"
                           " UNION ALL"
                           " SELECT p.shard_scope, p.shard_identifier, p.cell_name, NULL, true"
                           " FROM outbox.paused_shards p JOIN k ON p.shard_scope = k.s"
                           " AND p.shard_identifier = k.i AND p.cell_name = k.c WHERE p.silo = $1"
                           " UNION ALL"
                           " SELECT l.shard_scope, l.shard_identifier, l.cell_name, NULL, true"
                           " FROM outbox.consumer_claims l JOIN k ON l.shard_scope = k.s"
                           " AND l.shard_identifier = k.i AND l.cell_name = k.c WHERE l.silo = $1"
                           " AND l.lease_until > pg_catalog.clock_timestamp()",
                           4, types, args, true, SPI_OK_SELECT);
        PopActiveSnapshot();
        for (uint64 r = 0; r < found; r++) {
            HeapTuple tuple = SPI_tuptable->vals[r];
            TupleDesc desc = SPI_tuptable->tupdesc;
            bool isnull;
            bool paused = DatumGetBool(SPI_getbinval(tuple, desc, 5, &isnull));
            if (!paused) {
                // Seen by the read (the rows were read after it, backed
                // off), or no read before the claim (drain_shard).
                TransactionId xmin = DatumGetTransactionId(SPI_getbinval(tuple, desc, 4, &isnull));
                if (batch->read_snapshot == nullptr || TransactionIdIsCurrentTransactionId(xmin) ||
                    !XidInMVCCSnapshot(xmin, batch->read_snapshot))
                    continue;
            }
            int32 scope = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
            int64 identifier = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));
            char *cell = SPI_getvalue(tuple, desc, 3);
            for (int s = 0; s < batch->nsegments; s++) {
                DrainSegment *segment = &batch->segments[s];
                if (segment->shard.silo == which && segment->shard.shard_scope == scope &&
                    segment->shard.shard_identifier == identifier &&
                    strcmp(segment->shard.cell_name ? segment->shard.cell_name : "", cell) == 0)
                    segment->outcome = SegmentOutcome::Blocked;
            }
        }
    }
}

struct Message {
    int segment;
    int first;  // index of its first row
    int newest; // index of its newest row
    int nrows;
    int32 category;
    int64 object_identifier;
    TimestampTz oldest_added; // for the delivery lag
};

struct MessageKey {
    int64 object_identifier;
    int64 segment_category; // 64 bits: no padding in the hashed key
};

struct MessageEntry {
    MessageKey key;
    int message;
};

// Groups the present rows of each segment by (category, object_identifier),
// in the order of first rows.
int coalesce(const DrainBatch *batch, RowNow *now_rows, Message *messages) {
    HTAB *index = pg::blob_hash("pg_outbox messages", Max(batch->nrows, 16), sizeof(MessageKey),
                                sizeof(MessageEntry), CurrentMemoryContext);
    int n = 0;
    for (int s = 0; s < batch->nsegments; s++) {
        const DrainSegment *segment = &batch->segments[s];
        if (segment->action != SegmentAction::Deliver || segment->outcome != SegmentOutcome::Done)
            continue;
        for (int i = segment->first; i < segment->first + segment->nrows; i++) {
            if (!now_rows[i].present)
                continue;
            const DrainRow *row = &batch->rows[i];
            MessageKey key = {row->object_identifier,
                              (int64)(((uint64)(uint32)s << 32) | (uint32)row->category)};
            bool found;
            auto *entry = (MessageEntry *)hash_search(index, &key, HASH_ENTER, &found);
            if (!found) {
                entry->message = n;
                messages[n++] =
                    Message{s, i, i, 0, row->category, row->object_identifier, row->date_added};
            }
            Message *message = &messages[entry->message];
            message->oldest_added = Min(message->oldest_added, row->date_added);
            message->newest = i; // rows are in id order
            message->nrows++;
            now_rows[i].message = entry->message;
        }
    }
    hash_destroy(index);
    return n;
}

// Set while a handler runs: a handler that drains would nest drains (and
// handler timeouts) without end.
bool in_handler = false;

} // namespace

const char *handler_search_path = nullptr;

namespace {

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

// Sentry's backoff: each row waits twice as long as it last did, between
// 1 s and 1 h.  By ctid, in the partition that holds the shard.
const char *back_off_set =
    "scheduled_from = pg_catalog.now(), scheduled_for = pg_catalog.now() +"
    " LEAST(2 * GREATEST(scheduled_for - scheduled_from, interval '1 second'), interval '1 hour')";

void back_off_rows(Oid partition, const ItemPointerData *tids, int n) {
    if (n == 0)
        return;
    Oid types[1] = {TIDARRAYOID};
    Datum args[1] = {pg::tid_array(tids, n)};
    spi("backing off a shard",
        psprintf("UPDATE %s SET %s WHERE ctid = ANY ($1)",
                 quote_qualified_identifier(get_namespace_name(get_rel_namespace(partition)),
                                            get_rel_name(partition)),
                 back_off_set),
        1, types, args, false, SPI_OK_UPDATE);
}

// The shard's rows after the last one drain_shard() saw.
void back_off_rest(const DrainSegment *segment, int64 after_id) {
    const ShardKey *shard = &segment->shard;
    Oid types[4] = {INT4OID, INT8OID, INT8OID, TEXTOID};
    Datum args[4] = {Int32GetDatum(shard->shard_scope), Int64GetDatum(shard->shard_identifier),
                     Int64GetDatum(after_id),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    spi("backing off a shard",
        psprintf(
            "UPDATE %s SET %s WHERE shard_scope = $1 AND shard_identifier = $2 AND id > $3%s",
            quote_qualified_identifier(get_namespace_name(get_rel_namespace(segment->partition)),
                                       get_rel_name(segment->partition)),
            back_off_set, shard->cell_name ? " AND cell_name = $4" : ""),
        shard->cell_name ? 4 : 3, types, args, false, SPI_OK_UPDATE);
}

// Records a shard's failure; returns how many times in a row its failing
// message has failed, and sets *max_attempts to its category's.  A failure
// of another message starts the count again.
int32 record_error(const ShardKey *shard, const Message *failed, const char *error,
                   int32 *max_attempts) {
    Oid types[7] = {TEXTOID, INT4OID, INT8OID, TEXTOID, TEXTOID, INT4OID, INT8OID};
    Datum args[7] = {CStringGetTextDatum(silo_text(shard->silo)),
                     Int32GetDatum(shard->shard_scope),
                     Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : ""),
                     CStringGetTextDatum(error),
                     Int32GetDatum(failed->category),
                     Int64GetDatum(failed->object_identifier)};
    spi("recording a shard's error",
        "INSERT INTO outbox.shard_errors AS e (silo, shard_scope, shard_identifier, cell_name,"
        " attempts, last_error, last_error_at, category, object_identifier)"
        " VALUES ($1, $2, $3, $4, 1, $5, now(), $6, $7)"
        " ON CONFLICT (silo, shard_scope, shard_identifier, cell_name) DO UPDATE SET"
        " attempts = CASE WHEN e.category = excluded.category"
        " AND e.object_identifier = excluded.object_identifier THEN e.attempts + 1 ELSE 1 END,"
        " last_error = excluded.last_error,"
        " last_error_at = excluded.last_error_at, category = excluded.category,"
        " object_identifier = excluded.object_identifier"
        " RETURNING e.attempts, (SELECT c.max_attempts FROM outbox.categories c"
        " WHERE c.id = e.category)",
        7, types, args, false, SPI_OK_INSERT_RETURNING);
    bool isnull;
    int32 attempts =
        DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    Datum max = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
    *max_attempts = isnull ? 0 : DatumGetInt32(max);
    return attempts;
}

// Moves rows of a shard's partition to outbox.dead_letters, in id order:
// those whose ctid (or, for a consumer's claim that lost track of some, id)
// is in the array rows.
void dead_letter_rows(const DrainSegment *segment, const char *which, Datum rows, Oid rows_type,
                      int32 attempts, const char *error) {
    Oid types[4] = {rows_type, TEXTOID, INT4OID, TEXTOID};
    Datum args[4] = {rows, CStringGetTextDatum(silo_text(segment->shard.silo)),
                     Int32GetDatum(attempts), CStringGetTextDatum(error)};
    spi("moving a message to the dead letters",
        psprintf(
            "WITH moved AS (DELETE FROM %s o WHERE o.%s = ANY ($1) RETURNING o.*)"
            " INSERT INTO outbox.dead_letters (silo, shard_scope, shard_identifier,"
            " cell_name, category, object_identifier, payload, outbox_id, date_added,"
            " attempts, last_error)"
            " SELECT $2, m.shard_scope, m.shard_identifier, %s, m.category,"
            " m.object_identifier, m.payload, m.id, m.date_added, $3, $4"
            " FROM moved m ORDER BY m.id",
            quote_qualified_identifier(get_namespace_name(get_rel_namespace(segment->partition)),
                                       get_rel_name(segment->partition)),
            which, segment->shard.silo == Silo::Control ? "m.cell_name" : "NULL"),
        4, types, args, false, SPI_OK_INSERT);
}

// The shard's rows that wait for a backoff are due now: a shard whose
// failing message went to the dead letters goes on with the next.
void make_due(const DrainSegment *segment) {
    const ShardKey *shard = &segment->shard;
    Oid types[3] = {INT4OID, INT8OID, TEXTOID};
    Datum args[3] = {Int32GetDatum(shard->shard_scope), Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    spi("making a shard due",
        psprintf(
            "UPDATE %s SET scheduled_from = pg_catalog.now(),"
            " scheduled_for = pg_catalog.now() WHERE shard_scope = $1"
            " AND shard_identifier = $2 AND scheduled_for > pg_catalog.now()%s",
            quote_qualified_identifier(get_namespace_name(get_rel_namespace(segment->partition)),
                                       get_rel_name(segment->partition)),
            shard->cell_name ? " AND cell_name = $3" : ""),
        shard->cell_name ? 3 : 2, types, args, false, SPI_OK_UPDATE);
}

void clear_error(const ShardKey *shard) {
    Oid types[4] = {TEXTOID, INT4OID, INT8OID, TEXTOID};
    Datum args[4] = {CStringGetTextDatum(silo_text(shard->silo)), Int32GetDatum(shard->shard_scope),
                     Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    spi("clearing a shard's error",
        "DELETE FROM outbox.shard_errors WHERE silo = $1 AND shard_scope = $2"
        " AND shard_identifier = $3 AND cell_name = $4",
        4, types, args, false, SPI_OK_DELETE);
}

// Runs the handlers of the messages, in order, under savepoints (drain.hpp,
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

// The delivered messages of the batch, to tombstones_of_delivered.
void tombstones_of_deleted_rows(const DrainBatch *batch, const Message *messages, int nmessages,
                                const bool *delivered) {
    if (registry_get()->nsole_tables == 0 || nmessages == 0)
        return;
    auto *categories = (int32 *)palloc(sizeof(int32) * nmessages);
    auto *objects = (int64 *)palloc(sizeof(int64) * nmessages);
    auto *control = (bool *)palloc(sizeof(bool) * nmessages);
    int n = 0;
    for (int m = 0; m < nmessages; m++) {
        if (!delivered[m])
            continue;
        categories[n] = messages[m].category;
        objects[n] = messages[m].object_identifier;
        control[n] = batch->segments[messages[m].segment].shard.silo == Silo::Control;
        n++;
    }
    tombstones_of_delivered(n, categories, objects, control);
}

// Steps 1 to 3 (drain.hpp): claims, the rows as they are now, and their
// messages; the rest of a shard that failed in an earlier batch is backed
// off here.
int claim_and_coalesce(DrainBatch *batch, DrainStats *stats, RowNow **now_rows_out,
                       Message **messages_out) {
    TimestampTz now = GetCurrentTimestamp();
    // Claims first, then what the rows are now.
    for (int s = 0; s < batch->nsegments; s++) {
        DrainSegment *segment = &batch->segments[s];
        segment->outcome =
            claim_shard(&segment->shard, false) ? SegmentOutcome::Done : SegmentOutcome::Blocked;
    }
    skip_stopped_shards(batch);
    // Rows of a segment that is not delivered (claimed elsewhere, backed
    // off, rewritten) are in no message and are never deleted.
    RowNow *now_rows = (RowNow *)palloc0(sizeof(RowNow) * Max(batch->nrows, 1));
    for (int i = 0; i < batch->nrows; i++)
        now_rows[i].message = -1;
    for (int s = 0; s < batch->nsegments; s++) {
        DrainSegment *segment = &batch->segments[s];
        if (segment->outcome != SegmentOutcome::Done)
            continue;
        if (segment->action == SegmentAction::BackOff) {
            // The rest of a shard that failed: by the ctids it was read at
            // (a row changed since was backed off by someone else), unless
            // the partition was rewritten since.
            if (partition_filenode(segment->partition) != segment->filenode) {
                segment->outcome = SegmentOutcome::Blocked;
                continue;
            }
            auto *tids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * segment->nrows);
            for (int i = 0; i < segment->nrows; i++)
                tids[i] = batch->rows[segment->first + i].ctid;
            back_off_rows(segment->partition, tids, segment->nrows);
            segment->outcome = SegmentOutcome::Failed;
            continue;
        }
        if (!find_rows(batch, segment, now_rows, now))
            segment->outcome = SegmentOutcome::Blocked;
        else
            stats->shards++;
    }

    Message *messages = (Message *)palloc(sizeof(Message) * Max(batch->nrows, 1));
    *now_rows_out = now_rows;
    *messages_out = messages;
    return coalesce(batch, now_rows, messages);
}

} // namespace

void refuse_drain_in_handler(const char *function) {
    if (in_handler)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("%s cannot be called from a handler", function),
                        errdetail("A handler that drains would start drains without end.")));
}

// Those of each category that has one registered table in its silo, handed
// to record_tombstones: those whose row is gone leave a tombstone.
void tombstones_of_delivered(int n, const int32 *categories, const int64 *objects,
                             const bool *control) {
    const Registry *registry = registry_get();
    if (registry->nsole_tables == 0 || n == 0)
        return;
    auto *ids = (int64 *)palloc(sizeof(int64) * n);
    for (int t = 0; t < registry->nsole_tables; t++) {
        const SoleTable *table = &registry->sole_tables[t];
        int found = 0;
        for (int m = 0; m < n; m++)
            if (categories[m] == table->category && control[m] == table->control)
                ids[found++] = objects[m];
        record_tombstones(table, ids, found);
    }
    pfree(ids);
}

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
    tombstones_of_deleted_rows(batch, messages, nmessages, delivered);

    // Delete what was delivered; back off what failed, from the failing
    // message on; clear the error of a backed-off shard that went through.
    auto *tids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * Max(batch->nrows, 1));
    for (int s = 0; s < batch->nsegments; s++) {
        DrainSegment *segment = &batch->segments[s];
        if (segment->action != SegmentAction::Deliver)
            continue;
        bool failed = segment->outcome == SegmentOutcome::Failed;
        int ndelete = 0;
        bool was_backed_off = false;
        Relation rel = nullptr;
        for (int i = segment->first; i < segment->first + segment->nrows; i++) {
            const RowNow *row = &now_rows[i];
            if (row->message < 0 || !delivered[row->message])
                continue;
            if (rel == nullptr)
                rel = table_open(segment->partition, RowExclusiveLock);
            // By ctid: found in this transaction, under the claim, so each
            // still holds the row that was delivered.
            simple_table_tuple_delete(rel, const_cast<ItemPointer>(&row->ctid),
                                      GetActiveSnapshot());
            ndelete++;
        }
        if (rel != nullptr)
            table_close(rel, NoLock);
        stats->rows += ndelete;
        if (failed) {
            const Message *failing = &messages[failed_at[s]];
            int32 max_attempts;
            int32 attempts = record_error(&segment->shard, failing, errors[s], &max_attempts);
            stats->failures++;
            int n = 0;
            if (max_attempts > 0 && attempts >= max_attempts) {
                // The failing message goes to the dead letters and the rest
                // of the shard is due: a later pass delivers it (this one
                // passes the shard by).
                for (int i = segment->first; i < segment->first + segment->nrows; i++)
                    if (now_rows[i].present && now_rows[i].message == failed_at[s])
                        tids[n++] = now_rows[i].ctid;
                dead_letter_rows(segment, "ctid", pg::tid_array(tids, n), TIDARRAYOID, attempts,
                                 errors[s]);
                clear_error(&segment->shard);
                make_due(segment);
                segment->outcome = SegmentOutcome::Blocked;
                continue;
            }
            int64 last_id = 0;
            for (int i = segment->first; i < segment->first + segment->nrows; i++) {
                const RowNow *row = &now_rows[i];
                last_id = batch->rows[i].id;
                if (row->present && row->message >= failed_at[s])
                    tids[n++] = row->ctid;
            }
            back_off_rows(segment->partition, tids, n);
            if (segment->back_off_rest)
                back_off_rest(segment, last_id);
        } else if (segment->outcome == SegmentOutcome::Done) {
            for (int i = segment->first; i < segment->first + segment->nrows && !was_backed_off;
                 i++)
                was_backed_off = now_rows[i].present && now_rows[i].backed_off;
            if (was_backed_off)
                clear_error(&segment->shard);
        }
    }
    // A later read in this transaction (the next batch, a new pass) must
    // see these deletions and updates.
    CommandCounterIncrement();
    MemoryContextSwitchTo(caller);
    MemoryContextDelete(work);
}

void lease_batch(DrainBatch *batch, LeasedBatch *leased) {
    DrainStats stats = {0, 0, 0, 0};
    RowNow *now_rows;
    Message *messages;
    int n = claim_and_coalesce(batch, &stats, &now_rows, &messages);
    leased->nmessages = n;
    leased->messages = (LeasedMessage *)palloc(sizeof(LeasedMessage) * Max(n, 1));
    leased->ctids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * Max(batch->nrows, 1));
    leased->ids = (int64 *)palloc(sizeof(int64) * Max(batch->nrows, 1));
    // Rows message by message: where each message's rows start, then each
    // row in its place (rows are in id order, so each message's are too).
    int *next = (int *)palloc(sizeof(int) * Max(n, 1));
    int end = 0;
    for (int m = 0; m < n; m++) {
        const Message *message = &messages[m];
        next[m] = end;
        end += message->nrows;
        const RowNow *newest = &now_rows[message->newest];
        leased->messages[m] = LeasedMessage{message->segment,
                                            message->category,
                                            message->object_identifier,
                                            newest->payload,
                                            batch->rows[message->first].id,
                                            batch->rows[message->newest].id,
                                            message->oldest_added,
                                            end};
    }
    for (int i = 0; i < batch->nrows; i++) {
        int m = now_rows[i].message;
        if (m < 0)
            continue;
        leased->ctids[next[m]] = now_rows[i].ctid;
        leased->ids[next[m]] = batch->rows[i].id;
        next[m]++;
    }
    for (int s = 0; s < batch->nsegments; s++)
        batch->segments[s].outcome = SegmentOutcome::Blocked;
}

namespace {

// The rows that are still there, as ctids of their latest versions; the ids
// of the others in *missing.
int find_claimed_rows(const ClaimedRows *rows, Oid partition, ItemPointerData *found,
                      int64 *missing, int *nmissing) {
    Relation rel = table_open(partition, RowExclusiveLock);
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TupleTableSlot *slot = table_slot_create(rel, nullptr);
    IndexFetchTableData *fetch = table_index_fetch_begin(rel);
    TableScanDesc scan = table_beginscan_tid(rel, snapshot);
    int n = 0;
    *nmissing = 0;
    for (int i = 0; i < rows->n; i++) {
        if (fetch_latest(rel, scan, fetch, slot, snapshot, rows->ctids[i], rows->ids[i]))
            found[n++] = slot->tts_tid;
        else
            missing[(*nmissing)++] = rows->ids[i];
    }
    table_endscan(scan);
    table_index_fetch_end(fetch);
    ExecDropSingleTupleTableSlot(slot);
    UnregisterSnapshot(snapshot);
    table_close(rel, NoLock);
    return n;
}

// The condition on a shard's rows in its partition, $2 to $4.
const char *shard_condition(const ShardKey *shard) {
    return shard->cell_name ? "o.shard_scope = $2 AND o.shard_identifier = $3 AND o.cell_name = $4"
                            : "o.shard_scope = $2 AND o.shard_identifier = $3 AND $4 = ''";
}

} // namespace

int64 delete_claimed_rows(const ClaimedRows *rows) {
    if (rows->n == 0)
        return 0;
    const ShardKey *shard = &rows->shard;
    Oid partition = shard_partition(shard);
    auto *found = (ItemPointerData *)palloc(sizeof(ItemPointerData) * rows->n);
    auto *missing = (int64 *)palloc(sizeof(int64) * rows->n);
    int nmissing;
    int n = find_claimed_rows(rows, partition, found, missing, &nmissing);
    Relation rel = table_open(partition, RowExclusiveLock);
    // Under the shard's claim: each ctid still holds the row found.
    for (int i = 0; i < n; i++)
        simple_table_tuple_delete(rel, &found[i], GetActiveSnapshot());
    table_close(rel, NoLock);
    int64 deleted = n;
    if (nmissing > 0) {
        // Gone (an operator skipped it), or moved where no ctid leads: the
        // partition was rewritten (compacted) since the claim.  By id, in
        // one scan of the partition.
        CommandCounterIncrement();
        Oid types[4] = {INT8ARRAYOID, INT4OID, INT8OID, TEXTOID};
        Datum args[4] = {pg::int8_array(missing, nmissing), Int32GetDatum(shard->shard_scope),
                         Int64GetDatum(shard->shard_identifier),
                         CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
        deleted += (int64)spi(
            "deleting delivered rows",
            psprintf("DELETE FROM %s o WHERE o.id = ANY ($1) AND %s",
                     quote_qualified_identifier(get_namespace_name(get_rel_namespace(partition)),
                                                get_rel_name(partition)),
                     shard_condition(shard)),
            4, types, args, false, SPI_OK_DELETE);
    }
    CommandCounterIncrement();
    return deleted;
}

void fail_claimed_message(const ClaimedRows *failing_rows, int32 category, int64 object_identifier,
                          const char *error) {
    DrainSegment segment = {};
    segment.shard = failing_rows->shard;
    segment.partition = shard_partition(&segment.shard);
    Message failed = {};
    failed.category = category;
    failed.object_identifier = object_identifier;
    int32 max_attempts;
    int32 attempts = record_error(&segment.shard, &failed, error, &max_attempts);
    stats_count_handler_error(category);
    if (max_attempts > 0 && attempts >= max_attempts) {
        // Its rows by id: a consumer's failure is rare enough for a scan
        // of the partition.
        dead_letter_rows(&segment, "id", pg::int8_array(failing_rows->ids, failing_rows->n),
                         INT8ARRAYOID, attempts, error);
        clear_error(&segment.shard);
        make_due(&segment);
    } else {
        back_off_rest(&segment, PG_INT64_MIN);
    }
    CommandCounterIncrement();
}

} // namespace pgoutbox
