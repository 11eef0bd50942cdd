// One batch of a targeted re-sync job (resync.hpp), run by the worker and
// by outbox.process_resync_batch(job, batch_size): for the job's next rows,
// the outbox rows an UPDATE of each would write, through the backfill's
// reader and capture's writer (backfill_batch.hpp), reading each table as
// its owner.  No version is bumped and the backfill's cursor is not
// touched: the job's own, key resync.<job> in the cursor store, moves when
// the batch commits.
//
// The job, its rows and its cursor are read as the extension's owner.
// Plain C-style code: PostgreSQL errors unwind through it.
#include "resync/resync.hpp"

#include "backfill/backfill_batch.hpp"
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "resync/id_chunks.hpp"
#include "resync/resync_job.hpp"
#include "worker_state/worker_state.hpp"

namespace pgoutbox {

namespace {

// A cursor of version 1 is a new key: the job has not begun.  From its
// first batch on it is [next, 2]: the next position in the job's rows (ids
// and organization jobs), or the next id (range and shard jobs).
constexpr int32 cursor_begun = 2;

// Through a plan kept for the session (pg::spi_run_kept): a batch runs the
// same few statements, and parsing and planning each every time was a
// third of a small batch.
void run_as_owner(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                  Datum *args, const char *nulls, int expected) {
    pg::spi_connected_as(
        pg::extension_owner_role,
        [&] {
            return pg::spi_run_kept(plan, what, sql, nargs, types, args, nulls, false, expected);
        },
        [](uint64) {});
}

// Records a batch: its rows and outbox rows, and the end of the job when
// done, or its failure (error not NULL).  An ended job's rows go.
// restarted: the job started over (its cursor was lost), rows_done with it.
void record_batch(int64 id, const ResyncBatch &batch, const char *error, bool restarted) {
    Oid types[6] = {INT8OID, INT8OID, INT8OID, BOOLOID, TEXTOID, BOOLOID};
    Datum args[6] = {Int64GetDatum(id),
                     Int64GetDatum(batch.written),
                     Int64GetDatum(batch.rows),
                     BoolGetDatum(batch.done),
                     error ? CStringGetTextDatum(error) : (Datum)0,
                     BoolGetDatum(restarted)};
    char nulls[6] = {' ', ' ', ' ', ' ', error ? ' ' : 'n', ' '};
    static SPIPlanPtr update = nullptr, forget = nullptr;
    run_as_owner(&update, "recording the re-sync batch",
                 "UPDATE outbox.resync_jobs j SET outbox_rows = j.outbox_rows + $2,"
                 " rows_done = CASE WHEN $6 THEN 0 ELSE j.rows_done END + $3, throttled = false,"
                 " state = CASE WHEN $5 IS NOT NULL THEN 'failed' WHEN $4 THEN 'done'"
                 " ELSE j.state END, last_error = $5,"
                 " finished_at = CASE WHEN $4 OR $5 IS NOT NULL THEN pg_catalog.now() END"
                 " WHERE j.id = $1",
                 6, types, args, nulls, SPI_OK_UPDATE);
    if (batch.done)
        run_as_owner(&forget, "forgetting the re-sync's rows",
                     "DELETE FROM outbox.resync_rows r WHERE r.job = $1", 1, types, args, nullptr,
                     SPI_OK_DELETE);
}

void record_throttled(int64 id) {
    Oid types[1] = {INT8OID};
    Datum args[1] = {Int64GetDatum(id)};
    static SPIPlanPtr plan = nullptr;
    run_as_owner(&plan, "recording the re-sync's wait",
                 "UPDATE outbox.resync_jobs j SET throttled = true WHERE j.id = $1"
                 " AND NOT j.throttled",
                 1, types, args, nullptr, SPI_OK_UPDATE);
}

// A table a batch writes rows of, locked for the transaction.
struct Table {
    Relation rel;
    const TableMeta *meta;
    CellTargets targets;
    char *name;
};

// Opens relid; false when it is no longer there or no longer registered.
bool open_table(Oid relid, Table *table) {
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    bool registered = resync_table_registered(relid);
    pg::run_as_end(&scope);
    table->rel = registered ? pg::open_user_table(relid, AccessShareLock) : nullptr;
    if (table->rel == nullptr)
        return false;
    table->meta = table_meta_get(table->rel);
    table->targets = CellTargets{0, nullptr, true};
    if (table->meta->silo == Silo::Control) {
        // A control table's rows go to the cells its registration names.
        pg::run_as_extension_owner(&scope);
        Registration reg = load_registration(relid, false);
        pg::run_as_end(&scope);
        table->targets = backfill_targets(table->meta, reg);
    }
    table->name = pg::qualified_name(table->rel);
    pg::refuse_forced_row_security(table->rel);
    return true;
}

bool at_bound(const Table &table, const char *condition, int nargs, Oid *types, Datum *args,
              int32 max_depth) {
    if (max_depth <= 0)
        return false;
    pg::RunAs as_owner;
    pg::run_as_table_owner(&as_owner, table.rel);
    bool deep =
        shard_at_bound(table.rel, table.meta, table.name, condition, nargs, types, args, max_depth);
    pg::run_as_end(&as_owner);
    return deep;
}

int64 write(const Table &table, const char *condition, int nargs, Oid *types, Datum *args) {
    pg::RunAs as_owner;
    pg::run_as_table_owner(&as_owner, table.rel);
    int64 written =
        write_rows(table.rel, table.meta, table.targets, table.name, condition, nargs, types, args);
    pg::run_as_end(&as_owner);
    return written;
}

const char *gone(Oid relid) {
    return psprintf("table with OID %u is no longer registered", relid);
}

// The next batch_size rows by position from `from`: runs of one table's
// ids (pg::ids_condition).  *failure names a table that went, or the
// positions whose rows went.
Cursor position_batch(const ResyncJob &job, int64 from, int32 batch_size, int32 max_depth,
                      ResyncBatch *batch, const char **failure) {
    // The chunks that hold positions [from, from + batch_size): a chunk
    // begins at most id_chunk_ids - 1 positions before the first.
    int64 end = Min(from + (int64)batch_size, job.rows_total);
    Oid types[3] = {INT8OID, INT8OID, INT8OID};
    Datum args[3] = {Int64GetDatum(job.id), Int64GetDatum(from - id_chunk_ids), Int64GetDatum(end)};
    // Sized by the positions left, not batch_size: batch_size + 1
    // overflowed at 2147483647 (the fuzzer).
    int64 positions = Max(end - from, 0) + 1;
    auto *relids = (Oid *)palloc_extended(sizeof(Oid) * positions, MCXT_ALLOC_HUGE);
    auto *ids = (int64 *)palloc_extended(sizeof(int64) * positions, MCXT_ALLOC_HUGE);
    auto *values = (int64 *)palloc(sizeof(int64) * id_chunk_ids);
    int n = 0;
    static SPIPlanPtr plan = nullptr;
    pg::spi_connected_as(
        pg::extension_owner_role,
        [&] {
            return pg::spi_run_kept(
                &plan, "reading the re-sync's rows",
                "SELECT r.first, r.relid::pg_catalog.oid, r.ids FROM outbox.resync_rows r"
                " WHERE r.job OPERATOR(pg_catalog.=) $1 AND r.first OPERATOR(pg_catalog.>) $2"
                " AND r.first OPERATOR(pg_catalog.<) $3 ORDER BY r.first",
                3, types, args, nullptr, true, SPI_OK_SELECT);
        },
        [&](uint64 rows) {
            for (uint64 r = 0; r < rows; r++) {
                bool isnull;
                HeapTuple row = SPI_tuptable->vals[r];
                TupleDesc desc = SPI_tuptable->tupdesc;
                int64 first = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
                Oid relid = DatumGetObjectId(SPI_getbinval(row, desc, 2, &isnull));
                bytea *chunk = DatumGetByteaPP(SPI_getbinval(row, desc, 3, &isnull));
                int count = decode_id_chunk((const uint8 *)VARDATA_ANY(chunk),
                                            VARSIZE_ANY_EXHDR(chunk), values);
                if (count < 0)
                    ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                                    errmsg("re-sync job %lld: the chunk of its rows at %lld is "
                                           "not a chunk of ids",
                                           (long long)job.id, (long long)first)));
                if (first > from + n)
                    break; // positions from + n on are missing
                for (int64 p = Max(first, from); p < Min(first + count, end) && n < batch_size;
                     p++) {
                    relids[n] = relid;
                    ids[n++] = values[p - first];
                }
            }
        });
    // Positions the job has but its rows do not (deleted by hand): the job
    // fails naming them.  Sending what is left would skip rows, and a batch
    // of none would leave the job running for ever, each batch moving by none.
    if (from + n < end) {
        *failure =
            psprintf("the job's rows from position %lld on are missing from outbox.resync_rows",
                     (long long)from + n);
        return Cursor{from, cursor_begun};
    }
    // Runs of one table, all opened and checked against the guard before
    // any is written: a batch is all or nothing.
    int nruns = 0;
    auto *starts = (int *)palloc(sizeof(int) * (n + 1));
    auto *tables = (Table *)palloc(sizeof(Table) * (n + 1));
    auto *reads = (pg::IdsCondition *)palloc(sizeof(pg::IdsCondition) * (n + 1));
    for (int r = 0; r < n; r++)
        if (r == 0 || relids[r] != relids[r - 1])
            starts[nruns++] = r;
    starts[nruns] = n;
    int opened = 0;
    for (; opened < nruns && *failure == nullptr && !batch->throttled; opened++) {
        int k = opened;
        if (!open_table(relids[starts[k]], &tables[k])) {
            *failure = gone(relids[starts[k]]);
            break;
        }
        pg::IdsCondition *read = &reads[k];
        pg::ids_condition("t.id", &ids[starts[k]], starts[k + 1] - starts[k], read);
        batch->throttled = at_bound(tables[k], read->sql, 3, read->types, read->args, max_depth);
    }
    for (int k = 0; k < nruns && *failure == nullptr && !batch->throttled; k++)
        batch->written += write(tables[k], reads[k].sql, 3, reads[k].types, reads[k].args);
    for (int k = 0; k < opened; k++)
        relation_close(tables[k].rel, NoLock);
    if (*failure != nullptr || batch->throttled)
        return Cursor{from, cursor_begun};
    batch->rows = n;
    batch->done = from + n >= job.rows_total;
    return Cursor{from + n, cursor_begun};
}

