// The claim-and-coalesce half of the delivery core (delivery.hpp, steps 1
// to 3): claims, the rows as they are now, stopped shards, messages; the
// leased batches of consumers and links, and the deletion of claimed rows
// they delivered.  Written without C++ objects that own resources around
// PostgreSQL calls: errors unwind through it freely.
#include "delivery/delivery.hpp"

#include "pg/compat.hpp"
#include "pg/run_as.hpp"
#include "pg/hash.hpp"
#include "pg/spi.hpp"
#include "registry/outbox_layout.hpp"

extern "C" {
#include "common/hashfn.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
}

namespace pgoutbox {

int drain_batch_size = 10000;
bool in_handler = false;

namespace {

// How close to full the transaction's cache of subtransaction XIDs
// (PGPROC_MAX_CACHED_SUBXIDS, 64) may get before a batch stops opening
// subtransactions.
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
    Oid filenode = pg::file_number(rel);
    table_close(rel, NoLock);
    return filenode;
}

bool subtransactions_left() {
    return !MyProc->subxidStatus.overflowed &&
           MyProc->subxidStatus.count < PGPROC_MAX_CACHED_SUBXIDS - cache_reserve;
}

void refuse_drain_in_handler(const char *function) {
    if (in_handler)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("%s cannot be called from a handler", function),
                        errdetail("A handler that drains would start drains without end.")));
}

namespace {

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
    if (pg::file_number(rel) != segment->filenode) {
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
        MemoryContext caller = CurrentMemoryContext;
        static SPIPlanPtr plan = nullptr;
        uint64 found =
            pg::spi_run_kept(&plan, "looking up stopped shards",
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
                             4, types, args, nullptr, true, SPI_OK_SELECT);
        MemoryContextSwitchTo(caller);
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
            MessageKey key = message_key(s, row);
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

} // namespace

int claim_and_coalesce(DrainBatch *batch, DrainStats *stats, RowNow **now_rows_out,
                       Message **messages_out) {
    TimestampTz now = GetCurrentTimestamp();
    // Claims first, then what the rows are now.
    for (int s = 0; s < batch->nsegments; s++) {
        DrainSegment *segment = &batch->segments[s];
        segment->outcome =
            segment->action != SegmentAction::Leave && claim_shard(&segment->shard, false)
                ? SegmentOutcome::Done
                : SegmentOutcome::Blocked;
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
        deleted +=
            (int64)pg::spi_run_here("deleting delivered rows",
                                    psprintf("DELETE FROM %s o WHERE o.id = ANY ($1) AND %s",
                                             pg::qualified_name(partition), shard_condition(shard)),
                                    4, types, args, false, SPI_OK_DELETE);
    }
    CommandCounterIncrement();
    return deleted;
}

} // namespace pgoutbox
