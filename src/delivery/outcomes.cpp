// The outcomes half of the delivery core (delivery.hpp, step 5): what was
// delivered is deleted, a failure backs its shard off (Sentry's backoff) and
// is recorded, and at max_attempts its message goes to the dead letters and
// the shard is due again.  Written without C++ objects that own resources
// around PostgreSQL calls: errors unwind through it freely.
#include "delivery/delivery.hpp"

#include "delivery/tombstones.hpp"
#include "pg/run_as.hpp"
#include "pg/spi.hpp"
#include "stats/stats.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "utils/array.h"
}

namespace pgoutbox {

namespace {

// Sentry's backoff: each row waits twice as long as it last did, between
// 1 s and 1 h.  By ctid, in the partition that holds the shard.
const char *back_off_set =
    "scheduled_from = pg_catalog.now(), scheduled_for = pg_catalog.now() +"
    " LEAST(2 * GREATEST(scheduled_for - scheduled_from, interval '1 second'), interval '1 hour')";

// The worker reads the shard's partition again once this commits, and so
// learns when its backoff ends, or that it is due now (partition_watch.hpp):
// no capture commit would tell it, and the failure may be another
// session's (outbox.drain(), a consumer's fail()).
void read_again_at_commit(const ShardKey *shard) {
    const Registry *registry = registry_get();
    const OutboxTable *table =
        shard->silo == Silo::Cell ? &registry->cell_outbox : &registry->control_outbox;
    int remainder = outbox_remainder(table, shard->shard_identifier);
    drain_at_commit(shard->silo == Silo::Cell ? 0 : 1, uint64(1) << (remainder % 64));
}

} // namespace

void back_off_rows(Oid partition, const ItemPointerData *tids, int n) {
    if (n == 0)
        return;
    Oid types[1] = {TIDARRAYOID};
    Datum args[1] = {pg::tid_array(tids, n)};
    pg::spi_run_here("backing off a shard",
                     psprintf("UPDATE %s SET %s WHERE ctid = ANY ($1)",
                              pg::qualified_name(partition), back_off_set),
                     1, types, args, false, SPI_OK_UPDATE);
}

namespace {

// The shard's rows after the last one drain_shard() saw.
void back_off_rest(const DrainSegment *segment, int64 after_id) {
    const ShardKey *shard = &segment->shard;
    Oid types[4] = {INT4OID, INT8OID, INT8OID, TEXTOID};
    Datum args[4] = {Int32GetDatum(shard->shard_scope), Int64GetDatum(shard->shard_identifier),
                     Int64GetDatum(after_id),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    pg::spi_run_here(
        "backing off a shard",
        psprintf("UPDATE %s SET %s WHERE shard_scope = $1 AND shard_identifier = $2 AND id > $3%s",
                 pg::qualified_name(segment->partition), back_off_set,
                 shard->cell_name ? " AND cell_name = $4" : ""),
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
    pg::spi_run_here(
        "recording a shard's error",
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
    pg::spi_run_here(
        "moving a message to the dead letters",
        psprintf("WITH moved AS (DELETE FROM %s o WHERE o.%s = ANY ($1) RETURNING o.*)"
                 " INSERT INTO outbox.dead_letters (silo, shard_scope, shard_identifier,"
                 " cell_name, category, object_identifier, payload, outbox_id, date_added,"
                 " attempts, last_error)"
                 " SELECT $2, m.shard_scope, m.shard_identifier, %s, m.category,"
                 " m.object_identifier, m.payload, m.id, m.date_added, $3, $4"
                 " FROM moved m ORDER BY m.id",
                 pg::qualified_name(segment->partition), which,
                 segment->shard.silo == Silo::Control ? "m.cell_name" : "NULL"),
        4, types, args, false, SPI_OK_INSERT);
}

// The shard's rows that wait for a backoff are due now: a shard whose
// failing message went to the dead letters goes on with the next.
void make_due(const DrainSegment *segment) {
    const ShardKey *shard = &segment->shard;
    Oid types[3] = {INT4OID, INT8OID, TEXTOID};
    Datum args[3] = {Int32GetDatum(shard->shard_scope), Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    pg::spi_run_here("making a shard due",
                     psprintf("UPDATE %s SET scheduled_from = pg_catalog.now(),"
                              " scheduled_for = pg_catalog.now() WHERE shard_scope = $1"
                              " AND shard_identifier = $2 AND scheduled_for > pg_catalog.now()%s",
                              quote_qualified_identifier(
                                  get_namespace_name(get_rel_namespace(segment->partition)),
                                  get_rel_name(segment->partition)),
                              shard->cell_name ? " AND cell_name = $3" : ""),
                     shard->cell_name ? 3 : 2, types, args, false, SPI_OK_UPDATE);
}

void clear_error(const ShardKey *shard) {
    Oid types[4] = {TEXTOID, INT4OID, INT8OID, TEXTOID};
    Datum args[4] = {CStringGetTextDatum(silo_text(shard->silo)), Int32GetDatum(shard->shard_scope),
                     Int64GetDatum(shard->shard_identifier),
                     CStringGetTextDatum(shard->cell_name ? shard->cell_name : "")};
    pg::spi_run_here("clearing a shard's error",
                     "DELETE FROM outbox.shard_errors WHERE silo = $1 AND shard_scope = $2"
                     " AND shard_identifier = $3 AND cell_name = $4",
                     4, types, args, false, SPI_OK_DELETE);
}

} // namespace

void settle_batch(DrainBatch *batch, const RowNow *now_rows, const Message *messages, int nmessages,
                  const bool *delivered, const int *failed_at, char *const *errors,
                  DrainStats *stats) {
    tombstones_of_messages(batch, messages, nmessages, delivered);

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
            read_again_at_commit(&segment->shard);
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
    read_again_at_commit(&segment.shard);
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