// The next batch_size rows by id from `from` of a range or shard job.
Cursor span_batch(const ResyncJob &job, int64 from, int32 batch_size, int32 max_depth,
                  ResyncBatch *batch, const char **failure) {
    Table table;
    if (!open_table(job.relid, &table)) {
        *failure = gone(job.relid);
        return Cursor{from, cursor_begun};
    }
    int64 low, up;
    const char *condition = resync_span_condition(table.rel, table.meta, job, &low, &up);
    low = Max(low, from);
    if (low > up) {
        relation_close(table.rel, NoLock);
        batch->done = true;
        return Cursor{low, cursor_begun};
    }
    Oid types[4] = {INT8OID, INT8OID, INT8OID, INT4OID};
    Datum args[4] = {Int64GetDatum(low), Int64GetDatum(up), Int64GetDatum(job.shard_identifier),
                     Int32GetDatum(batch_size)};
    int64 last = 0, count = 0;
    pg::spi_run_as(pg::table_owner_role(table.rel), "planning the re-sync batch",
                   psprintf("SELECT pg_catalog.max(s.id)::pg_catalog.int8, pg_catalog.count(*)"
                            " FROM (SELECT t.id FROM %s t WHERE %s ORDER BY t.id LIMIT $4) s",
                            table.name, condition),
                   4, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       HeapTuple row = SPI_tuptable->vals[0];
                       Datum value = SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull);
                       last = isnull ? 0 : DatumGetInt64(value);
                       count = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
                   });
    args[1] = Int64GetDatum(last);
    batch->throttled = count > 0 && at_bound(table, condition, 3, types, args, max_depth);
    if (count > 0 && !batch->throttled)
        batch->written = write(table, condition, 3, types, args);
    relation_close(table.rel, NoLock);
    if (count == 0)
        batch->done = true;
    if (count == 0 || batch->throttled)
        return Cursor{low, cursor_begun};
    batch->rows = count;
    batch->done = count < batch_size || last >= up; // last + 1 cannot overflow otherwise
    return Cursor{batch->done ? last : last + 1, cursor_begun};
}

} // namespace

