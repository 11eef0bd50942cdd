// Drain passes (drain_pass.hpp).  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "delivery/drain_pass.hpp"

#include "pg/hash.hpp"
#include "pg/run_as.hpp"
#include "pg/spi.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/datum.h"
#include "utils/tuplestore.h"
}

namespace pgoutbox {

namespace {

// Memory a pass's tuplestore holds before it spills to a temporary file.
constexpr int store_kbytes = 4096;
// Memory the sort of a partition read may use before it spills.
constexpr const char *read_work_mem = "16384"; // kB

// Columns of a pass read.
enum PassColumn {
    PC_CTID = 1,
    PC_ID,
    PC_CATEGORY,
    PC_OBJECT,
    PC_SCHEDULED_FOR,
    PC_DATE_ADDED,
    PC_SCOPE,
    PC_SHARD,
    PC_CELL,
};

// What happens to the rows of the shard the stream is in.
enum class Rest { Deliver, Skip, BackOff };

} // namespace

// One per pass: its fields stay in the order the pass reads them, padding or
// not.  NOLINTNEXTLINE(clang-analyzer-optin.performance.Padding)
struct DrainPass {
    MemoryContext context;       // the pass
    MemoryContext batch_context; // the current batch
    bool silos[2];               // cell, control
    int32 *categories;           // read; NULL: those with a handler
    int ncategories;
    char *cell_name; // control rows of this cell only; NULL: all
    bool linked;     // a link's pass: reads the rows it delivers elsewhere
    PassScope scope;
    uint64 taken[2]; // the written bits it took (partition_watch.hpp)
    int silo;        // being walked: 0 cell, 1 control
    int partition;   // being walked, in by_remainder order; -1 before the first
    Oid partition_relid;
    Oid partition_filenode;
    TimestampTz read_at;
    TimestampTz read_began; // the read's transaction: its now()
    Tuplestorestate *store; // the due rows of the partition, sorted
    TupleDesc store_desc;
    TupleTableSlot *slot;
    bool pending;          // slot holds a row that did not fit in the last batch
    SnapshotData snapshot; // what the partition was read with
    TransactionId *xip, *subxip;
    // What the worker learns of the partition (a watched pass): whether
    // its read was read in full (no live lease, no link taking its rows),
    // whether a batch of it left something behind, when its first shard
    // that waits for a backoff is due.
    bool watch_pending;
    bool read_whole;
    bool hid_wanted; // a consumer's lease hid rows the pass would take
    bool left_behind;
    TimestampTz next_due;

    // The shard the stream is in.
    bool in_shard;
    ShardKey shard;
    char *cell; // shard.cell_name's storage
    int cell_size;
    char *scratch; // a row's cell, to compare
    int scratch_size;
    Rest rest;

