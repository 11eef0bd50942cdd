#include "capture/outbox_writer.hpp"

#include "registry/outbox_layout.hpp"

#include "stats/stats.hpp"
#include "worker_state/worker_state.hpp"

namespace pgoutbox {

namespace {

// Rows a writer holds, over all partitions, before it writes them all.
// Bounded by rows rather than per partition: a batch of 10,000 rows spread
// over 16 partitions held them all (about 5.5 MB of slots and tuples,
// faulted in afresh by every batch), and cost the backfill's batches a
// tenth of their time.
constexpr int held_rows = 2000;

// Its first block, which a reset keeps: room for held_rows rows of a
// narrow table (a slot and a tuple of 256 bytes each, and their headers).
constexpr Size writer_memory = Size(2) * 1024 * 1024;

// A finished writer's context, reset, for the next writer of the session
// to take: glibc gave a freed context's megabytes back to the kernel, and
// the next batch took them again a page fault at a time (2,200 for a
// re-sync of 100,000 rows).  A writer that fails takes its context with
// its transaction's memory; one that begins while another writes (user
// code run by a row's output function) makes its own.
MemoryContext spare_context = nullptr;

struct PartitionBuffer {
    int n;
    int made;               // slots made, on first use
    TupleTableSlot **slots; // room for a power of two
};

} // namespace

struct OutboxWriter {
    const Registry *registry;
    MemoryContext context;
    int64 next_id[2]; // ids reserved by the last nextval, by silo
    int64 ids_left[2];
    TupleDesc desc[2];           // cell, control
    PartitionBuffer *buffers[2]; // by remainder
    // Rows written of the latest category, for outbox.stats (a statement
    // writes rows of one category, so one count per statement).
    bool capture;
    int32 counted_category;
    int64 counted_rows;
    int64 total_rows;
    int held; // rows in the buffers, over all partitions
    // The partitions written rows of a category that has a handler, by
    // silo (worker_state.hpp, drain_at_commit); whether the latest
    // category has one.
    uint64 handled_partitions[2];
    int32 handled_category;
    bool handled;
    bool handled_known;
};

static const OutboxTable *table_of(const Registry *registry, int silo) {
    return silo == 0 ? &registry->cell_outbox : &registry->control_outbox;
}

OutboxWriter *outbox_writer_begin(const Registry *registry, bool capture) {
    MemoryContext context = spare_context;
    spare_context = nullptr;
    if (context == nullptr)
        context = AllocSetContextCreate(CurrentMemoryContext, "pg_outbox writer", writer_memory,
                                        writer_memory, ALLOCSET_DEFAULT_MAXSIZE);
    else
        MemoryContextSetParent(context, CurrentMemoryContext);
    auto *writer = (OutboxWriter *)MemoryContextAllocZero(context, sizeof(OutboxWriter));
    writer->registry = registry;
    writer->context = context;
    writer->capture = capture;
    return writer;
}

static void flush(OutboxWriter *writer, int silo, int remainder) {
    PartitionBuffer *buffer = &writer->buffers[silo][remainder];
    if (buffer->n == 0)
        return;
    const OutboxPartition *partition = &table_of(writer->registry, silo)->by_remainder[remainder];
    Relation rel = table_open(partition->relid, RowExclusiveLock);
    table_multi_insert(rel, buffer->slots, buffer->n, GetCurrentCommandId(true), 0, nullptr);
    for (int i = 0; i < partition->nindexes; i++) {
        const OutboxIndex *index = &partition->indexes[i];
        IndexInfo *info = index->info;
        Relation index_rel = index_open(index->oid, RowExclusiveLock);
        for (int r = 0; r < buffer->n; r++) {
            TupleTableSlot *slot = buffer->slots[r];
            Datum key_values[INDEX_MAX_KEYS];
            bool key_nulls[INDEX_MAX_KEYS];
            for (int k = 0; k < info->ii_NumIndexAttrs; k++)
                key_values[k] = slot_getattr(slot, info->ii_IndexAttrNumbers[k], &key_nulls[k]);
            index_insert(index_rel, key_values, key_nulls, &slot->tts_tid, rel,
                         info->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, false, info);
        }
        index_close(index_rel, NoLock);
    }
    table_close(rel, NoLock);
    for (int r = 0; r < buffer->n; r++)
        ExecClearTuple(buffer->slots[r]);
    writer->held -= buffer->n;
    buffer->n = 0;
}

// Writes every row the writer holds, of both silos.
static void flush_all(OutboxWriter *writer) {
    for (int silo = 0; silo < 2; silo++) {
        if (writer->buffers[silo] == nullptr)
            continue;
        int n = table_of(writer->registry, silo)->nremainders;
        for (int r = 0; r < n; r++)
            flush(writer, silo, r);
    }
}

void outbox_writer_add(OutboxWriter *writer, Silo which, const OutboxRow *row) {
    int silo = which == Silo::Cell ? 0 : 1;
    const OutboxTable *table = table_of(writer->registry, silo);
    MemoryContext old = MemoryContextSwitchTo(writer->context);
    if (writer->buffers[silo] == nullptr) {
        Relation rel = table_open(table->relid, AccessShareLock);
        writer->desc[silo] = CreateTupleDescCopy(RelationGetDescr(rel));
        table_close(rel, AccessShareLock);
        writer->buffers[silo] =
            (PartitionBuffer *)palloc0(sizeof(PartitionBuffer) * table->nremainders);
    }

    Datum values[OUTBOX_CELL_NAME + 1];
    bool nulls[OUTBOX_CELL_NAME + 1] = {false};
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    // One nextval reserves a block of ids (the sequence increments by
    // id_block).  Ids still follow the order of changes to an object: two
    // statements that change the same row are serialized by its row lock,
    // and the second reserves its block after the first has committed.
    if (writer->ids_left[silo] == 0) {
        writer->next_id[silo] = nextval_internal(table->sequence, false);
        writer->ids_left[silo] = table->id_block;
    }
    writer->total_rows++;
    if (row->category != writer->counted_category) {
        if (writer->capture)
            stats_count_saved(writer->counted_category, writer->counted_rows);
        writer->counted_category = row->category;
        writer->counted_rows = 0;
    }
    writer->counted_rows++;
    values[OUTBOX_ID] = Int64GetDatum(writer->next_id[silo]++);
    writer->ids_left[silo]--;
    values[OUTBOX_SHARD_SCOPE] = Int32GetDatum(row->shard_scope);
    values[OUTBOX_SHARD_IDENTIFIER] = Int64GetDatum(row->shard_identifier);
    values[OUTBOX_CATEGORY] = Int32GetDatum(row->category);
    values[OUTBOX_OBJECT_IDENTIFIER] = Int64GetDatum(row->object_identifier);
    values[OUTBOX_PAYLOAD] = row->payload;
    nulls[OUTBOX_PAYLOAD] = row->payload == (Datum)0;
    values[OUTBOX_SCHEDULED_FROM] = TimestampTzGetDatum(now);
    values[OUTBOX_SCHEDULED_FOR] = TimestampTzGetDatum(now);
    values[OUTBOX_DATE_ADDED] = TimestampTzGetDatum(now);
    if (which == Silo::Control)
        values[OUTBOX_CELL_NAME] = CStringGetTextDatum(row->cell_name);

    // Route to the hash partition of shard_identifier, as PostgreSQL would.
    int remainder = outbox_remainder(table, row->shard_identifier);
    if (!writer->handled_known || row->category != writer->handled_category) {
        const Registry *registry = writer->registry;
        writer->handled_category = row->category;
        writer->handled_known = true;
        writer->handled = false;
        for (int h = 0; h < registry->nhandlers && !writer->handled; h++)
            writer->handled = registry->handler_categories[h] == row->category;
    }
    if (writer->handled)
        writer->handled_partitions[silo] |= uint64(1) << (remainder % 64);
    PartitionBuffer *buffer = &writer->buffers[silo][remainder];
    // Slots are made as the buffer grows: a one-row statement makes one.
    if (buffer->n == buffer->made) {
        if ((buffer->made & (buffer->made - 1)) == 0) // 0 or a power of two: full
            buffer->slots = buffer->made == 0
                                ? (TupleTableSlot **)palloc(sizeof(TupleTableSlot *))
                                : (TupleTableSlot **)repalloc(
                                      buffer->slots, sizeof(TupleTableSlot *) * buffer->made * 2);
        buffer->slots[buffer->made++] =
            MakeSingleTupleTableSlot(writer->desc[silo], &TTSOpsHeapTuple);
    }
    HeapTuple tuple = heap_form_tuple(writer->desc[silo], values, nulls);
    ExecStoreHeapTuple(tuple, buffer->slots[buffer->n++], true);
    MemoryContextSwitchTo(old);
    if (++writer->held == held_rows)
        flush_all(writer);
}

int64 outbox_writer_finish(OutboxWriter *writer) {
    if (writer->capture)
        stats_count_saved(writer->counted_category, writer->counted_rows);
    if (writer->capture && writer->total_rows > 0)
        notify_consumers_at_commit();
    for (int silo = 0; silo < 2; silo++)
        drain_at_commit(silo, writer->handled_partitions[silo]);
    flush_all(writer);
    int64 written = writer->total_rows;
    MemoryContext context = writer->context;
    if (spare_context == nullptr) {
        MemoryContextReset(context);
        MemoryContextSetParent(context, TopMemoryContext);
        spare_context = context;
    } else {
        MemoryContextDelete(context);
    }
    return written;
}

} // namespace pgoutbox