bool resync_batch(int64 id, int32 batch_size, int32 max_shard_depth, ResyncBatch *batch) {
    *batch = ResyncBatch{0, 0, false, false};
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    ResyncJob job;
    load_resync_job(id, &job);
    char *key = psprintf("resync.%lld", (long long)id);
    Cursor cursor = job.running ? cursor_read(key) : Cursor{0, 0};
    pg::run_as_end(&scope);
    if (!job.running) {
        SPI_finish();
        return false;
    }
    bool begun = cursor.version == cursor_begun;
    const char *failure = nullptr;
    Cursor next = resync_by_position(job)
                      ? position_batch(job, begun ? Max(cursor.lower_bound, 0) : 0, batch_size,
                                       max_shard_depth, batch, &failure)
                      : span_batch(job, begun ? cursor.lower_bound : PG_INT64_MIN, batch_size,
                                   max_shard_depth, batch, &failure);
    if (failure != nullptr) {
        // Its table or its rows went: the job fails, saying so;
        // resume_resync goes on from here once the table is registered
        // again (rows deleted by hand stay missing: cancel the job).
        record_batch(id, ResyncBatch{0, 0, false, false}, failure, false);
    } else if (batch->throttled) {
        record_throttled(id);
    } else {
        // A job under way whose cursor is new again lost it (Redis
        // restarted without its data): it starts over, sending its rows
        // again rather than skipping any.
        bool restarted = !begun && job.rows_done > 0;
        if (restarted)
            ereport(WARNING, (errmsg("pg_outbox: re-sync job %lld lost its cursor (key %s); it "
                                     "starts over",
                                     (long long)id, key)));
        pg::run_as_extension_owner(&scope);
        // An ended job's cursor goes (at commit, as a move would).
        if (batch->done)
            cursor_forget(key);
        else
            cursor_write(key, next);
        pg::run_as_end(&scope);
        record_batch(id, *batch, nullptr, restarted);
        if (batch->written > 0)
            notify_consumers_at_commit();
    }
    SPI_finish();
    return true;
}

