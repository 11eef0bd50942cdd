// Leases of claimed shards (leases.hpp).  Plain C-style code: PostgreSQL
// errors unwind through it.
#include "consumers/leases.hpp"

#include "consumers/turns.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

extern "C" {
#include "common/int.h"
#include "datatype/timestamp.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

namespace pgoutbox {

namespace {

// A leased batch by segment: each segment's token, where its first row and
// first message are in the batch's flat arrays (1-based; message_first 0:
// it has no message), and each message's row end within its shard's rows.
struct SegmentLeases {
    int64 *tokens;
    int32 *row_first;
    int32 *message_first;
    int nleased; // segments with a message
    int nrows;
    int32 *ends;
    int32 *categories;
    int64 *objects;
    Datum *added;
};

SegmentLeases segment_leases(const DrainBatch *batch, const LeasedBatch *leased) {
    int nsegments = batch->nsegments, n = leased->nmessages;
    SegmentLeases s = {(int64 *)palloc0(sizeof(int64) * nsegments),
                       (int32 *)palloc(sizeof(int32) * nsegments),
                       (int32 *)palloc0(sizeof(int32) * nsegments),
                       0,
                       0,
                       (int32 *)palloc(sizeof(int32) * n),
                       (int32 *)palloc(sizeof(int32) * n),
                       (int64 *)palloc(sizeof(int64) * n),
                       (Datum *)palloc(sizeof(Datum) * n)};
    for (int m = 0; m < n; m++) {
        const LeasedMessage *message = &leased->messages[m];
        int seg = message->segment;
        if (s.message_first[seg] == 0) {
            s.message_first[seg] = m + 1;
            s.row_first[seg] = s.nrows + 1;
            s.tokens[seg] = pg::random_token();
            s.nleased++;
        }
        s.ends[m] = message->row_end - s.row_first[seg] + 1;
        s.categories[m] = message->category;
        s.objects[m] = message->object_identifier;
        s.added[m] = TimestampTzGetDatum(message->oldest_added);
        s.nrows = message->row_end;
    }
    return s;
}

// Inserts the leases of the segments that have messages (one statement);
// returns the tokens recorded, sorted, and their count in *nrecorded.
int64 *insert_leases(const DrainBatch *batch, const LeasedBatch *leased, const SegmentLeases *s,
                     Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                     const TimestampTz *turn_before, uint64 *nrecorded) {
    int nleased = s->nleased;
    // The segments that have messages, in arrays for unnest, numbered from
    // 1 in order; each row and each message names its segment's number, and
    // the statement groups them (slicing the flat arrays per shard would
    // copy the whole array once per shard).
    auto *silos = (Datum *)palloc(sizeof(Datum) * nleased);
    auto *scopes = (int32 *)palloc(sizeof(int32) * nleased);
    auto *identifiers = (int64 *)palloc(sizeof(int64) * nleased);
    auto *cells = (Datum *)palloc(sizeof(Datum) * nleased);
    auto *leased_tokens = (int64 *)palloc(sizeof(int64) * nleased);
    auto *leased_turns = (Datum *)palloc(sizeof(Datum) * nleased);
    auto *number = (int32 *)palloc0(sizeof(int32) * batch->nsegments);
    int k = 0;
    for (int seg = 0; seg < batch->nsegments; seg++) {
        if (s->message_first[seg] == 0)
            continue;
        const ShardKey *shard = &batch->segments[seg].shard;
        silos[k] = CStringGetTextDatum(silo_text(shard->silo));
        scopes[k] = shard->shard_scope;
        identifiers[k] = shard->shard_identifier;
        cells[k] = CStringGetTextDatum(shard->cell_name ? shard->cell_name : "");
        leased_tokens[k] = s->tokens[seg];
        leased_turns[k] = TimestampTzGetDatum(turn_before[seg]);
        number[seg] = ++k;
    }
    auto *row_shard = (int32 *)palloc(sizeof(int32) * Max(s->nrows, 1));
    auto *message_shard = (int32 *)palloc(sizeof(int32) * leased->nmessages);
    for (int m = 0, r = 0; m < leased->nmessages; m++) {
        message_shard[m] = number[leased->messages[m].segment];
        for (; r < leased->messages[m].row_end; r++)
            row_shard[r] = message_shard[m];
    }
    Oid types[17] = {INT8ARRAYOID,       TEXTARRAYOID,   INT4ARRAYOID, INT8ARRAYOID,
                     TEXTARRAYOID,       INT4ARRAYOID,   INT4ARRAYOID, OIDOID,
                     TIMESTAMPTZOID,     TIMESTAMPTZOID, TIDARRAYOID,  INT8ARRAYOID,
                     INT4ARRAYOID,       INT4ARRAYOID,   INT8ARRAYOID, TIMESTAMPTZARRAYOID,
                     TIMESTAMPTZARRAYOID};
    Datum args[17] = {
        pg::int8_array(leased_tokens, nleased),
        PointerGetDatum(construct_array(silos, nleased, TEXTOID, -1, false, TYPALIGN_INT)),
        pg::int4_array(scopes, nleased),
        pg::int8_array(identifiers, nleased),
        PointerGetDatum(construct_array(cells, nleased, TEXTOID, -1, false, TYPALIGN_INT)),
        pg::int4_array(row_shard, s->nrows),
        pg::int4_array(message_shard, leased->nmessages),
        ObjectIdGetDatum(role),
        TimestampTzGetDatum(claimed_at),
        TimestampTzGetDatum(lease_until),
        pg::tid_array(leased->ctids, s->nrows),
        pg::int8_array(leased->ids, s->nrows),
        pg::int4_array(s->ends, leased->nmessages),
        pg::int4_array(s->categories, leased->nmessages),
        pg::int8_array(s->objects, leased->nmessages),
        PointerGetDatum(construct_array(s->added, leased->nmessages, TIMESTAMPTZOID, 8,
                                        FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
        PointerGetDatum(construct_array(leased_turns, nleased, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL,
                                        TYPALIGN_DOUBLE))};
    // A shard whose claim ended (its lease passed, or it was released) is
    // claimed again by replacing its row: by another role at once, by the
    // same role once the others had their turn (turn_before, $17; under the
    // shard's lock, taken by lease_batch, that row cannot change
    // meanwhile).  The OR keeps the check a probe of the key, made only for
    // the shards that may have a turn, not an anti-join over the table.
    const char *sql =
        "INSERT INTO outbox.consumer_claims AS l (claim, silo, shard_scope, shard_identifier,"
        " cell_name, consumer, claimed_at, lease_until, categories, rows_ctid, rows_id,"
        " message_ends, message_category, message_object, message_added)"
        " SELECT s.claim, s.silo, s.scope, s.identifier, s.cell, $8, $9, $10, m.categories,"
        " r.ctids, r.ids, m.ends, m.message_categories, m.objects, m.added"
        " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
        " pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($17)) WITH ORDINALITY"
        " AS s (claim, silo, scope, identifier, cell, turn_before, k)"
        " JOIN (SELECT r.k, pg_catalog.array_agg(r.ctid ORDER BY r.n) AS ctids,"
        " pg_catalog.array_agg(r.id ORDER BY r.n) AS ids"
        " FROM ROWS FROM (pg_catalog.unnest($6), pg_catalog.unnest($11),"
        " pg_catalog.unnest($12)) WITH ORDINALITY AS r (k, ctid, id, n) GROUP BY r.k) r"
        " ON r.k = s.k"
        " JOIN (SELECT m.k, pg_catalog.array_agg(m.e ORDER BY m.n) AS ends,"
        " pg_catalog.array_agg(m.c ORDER BY m.n) AS message_categories,"
        " pg_catalog.array_agg(m.o ORDER BY m.n) AS objects,"
        " pg_catalog.array_agg(m.a ORDER BY m.n) AS added,"
        " pg_catalog.array_agg(DISTINCT m.c) AS categories"
        " FROM ROWS FROM (pg_catalog.unnest($7), pg_catalog.unnest($13), pg_catalog.unnest($14),"
        " pg_catalog.unnest($15), pg_catalog.unnest($16)) WITH ORDINALITY"
        " AS m (k, e, c, o, a, n) GROUP BY m.k) m ON m.k = s.k"
        " WHERE s.turn_before = 'infinity' OR NOT EXISTS (SELECT FROM outbox.consumer_claims t"
        " WHERE t.silo = s.silo"
        " AND t.shard_scope = s.scope AND t.shard_identifier = s.identifier"
        " AND t.cell_name = s.cell AND t.consumer = $8 AND t.lease_until >= s.turn_before)"
        " ON CONFLICT (silo, shard_scope, shard_identifier, cell_name) DO UPDATE SET"
        " claim = excluded.claim, consumer = excluded.consumer,"
        " claimed_at = excluded.claimed_at, lease_until = excluded.lease_until,"
        " categories = excluded.categories, rows_ctid = excluded.rows_ctid,"
        " rows_id = excluded.rows_id, message_ends = excluded.message_ends,"
        " message_category = excluded.message_category,"
        " message_object = excluded.message_object, message_added = excluded.message_added,"
        " released = false WHERE l.lease_until <= pg_catalog.clock_timestamp()"
        " RETURNING l.claim";
    MemoryContext caller = CurrentMemoryContext;
    static SPIPlanPtr plan = nullptr;
    uint64 recorded = pg::spi_run_kept(&plan, "recording claims", sql, 17, types, args, nullptr,
                                       false, SPI_OK_INSERT_RETURNING);
    MemoryContextSwitchTo(caller);
    auto *taken = (int64 *)palloc(sizeof(int64) * Max(recorded, 1));
    for (uint64 r = 0; r < recorded; r++) {
        bool isnull;
        taken[r] =
            DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
    }
    qsort(taken, recorded, sizeof(int64), pg::compare_int64);
    *nrecorded = recorded;
    return taken;
}

bool recorded(const int64 *token, const int64 *taken, uint64 ntaken) {
    return bsearch(token, taken, ntaken, sizeof(int64), pg::compare_int64) != nullptr;
}

// Writes the messages of the recorded leases to the result; returns how
// many.
int write_messages(const DrainBatch *batch, const LeasedBatch *leased, const SegmentLeases *s,
                   const int64 *taken, uint64 ntaken, const Categories *categories,
                   TimestampTz lease_until, Tuplestorestate *result, TupleDesc result_desc) {
    int written = 0;
    for (int m = 0; m < leased->nmessages; m++) {
        const LeasedMessage *message = &leased->messages[m];
        int seg = message->segment;
        if (!recorded(&s->tokens[seg], taken, ntaken))
            continue;
        const ShardKey *shard = &batch->segments[seg].shard;
        int first_row = m + 1 == s->message_first[seg] ? s->row_first[seg] - 1
                                                       : leased->messages[m - 1].row_end;
        Datum values[13];
        bool nulls[13] = {false};
        values[0] = Int64GetDatum(s->tokens[seg]);
        values[1] = Int32GetDatum(m + 2 - s->message_first[seg]);
        values[2] = CStringGetTextDatum(silo_text(shard->silo));
        values[3] = Int32GetDatum(shard->shard_scope);
        values[4] = Int64GetDatum(shard->shard_identifier);
        values[5] = shard->cell_name ? CStringGetTextDatum(shard->cell_name) : (Datum)0;
        nulls[5] = shard->cell_name == nullptr;
        values[6] = CStringGetTextDatum(
            name_of(message->category, categories->n, categories->ids, categories->names));
        values[7] = Int64GetDatum(message->object_identifier);
        values[8] = message->payload;
        nulls[8] = message->payload == (Datum)0;
        values[9] = Int64GetDatum(message->first_id);
        values[10] = Int64GetDatum(message->last_id);
        values[11] = Int32GetDatum(message->row_end - first_row);
        values[12] = TimestampTzGetDatum(lease_until);
        tuplestore_putvalues(result, result_desc, values, nulls);
        written++;
    }
    return written;
}

} // namespace

int record_leases(const DrainBatch *batch, const LeasedBatch *leased, const Categories *categories,
                  Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                  const TimestampTz *turn_before, Tuplestorestate *result, TupleDesc result_desc) {
    if (leased->nmessages == 0)
        return 0;
    SegmentLeases s = segment_leases(batch, leased);
    uint64 ntaken;
    int64 *taken =
        insert_leases(batch, leased, &s, role, claimed_at, lease_until, turn_before, &ntaken);
    CommandCounterIncrement();
    for (int seg = 0; seg < batch->nsegments; seg++)
        if (s.message_first[seg] != 0 && recorded(&s.tokens[seg], taken, ntaken))
            turns_claimed(&batch->segments[seg].shard, role, lease_until);
    return write_messages(batch, leased, &s, taken, ntaken, categories, lease_until, result,
                          result_desc);
}

int64 lease_usecs_argument(FunctionCallInfo fcinfo, int n) {
    if (PG_ARGISNULL(n))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("lease must not be NULL")));
    Interval *lease = PG_GETARG_INTERVAL_P(n);
    int64 usecs = 0;
    bool valid = lease->month == 0 && lease->day >= 0 && lease->day <= 1 &&
                 !pg_add_s64_overflow(lease->time, (int64)lease->day * USECS_PER_DAY, &usecs) &&
                 usecs > 0 && usecs <= USECS_PER_DAY;
    if (!valid)
        ereport(
            ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("lease must be more than 0 and at most 1 day, not %s",
                    DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(lease))))));
    // A claimed shard holds every category's messages in it (per-shard
    // order spans categories): a consumer of one category may not hold the
    // others' for longer than the operator allows.
    if (usecs > (int64)max_lease_s * USECS_PER_SEC)
        ereport(
            ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("lease must be at most outbox.max_lease (%d s), not %s", max_lease_s,
                    DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(lease)))),
             errhint("Claim again before the lease ends, or ask the operator to raise "
                     "outbox.max_lease.")));
    return usecs;
}

} // namespace pgoutbox
