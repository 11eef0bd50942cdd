// outbox.process_resync_batch(job, batch_size): one batch of a targeted
// re-sync job (extension/functions/52_resync.sql, docs/design.md): for the
// job's next ids, or the next rows of its range, the outbox rows an UPDATE
// of each row would write, through the backfill's reader and capture's
// writer (backfill_batch.hpp), reading as the table's owner.  No version
// is bumped and the backfill's cursor is not touched: the job's own, key
// resync.<job> in the cursor store, moves when the batch commits.
//
// The job and its cursor are read as the extension's owner.  Plain
// C-style code: PostgreSQL errors unwind through it.
#include "backfill/backfill_batch.hpp"
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "utils/array.h"
}

namespace pgoutbox {

namespace {

// A cursor of version 1 is a new key: the job has not begun.  From its
// first batch on it is [next, 2]: the next position in the job's ids, or
// the next id of its range.
constexpr int32 cursor_begun = 2;

struct ResyncJob {
    Oid relid;
    int64 *ids; // NULL: a range job
    int nids;
    int64 low, up;
    bool running;
    bool registered;
};

// The job's row, locked; false when there is none.  Inside SPI, as the
// extension's owner.
bool load_job(int64 id, ResyncJob *job) {
    Oid types[1] = {INT8OID};
    Datum args[1] = {Int64GetDatum(id)};
    uint64 n =
        pg::spi_run("reading the re-sync job",
                    "SELECT j.relid, j.ids, j.low, j.up, j.state OPERATOR(pg_catalog.=) 'running',"
                    " EXISTS (SELECT FROM outbox.registered_tables r WHERE r.relid = j.relid)"
                    " FROM outbox.resync_jobs j WHERE j.id = $1 FOR UPDATE",
                    1, types, args, nullptr, false, 1, SPI_OK_SELECT);
    if (n == 0)
        return false;
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    bool isnull;
    job->relid = DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull));
    Datum ids = SPI_getbinval(row, desc, 2, &isnull);
    job->ids = nullptr;
    job->nids = 0;
    if (!isnull) {
        Datum *items;
        deconstruct_array(DatumGetArrayTypeP(ids), INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
                          &items, nullptr, &job->nids);
        job->ids = (int64 *)palloc(sizeof(int64) * Max(job->nids, 1));
        for (int i = 0; i < job->nids; i++)
            job->ids[i] = DatumGetInt64(items[i]);
    } else {
        job->low = DatumGetInt64(SPI_getbinval(row, desc, 3, &isnull));
        job->up = DatumGetInt64(SPI_getbinval(row, desc, 4, &isnull));
    }
    job->running = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull));
    job->registered = DatumGetBool(SPI_getbinval(row, desc, 6, &isnull));
    return true;
}

// Records a batch: its outbox rows, and the end of the job when done, or
// its failure (error not NULL).  As the extension's owner.
void record_batch(int64 id, int64 written, bool done, const char *error) {
    Oid types[4] = {INT8OID, INT8OID, BOOLOID, TEXTOID};
    Datum args[4] = {Int64GetDatum(id), Int64GetDatum(written), BoolGetDatum(done),
                     error ? CStringGetTextDatum(error) : (Datum)0};
    char nulls[4] = {' ', ' ', ' ', error ? ' ' : 'n'};
    pg::spi_run("recording the re-sync batch",
                "UPDATE outbox.resync_jobs j SET outbox_rows = j.outbox_rows + $2,"
                " state = CASE WHEN $4 IS NOT NULL THEN 'failed' WHEN $3 THEN 'done'"
                " ELSE j.state END, last_error = $4,"
                " finished_at = CASE WHEN $3 OR $4 IS NOT NULL THEN pg_catalog.now() END"
                " WHERE j.id = $1",
                4, types, args, nulls, false, 0, SPI_OK_UPDATE);
}

// Writes the job's next batch as the table's owner; the cursor that
// follows in *next and whether the job is done.  Inside SPI.
int64 write_batch(Relation rel, const ResyncJob *job, const Cursor &cursor, int32 batch_size,
                  Cursor *next, bool *done) {
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Registration reg = load_registration(job->relid, false);
    pg::run_as_end(&scope);
    const TableMeta *meta = table_meta_get(rel);
    CellTargets targets =
        meta->silo == Silo::Control ? backfill_targets(meta, reg) : CellTargets{0, nullptr, true};
    char *table = pg::qualified_name(rel);
    bool begun = cursor.version == cursor_begun;
    int64 written = 0;
    pg::refuse_forced_row_security(rel);
    pg::RunAs as_owner;
    pg::run_as_table_owner(&as_owner, rel);
    if (job->ids != nullptr) {
        int64 from = begun ? Max(cursor.lower_bound, 0) : 0;
        int64 to = Min(from + (int64)batch_size, (int64)job->nids);
        if (from < to) {
            Oid types[1] = {INT8ARRAYOID};
            Datum args[1] = {pg::int8_array(&job->ids[from], (int)(to - from))};
            written = write_rows(rel, meta, targets, table, "t.id OPERATOR(pg_catalog.=) ANY ($1)",
                                 1, types, args);
        }
        *next = Cursor{Max(to, from), cursor_begun};
        *done = to >= job->nids;
    } else {
        int64 low = begun ? Max(cursor.lower_bound, job->low) : job->low;
        int64 up;
        if (low > job->up || !upper_id(table, low, batch_size, &up)) {
            *done = true;
            *next = Cursor{low, cursor_begun};
        } else {
            up = Min(up, job->up);
            Oid types[2] = {INT8OID, INT8OID};
            Datum args[2] = {Int64GetDatum(low), Int64GetDatum(up)};
            written = write_rows(rel, meta, targets, table, id_range_condition, 2, types, args);
            *done = up >= job->up; // up + 1 cannot overflow then
            *next = Cursor{*done ? up : up + 1, cursor_begun};
        }
    }
    pg::run_as_end(&as_owner);
    return written;
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox_process_resync_batch) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job must not be NULL")));
    if (PG_ARGISNULL(1))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("batch_size must not be NULL")));
    int64 id = PG_GETARG_INT64(0);
    int32 batch_size = PG_GETARG_INT32(1);
    if (batch_size <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("batch_size must be positive, not %d", batch_size)));

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    ResyncJob job;
    if (!load_job(id, &job))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("re-sync job %lld does not exist", (long long)id)));
    if (!job.running) {
        pg::run_as_end(&scope);
        SPI_finish();
        PG_RETURN_NULL();
    }
    char *key = psprintf("resync.%lld", (long long)id);
    Relation rel = job.registered ? pg::open_user_table(job.relid, AccessShareLock) : nullptr;
    if (rel == nullptr) {
        // Dropped or unregistered since: the job ends, saying so.
        record_batch(id, 0, false,
                     psprintf("table with OID %u is no longer registered", job.relid));
        pg::run_as_end(&scope);
        SPI_finish();
        PG_RETURN_INT64(0);
    }
    Cursor cursor = cursor_read(key);
    pg::run_as_end(&scope);

    Cursor next;
    bool done;
    int64 written = write_batch(rel, &job, cursor, batch_size, &next, &done);

    pg::run_as_extension_owner(&scope);
    cursor_write(key, next);
    record_batch(id, written, done, nullptr);
    pg::run_as_end(&scope);
    if (written > 0)
        notify_consumers_at_commit();
    SPI_finish();
    relation_close(rel, NoLock);
    PG_RETURN_INT64(written);
}