void resync_record_error(int64 job, const char *message) {
    Oid types[2] = {INT8OID, TEXTOID};
    Datum args[2] = {Int64GetDatum(job), CStringGetTextDatum(message)};
    static SPIPlanPtr plan = nullptr;
    run_as_owner(&plan, "recording the re-sync's error",
                 "UPDATE outbox.resync_jobs j SET last_error = $2 WHERE j.id = $1", 2, types, args,
                 nullptr, SPI_OK_UPDATE);
}

int running_resyncs(MemoryContext context, int64 **jobs) {
    int n = 0;
    pg::spi_run_as(pg::extension_owner_role, "listing the re-sync jobs",
                   "SELECT j.id FROM outbox.resync_jobs j WHERE j.state = 'running' ORDER BY j.id",
                   0, nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
                       n = (int)rows;
                       *jobs = (int64 *)MemoryContextAlloc(context, sizeof(int64) * (n + 1));
                       for (int r = 0; r < n; r++) {
                           bool isnull;
                           (*jobs)[r] = DatumGetInt64(SPI_getbinval(
                               SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
                       }
                   });
    return n;
}

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox_process_resync_batch) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job must not be NULL")));
    if (PG_ARGISNULL(1))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("batch_size must not be NULL")));
    int32 batch_size = PG_GETARG_INT32(1);
    if (batch_size <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("batch_size must be positive, not %d", batch_size)));
    ResyncBatch batch;
    if (!resync_batch(PG_GETARG_INT64(0), batch_size, 0, &batch))
        PG_RETURN_NULL();
    PG_RETURN_INT64(batch.written);
}