    DrainBatch *batch; // the last one handed out
    bool batch_done;   // drain_batch() returned for it
    TransactionId batch_xid;
};

namespace {

const OutboxTable *outbox_of(int silo) {
    const Registry *registry = registry_get();
    return silo == 0 ? &registry->cell_outbox : &registry->control_outbox;
}

void keep_snapshot(DrainPass *pass, Snapshot snapshot) {
    if (pass->xip == nullptr) {
        pass->xip = (TransactionId *)MemoryContextAlloc(
            pass->context, sizeof(TransactionId) * Max(GetMaxSnapshotXidCount(), 1));
        pass->subxip = (TransactionId *)MemoryContextAlloc(
            pass->context, sizeof(TransactionId) * Max(GetMaxSnapshotSubxidCount(), 1));
    }
    pass->snapshot = *snapshot;
    if (snapshot->xcnt > 0)
        memcpy(pass->xip, snapshot->xip, sizeof(TransactionId) * snapshot->xcnt);
    if (snapshot->subxcnt > 0)
        memcpy(pass->subxip, snapshot->subxip, sizeof(TransactionId) * snapshot->subxcnt);
    pass->snapshot.xip = pass->xip;
    pass->snapshot.subxip = pass->subxip;
    pass->snapshot.copied = true;
    pass->snapshot.regd_count = 0;
    pass->snapshot.active_count = 0;
}

void drop_store(DrainPass *pass) {
    if (pass->slot != nullptr)
        ExecDropSingleTupleTableSlot(pass->slot);
    if (pass->store != nullptr)
        tuplestore_end(pass->store);
    pass->slot = nullptr;
    pass->store = nullptr;
    pass->pending = false;
    pass->in_shard = false;
}

// The plans of partition reads, by partition: a pass reads every partition,
// and planning the read cost more than running it on a shallow outbox.
struct ReadPlan {
    Oid partition;
    int kind;
    SPIPlanPtr plan;
};
ReadPlan read_plans[256];
// The kind of hid_wanted_rows's plan (a partition is of one silo); the
// reads' kinds are 0 to 11.
constexpr int hid_wanted_kind = 12;
int nread_plans = 0;

SPIPlanPtr *read_plan(Oid partition, int kind) {
    for (int i = 0; i < nread_plans; i++)
        if (read_plans[i].partition == partition && read_plans[i].kind == kind)
            return &read_plans[i].plan;
    if (nread_plans == lengthof(read_plans)) {
        // The outbox was made again (the extension dropped and created):
        // the plans of partitions that are gone go.
        for (int i = 0; i < nread_plans; i++)
            SPI_freeplan(read_plans[i].plan);
        nread_plans = 0;
    }
    read_plans[nread_plans] = ReadPlan{partition, kind, nullptr};
    return &read_plans[nread_plans++].plan;
}

// Whether, in the read's snapshot, rows of the silo were left out of it for
// a while that no commit ends: a consumer's live lease (it lapses).  Paused
// shards are not: resuming one wakes the worker (outbox._drain_soon()), and
// neither are the rows a link takes, since removing the link does too
// (60_drain.sql: before, each pass of a linked database read every
// partition again, a fifth of control's time while its links ran in
// bench/cells).
bool rows_hidden(bool control) {
    static SPIPlanPtr plans[2] = {nullptr, nullptr};
    pg::spi_run_kept(&plans[control ? 1 : 0], "reading the leases",
                     control ? "SELECT EXISTS (SELECT FROM outbox.consumer_claims l"
                               " WHERE l.silo = 'control' AND l.lease_until > pg_catalog.now())"
                             : "SELECT EXISTS (SELECT FROM outbox.consumer_claims l"
                               " WHERE l.silo = 'cell' AND l.lease_until > pg_catalog.now())",
                     0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT);
    bool isnull;
    return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

// Whether, in the read's snapshot, a consumer's live lease hid due rows of
// the read's categories in the partition being read: the worker then wants
// those shards' turns (consumers/, docs/consumers.md "Turns").  Asked by
// the worker's passes only, and only when a lease hid something: a second
// scan of the partition, with the leases hashed; its plan kept per
// partition, as the reads' are.
bool hid_wanted_rows(const DrainPass *pass, bool control, Datum categories) {
    SPIPlanPtr *plan = read_plan(pass->partition_relid, hid_wanted_kind);
    const char *sql =
        *plan != nullptr
            ? nullptr
            : psprintf("SELECT EXISTS (SELECT FROM %s o WHERE o.category = ANY ($1) AND "
                       "o.scheduled_for <= $2"
                       " AND (o.shard_scope, o.shard_identifier, %s) IN (SELECT l.shard_scope,"
                       " l.shard_identifier, l.cell_name FROM outbox.consumer_claims l WHERE "
                       "l.silo = '%s'"
                       " AND l.lease_until > pg_catalog.now()))",
                       pg::qualified_name(pass->partition_relid),
                       control ? "o.cell_name" : "''::text", control ? "control" : "cell");
    Oid types[2] = {INT4ARRAYOID, TIMESTAMPTZOID};
    Datum args[2] = {categories, TimestampTzGetDatum(pass->read_at)};
    pg::spi_run_kept(plan, "looking for rows a lease hid", sql, 2, types, args, nullptr, true,
                     SPI_OK_SELECT);
    bool isnull;
    return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

// The cells with a link (a server), as a text[], in the read's snapshot.
Datum linked_cells() {
    static SPIPlanPtr plan = nullptr;
    pg::spi_run_kept(&plan, "reading the linked cells",
                     "SELECT COALESCE(pg_catalog.array_agg(c.name), '{}'::text[])"
                     " FROM outbox.cells c WHERE c.server IS NOT NULL",
                     0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT);
    bool isnull;
    return datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), false,
                     -1);
}

// Whether, in the read's snapshot, a shard of the silo is paused or leased
// to a consumer.  Mostly none is: the read then leaves out the conditions
// on them, which its cached plan may check row by row with an index probe
// (a plan made while the partition was small: half a link pass's time in
// bench/cells).  A pause or a lease that commits after the snapshot is not
// in the read either way.
bool rows_held(bool control) {
    static SPIPlanPtr plans[2] = {nullptr, nullptr};
    pg::spi_run_kept(
        &plans[control ? 1 : 0], "reading the pauses and leases",
        control ? "SELECT EXISTS (SELECT FROM outbox.paused_shards p WHERE p.silo = 'control')"
                  " OR EXISTS (SELECT FROM outbox.consumer_claims l WHERE l.silo = 'control'"
                  " AND l.lease_until > pg_catalog.now())"
                : "SELECT EXISTS (SELECT FROM outbox.paused_shards p WHERE p.silo = 'cell')"
                  " OR EXISTS (SELECT FROM outbox.consumer_claims l WHERE l.silo = 'cell'"
                  " AND l.lease_until > pg_catalog.now())",
        0, nullptr, nullptr, nullptr, true, SPI_OK_SELECT);
    bool isnull;
    return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

// The rows of one shard as a partition read streams them: a shard is due
// when any of its rows is.  Its rows go to the pass's store from its first
// due row on, with those before it, which wait (spilling to a file past
// store_kbytes) until one is due or the shard ends; a shard that ends with
// none due leaves only its earliest scheduled_for, when the worker reads
// the partition again.
struct ShardRun {
    bool started;
    int32 scope;
    int64 identifier;
    char *cell; // NULL: a cell row; palloc'd, of cell_size
    int cell_size;
    bool due;
    TimestampTz earliest;
    Tuplestorestate *waiting;
};

bool same_run(const ShardRun *run, int32 scope, int64 identifier, const text *cell) {
    if (!run->started || run->scope != scope || run->identifier != identifier)
        return false;
    if (cell == nullptr || run->cell == nullptr)
        return cell == nullptr && run->cell == nullptr;
    int length = VARSIZE_ANY_EXHDR(cell);
    return (int)strlen(run->cell) == length && memcmp(run->cell, VARDATA_ANY(cell), length) == 0;
}

void shard_run_end(DrainPass *pass, ShardRun *run) {
    if (run->started && !run->due)
        pass->next_due = Min(pass->next_due, run->earliest);
    tuplestore_clear(run->waiting);
    run->started = false;
}

void shard_run_add(DrainPass *pass, ShardRun *run, HeapTuple row, TupleDesc desc) {
    bool isnull, cell_null;
    int32 scope = DatumGetInt32(SPI_getbinval(row, desc, PC_SCOPE, &isnull));
    int64 identifier = DatumGetInt64(SPI_getbinval(row, desc, PC_SHARD, &isnull));
    Datum cell_datum = SPI_getbinval(row, desc, PC_CELL, &cell_null);
    const text *cell = cell_null ? nullptr : DatumGetTextPP(cell_datum);
    if (!same_run(run, scope, identifier, cell)) {
        shard_run_end(pass, run);
        run->started = true;
        run->scope = scope;
        run->identifier = identifier;
        run->due = false;
        run->earliest = DT_NOEND;
        if (cell == nullptr) {
            run->cell = nullptr;
        } else {
            int length = VARSIZE_ANY_EXHDR(cell);
            if (length + 1 > run->cell_size || run->cell == nullptr) {
                run->cell_size = Max(length + 1, 64);
                run->cell = (char *)MemoryContextAlloc(pass->context, run->cell_size);
            }
            memcpy(run->cell, VARDATA_ANY(cell), length);
            run->cell[length] = '\0';
        }
    }
    if (run->due) {
        tuplestore_puttuple(pass->store, row);
        return;
    }
    TimestampTz scheduled =
        DatumGetTimestampTz(SPI_getbinval(row, desc, PC_SCHEDULED_FOR, &isnull));
    if (scheduled > pass->read_at) {
        run->earliest = Min(run->earliest, scheduled);
        tuplestore_puttuple(run->waiting, row);
        return;
    }
    run->due = true;
    while (tuplestore_gettupleslot(run->waiting, true, false, pass->slot))
        tuplestore_puttupleslot(pass->store, pass->slot);
    tuplestore_clear(run->waiting);
    tuplestore_puttuple(pass->store, row);
}

// Reads the due rows of the next partition; false when there is none left.
// The rows come sorted by shard and id; a shard is due when any of its rows
// is (ShardRun).
bool read_next_partition(DrainPass *pass) {
    // SPI's cursor calls leave SPI's procedure context current: the caller's
    // (the batch's) must be current again on the way out, or what the caller
    // allocates next would be freed with SPI's at the end of the call.
    MemoryContext caller = CurrentMemoryContext;
    drop_store(pass);
    if (pass->watch_pending) {
        // Its batches are over (each settled by the call that followed it).
        TimestampTz again = 0;
        if (pass->read_whole && !pass->left_behind)
            again = Min(pass->next_due,
                        TimestampTzPlusMilliseconds(pass->read_at, partition_trusted_ms));
        partition_watch_read(pass->silo, pass->partition, pass->partition_relid, again,
                             pass->left_behind);
        worker_offered(pass->silo, pass->partition, pass->read_began, !pass->hid_wanted,
                       pass->left_behind);
        pass->watch_pending = false;
    }
    if (pass->scope != PassScope::Unwatched && partition_watch_handlers_changed())
        registry_forget();
    const Registry *registry = registry_get();
    TimestampTz now = GetCurrentTimestamp();
    for (;;) {
        if (pass->partition + 1 < outbox_of(pass->silo)->nremainders) {
            pass->partition++;
        } else {
            do
                pass->silo++;
            while (pass->silo < 2 && !pass->silos[pass->silo]);
            if (pass->silo >= 2)
                return false;
            pass->partition = 0;
        }
        // Asked first: it takes the partition's bit even when there is
        // nothing to read for (no handler at all).
        if (partition_watch_wants(pass->scope, registry, pass->silo, pass->partition,
                                  outbox_of(pass->silo)->by_remainder[pass->partition].relid, now,
                                  pass->taken) &&
            (pass->categories ? pass->ncategories : registry->nhandlers) > 0)
            break;
    }
    bool control = pass->silo == 1;
    pass->partition_relid = outbox_of(pass->silo)->by_remainder[pass->partition].relid;
    // The keys group a shard's rows; their order between shards means
    // nothing, so the cell sorts bytewise (under the database's collation
    // the sort's strcoll calls were the top of a link's pass: bench/cells),
    // and not at all when the read is of one cell's rows.  The identifier
    // comes first: the sort keeps its first key beside each tuple, and
    // the scope, mostly one value, made every comparison read both tuples
    // (a sixth of a claim's time in bench/consumer, workload B; a
    // partition's read takes 10 ms instead of 14).
    bool one_cell = control && pass->cell_name != nullptr;
    const char *shard = control && !one_cell
                            ? "o.shard_identifier, o.shard_scope, o.cell_name COLLATE \"C\""
                            : "o.shard_identifier, o.shard_scope";
    int ncategories = pass->categories ? pass->ncategories : registry->nhandlers;
    const int32 *read = pass->categories ? pass->categories : registry->handler_categories;
    Datum *categories = (Datum *)palloc(sizeof(Datum) * ncategories);
    for (int c = 0; c < ncategories; c++)
        categories[c] = Int32GetDatum(read[c]);
    Oid types[4] = {INT4ARRAYOID, TIMESTAMPTZOID, TEXTOID, TEXTARRAYOID};
    pass->read_at = GetCurrentTimestamp();
    pass->read_began = GetCurrentTransactionStartTimestamp();
    Datum args[4] = {
        PointerGetDatum(construct_array(categories, ncategories, INT4OID, 4, true, TYPALIGN_INT)),
        TimestampTzGetDatum(pass->read_at),
        one_cell ? CStringGetTextDatum(pass->cell_name) : (Datum)0, (Datum)0};

    // A fresh snapshot, kept: claims.cpp tells from it which shard errors
    // were written after the read.
    PushActiveSnapshot(GetTransactionSnapshot());
    keep_snapshot(pass, GetActiveSnapshot());
    // Kinds of read, each with a plan of its own: for handlers, for claims,
    // for claims of one cell's rows ($3), and the last two for a link's
    // pass, which alone reads the rows a link delivers to another cluster;
    // each again with the conditions on pauses and leases.
    bool held = rows_held(control);
    // The rows a link delivers to another cluster, left out of a control
    // read by a filter on the scan (linked_elsewhere's anti-join cost a
    // handler pass over a fill for the links half of the links' head start
    // in bench/cells).
    if (control && !pass->linked)
        args[3] = linked_cells();
    // Parameters a read does not use are NULL (the portal copies them all).
    char nulls[5] = {' ', ' ', one_cell ? ' ' : 'n', control && !pass->linked ? ' ' : 'n', '\0'};
    int kind = (pass->categories == nullptr ? 0
                : one_cell                  ? 2
                                            : 1) +
               (pass->linked ? 3 : 0) + (held ? 6 : 0);
    // Which shards are due is worked out as the rows come (ShardRun): a
    // window over the shard in SQL doubled the read's cost (bench/cells).
    char *sql = psprintf(
        "SELECT o.ctid, o.id, o.category, o.object_identifier, o.scheduled_for, o.date_added,"
        " o.shard_scope, o.shard_identifier, %s FROM %s o WHERE o.category = ANY ($1)%s%s%s"
        " ORDER BY %s, o.id",
        control ? "o.cell_name" : "NULL::text", pg::qualified_name(pass->partition_relid),
        held ? not_held(control ? Silo::Control : Silo::Cell) : "",
        pass->linked ? ""
        : control    ? " AND o.cell_name <> ALL ($4)"
                     : linked_elsewhere(Silo::Cell),
        one_cell ? " AND o.cell_name = $3" : "", shard);
    int level = NewGUCNestLevel();
    (void)set_config_option("work_mem", read_work_mem, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                            true, 0, false);
    Portal portal = SPI_cursor_open(nullptr,
                                    pg::spi_prepare_kept(read_plan(pass->partition_relid, kind),
                                                         "a partition read", sql, 4, types),
                                    args, nulls, true);
    MemoryContext old = MemoryContextSwitchTo(pass->context);
    // interXact: its temporary file outlives this transaction.
    pass->store = tuplestore_begin_heap(false, true, store_kbytes);
    pass->store_desc = CreateTupleDescCopy(portal->tupDesc);
    pass->slot = MakeSingleTupleTableSlot(pass->store_desc, &TTSOpsMinimalTuple);
    MemoryContextSwitchTo(old);
    pass->next_due = DT_NOEND;
    ShardRun run = {};
    run.waiting = tuplestore_begin_heap(false, false, store_kbytes);
    for (;;) {
        SPI_cursor_fetch(portal, true, 1000);
        if (SPI_processed == 0)
            break;
        for (uint64 i = 0; i < SPI_processed; i++)
            shard_run_add(pass, &run, SPI_tuptable->vals[i], SPI_tuptable->tupdesc);
        SPI_freetuptable(SPI_tuptable);
    }
    shard_run_end(pass, &run);
    tuplestore_end(run.waiting);
    SPI_cursor_close(portal);
    if (pass->scope != PassScope::Unwatched) {
        pass->read_whole = !rows_hidden(control);
        pass->hid_wanted = held && hid_wanted_rows(pass, control, args[0]);
        pass->left_behind = false;
        pass->watch_pending = true;
    }
    AtEOXact_GUC(false, level); // work_mem, and whatever the read's code set
    PopActiveSnapshot();
    pass->partition_filenode = partition_filenode(pass->partition_relid);
    MemoryContextSwitchTo(caller);
    return true;
}

bool same_shard(const ShardKey *a, Silo silo, int32 scope, int64 identifier, const char *cell) {
    return a->silo == silo && a->shard_scope == scope && a->shard_identifier == identifier &&
           (cell == nullptr || strcmp(a->cell_name, cell) == 0);
}

// A row's cell as a C string, in the pass's buffer when it is not the
// current shard's: compared without allocating, since a skipped hot shard
// streams past row by row.
const char *row_cell(DrainPass *pass, TupleTableSlot *slot, char **scratch, int *scratch_size) {
    bool isnull;
    Datum value = slot_getattr(slot, PC_CELL, &isnull);
    if (isnull)
        return nullptr;
    text *cell = DatumGetTextPP(value);
    int length = VARSIZE_ANY_EXHDR(cell);
    if (pass->in_shard && pass->shard.cell_name != nullptr &&
        (int)strlen(pass->shard.cell_name) == length &&
        memcmp(pass->shard.cell_name, VARDATA_ANY(cell), length) == 0)
        return pass->shard.cell_name;
    if (length + 1 > *scratch_size) {
        *scratch_size = Max(length + 1, 64);
        *scratch = (char *)MemoryContextAlloc(pass->context, *scratch_size);
    }
    memcpy(*scratch, VARDATA_ANY(cell), length);
    (*scratch)[length] = '\0';
    return *scratch;
}

void enter_shard(DrainPass *pass, Silo silo, int32 scope, int64 identifier, const char *cell) {
    pass->in_shard = true;
    pass->rest = Rest::Deliver;
    pass->shard.silo = silo;
    pass->shard.shard_scope = scope;
    pass->shard.shard_identifier = identifier;
    pass->shard.cell_name = nullptr;
    if (cell != nullptr) {
        int size = (int)strlen(cell) + 1;
        if (size > pass->cell_size) {
            pass->cell = (char *)MemoryContextAlloc(pass->context, Max(size, 64));
            pass->cell_size = Max(size, 64);
        }
        memcpy(pass->cell, cell, size);
        pass->shard.cell_name = pass->cell;
    }
}

// A row read back from a tuplestore that spilled is allocated in the
// current memory context and owned by the slot, which may keep it past this
// batch (a pending row): in the pass's context, not the batch's.
bool next_row(DrainPass *pass) {
    MemoryContext old = MemoryContextSwitchTo(pass->context);
    bool found = tuplestore_gettupleslot(pass->store, true, false, pass->slot);
    MemoryContextSwitchTo(old);
    return found;
}

// What the last batch says about the rest of the shard it ended in.
void settle_last_batch(DrainPass *pass) {
    DrainBatch *batch = pass->batch;
    pass->batch = nullptr;
    if (batch == nullptr || batch->nsegments == 0)
        return;
    bool committed = pass->batch_done;
    if (committed && TransactionIdIsValid(pass->batch_xid))
        committed = TransactionIdIsCurrentTransactionId(pass->batch_xid) ||
                    TransactionIdDidCommit(pass->batch_xid);
    for (int i = 0; i < batch->nsegments; i++)
        pass->left_behind =
            pass->left_behind || !committed || batch->segments[i].outcome != SegmentOutcome::Done;
    if (!pass->in_shard)
        return;
    const DrainSegment *last = &batch->segments[batch->nsegments - 1];
    if (!same_shard(&pass->shard, last->shard.silo, last->shard.shard_scope,
                    last->shard.shard_identifier, last->shard.cell_name))
        return;
    // Its deletions count only if the (sub)transaction that made them is
    // still in effect or committed: a caller may have rolled back to a
    // savepoint since, or ended the transaction with ROLLBACK.
    if (!committed || last->outcome == SegmentOutcome::Blocked)
        pass->rest = Rest::Skip;
    else if (last->outcome == SegmentOutcome::Failed)
        pass->rest = Rest::BackOff;
}

} // namespace

DrainPass *drain_pass_begin(bool cell, bool control, const int32 *categories, int ncategories,
                            const char *cell_name, bool linked, PassScope scope) {
    MemoryContext context =
        AllocSetContextCreate(TopMemoryContext, "pg_outbox drain pass", ALLOCSET_DEFAULT_SIZES);
    auto *pass = (DrainPass *)MemoryContextAllocZero(context, sizeof(DrainPass));
    pass->context = context;
    pass->batch_context =
        AllocSetContextCreate(context, "pg_outbox drain batch rows", ALLOCSET_DEFAULT_SIZES);
    pass->silos[0] = cell;
    pass->silos[1] = control;
    pass->linked = linked;
    pass->scope = scope;
    if (categories != nullptr) {
        pass->categories =
            (int32 *)MemoryContextAlloc(context, sizeof(int32) * Max(ncategories, 1));
        memcpy(pass->categories, categories, sizeof(int32) * ncategories);
        pass->ncategories = ncategories;
    }
    if (cell_name != nullptr)
        pass->cell_name = MemoryContextStrdup(context, cell_name);
    pass->silo = cell ? 0 : control ? 1 : 2;
    pass->partition = -1;
    return pass;
}

DrainBatch *drain_pass_next(DrainPass *pass, int max_rows, int max_shards, int max_messages) {
    settle_last_batch(pass);
    if (pass->silo >= 2)
        return nullptr;
    // The extension may have been dropped and created again since.
    if (pass->store != nullptr &&
        (pass->partition >= outbox_of(pass->silo)->nremainders ||
         outbox_of(pass->silo)->by_remainder[pass->partition].relid != pass->partition_relid)) {
        drop_store(pass);
        pass->silo = 2;
        return nullptr;
    }
    MemoryContextReset(pass->batch_context);
    MemoryContext old = MemoryContextSwitchTo(pass->batch_context);
    auto *batch = (DrainBatch *)palloc0(sizeof(DrainBatch));
    batch->rows = (DrainRow *)palloc(sizeof(DrainRow) * Max(max_rows, 1));
    batch->segments = (DrainSegment *)palloc(sizeof(DrainSegment) * Max(max_shards, 1));
    batch->read_snapshot = &pass->snapshot;
    Silo silo = pass->silo == 0 ? Silo::Cell : Silo::Control;
    // The messages so far, when bounded: each new MessageKey is one.
    HTAB *keys = max_messages == INT_MAX
                     ? nullptr
                     : pg::blob_hash("pg_outbox batch messages", Min(max_rows, 4096),
                                     sizeof(MessageKey), sizeof(MessageKey), pass->batch_context);
    int messages = 0;

    for (;;) {
        if (!pass->pending && (pass->store == nullptr || !next_row(pass))) {
            // A batch holds rows of one partition read: one read snapshot.
            if (batch->nrows > 0)
                break;
            if (!read_next_partition(pass)) {
                MemoryContextSwitchTo(old);
                return nullptr;
            }
            silo = pass->silo == 0 ? Silo::Cell : Silo::Control;
            continue;
        }
        pass->pending = false;
        TupleTableSlot *slot = pass->slot;
        bool isnull;
        int32 scope = DatumGetInt32(slot_getattr(slot, PC_SCOPE, &isnull));
        int64 identifier = DatumGetInt64(slot_getattr(slot, PC_SHARD, &isnull));
        const char *cell = row_cell(pass, slot, &pass->scratch, &pass->scratch_size);
        if (!pass->in_shard || !same_shard(&pass->shard, silo, scope, identifier, cell))
            enter_shard(pass, silo, scope, identifier, cell);
        if (pass->rest == Rest::Skip)
            continue;
        SegmentAction action =
            pass->rest == Rest::BackOff ? SegmentAction::BackOff : SegmentAction::Deliver;
        DrainSegment *segment =
            batch->nsegments > 0 ? &batch->segments[batch->nsegments - 1] : nullptr;
        bool new_segment = segment == nullptr || segment->action != action ||
                           !same_shard(&segment->shard, silo, scope, identifier, cell);
        if (batch->nrows >= max_rows ||
            (new_segment && (batch->nsegments >= max_shards || messages >= max_messages))) {
            pass->pending = true;
            break;
        }
        if (new_segment) {
            segment = &batch->segments[batch->nsegments++];
            segment->shard = pass->shard;
            segment->shard.cell_name = cell != nullptr ? pstrdup(cell) : nullptr;
            segment->partition = pass->partition_relid;
            segment->filenode = pass->partition_filenode;
            segment->action = action;
            segment->first = batch->nrows;
            segment->nrows = 0;
            segment->back_off_rest = false;
            segment->outcome = SegmentOutcome::Done;
        }
        DrainRow *row = &batch->rows[batch->nrows++];
        segment->nrows++;
        row->ctid = *(ItemPointer)DatumGetPointer(slot_getattr(slot, PC_CTID, &isnull));
        row->id = DatumGetInt64(slot_getattr(slot, PC_ID, &isnull));
        row->category = DatumGetInt32(slot_getattr(slot, PC_CATEGORY, &isnull));
        row->object_identifier = DatumGetInt64(slot_getattr(slot, PC_OBJECT, &isnull));
        row->scheduled_for = DatumGetTimestampTz(slot_getattr(slot, PC_SCHEDULED_FOR, &isnull));
        row->date_added = DatumGetTimestampTz(slot_getattr(slot, PC_DATE_ADDED, &isnull));
        if (keys != nullptr && action == SegmentAction::Deliver) {
            MessageKey key = message_key(batch->nsegments - 1, row);
            bool found;
            (void)hash_search(keys, &key, HASH_ENTER, &found);
            messages += found ? 0 : 1;
        }
    }
    MemoryContextSwitchTo(old);
    pass->batch = batch;
    pass->batch_done = false;
    return batch;
}

void drain_pass_batch_done(DrainPass *pass) {
    pass->batch_done = true;
    // The deletions were made in the caller's (sub)transaction; without an
    // XID it deleted nothing.
    pass->batch_xid = GetCurrentTransactionIdIfAny();
}

bool drain_pass_reads(const DrainPass *pass, bool cell, bool control, const int32 *categories,
                      int ncategories, const char *cell_name) {
    return !pass->linked && pass->silos[0] == cell && pass->silos[1] == control &&
           (pass->categories == nullptr) == (categories == nullptr) &&
           (categories == nullptr ||
            (pass->ncategories == ncategories &&
             memcmp(pass->categories, categories, sizeof(int32) * ncategories) == 0)) &&
           (pass->cell_name == nullptr) == (cell_name == nullptr) &&
           (cell_name == nullptr || strcmp(pass->cell_name, cell_name) == 0);
}

TimestampTz drain_pass_read_at(const DrainPass *pass) {
    return pass->read_at;
}

void drain_pass_end(DrainPass *pass) {
    drop_store(pass);
    MemoryContextDelete(pass->context);
}

DrainBatch *read_shard(const ShardKey *shard, int max_rows) {
    const Registry *registry = registry_get();
    auto *batch = (DrainBatch *)palloc0(sizeof(DrainBatch));
    batch->rows = (DrainRow *)palloc(sizeof(DrainRow) * Max(max_rows, 1));
    batch->segments = (DrainSegment *)palloc(sizeof(DrainSegment));
    if (registry->nhandlers == 0)
        return batch;
    Oid partition = shard_partition(shard);
    Datum *categories = (Datum *)palloc(sizeof(Datum) * registry->nhandlers);
    for (int h = 0; h < registry->nhandlers; h++)
        categories[h] = Int32GetDatum(registry->handler_categories[h]);
    Oid types[5] = {INT4OID, INT8OID, INT4ARRAYOID, INT4OID, TEXTOID};
    Datum args[5] = {Int32GetDatum(shard->shard_scope), Int64GetDatum(shard->shard_identifier),
                     PointerGetDatum(construct_array(categories, registry->nhandlers, INT4OID, 4,
                                                     true, TYPALIGN_INT)),
                     Int32GetDatum(max_rows),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    char *sql = psprintf(
        "SELECT row_ctid, id, category, object_identifier, scheduled_for, date_added FROM ("
        "SELECT o.ctid AS row_ctid, o.*, pg_catalog.min(o.scheduled_for) OVER () AS due_at"
        " FROM %s o WHERE o.shard_scope = $1 AND o.shard_identifier = $2"
        " AND o.category = ANY ($3)%s%s) s WHERE due_at <= pg_catalog.now() ORDER BY id LIMIT $4",
        pg::qualified_name(partition), shard->cell_name ? " AND o.cell_name = $5" : "",
        psprintf("%s%s", not_held(shard->silo), linked_elsewhere(shard->silo)));
    uint64 n = pg::spi_run("reading a shard", sql, shard->cell_name ? 5 : 4, types, args, nullptr,
                           true, 0, SPI_OK_SELECT);
    for (uint64 i = 0; i < n; i++) {
        Datum values[PC_DATE_ADDED];
        bool nulls[PC_DATE_ADDED];
        heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, values, nulls);
        DrainRow *row = &batch->rows[batch->nrows++];
        row->ctid = *(ItemPointer)DatumGetPointer(values[PC_CTID - 1]);
        row->id = DatumGetInt64(values[PC_ID - 1]);
        row->category = DatumGetInt32(values[PC_CATEGORY - 1]);
        row->object_identifier = DatumGetInt64(values[PC_OBJECT - 1]);
        row->scheduled_for = DatumGetTimestampTz(values[PC_SCHEDULED_FOR - 1]);
        row->date_added = DatumGetTimestampTz(values[PC_DATE_ADDED - 1]);
    }
    if (batch->nrows > 0) {
        DrainSegment *segment = &batch->segments[batch->nsegments++];
        segment->shard = *shard;
        segment->partition = partition;
        segment->filenode = partition_filenode(partition);
        segment->action = SegmentAction::Deliver;
        segment->first = 0;
        segment->nrows = batch->nrows;
        segment->back_off_rest = true;
        segment->outcome = SegmentOutcome::Done;
    }
    return batch;
}

} // namespace pgoutbox
