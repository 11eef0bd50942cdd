// Leases of claimed shards (leases.hpp).  Plain C-style code: PostgreSQL
// errors unwind through it.
#include "consumers/leases.hpp"

#include "consumers/handed_out.hpp"
#include "consumers/turns.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

extern "C" {
#include "common/int.h"
#include "datatype/timestamp.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
}

namespace pgoutbox {

namespace {

// A leased batch by segment: each segment's token and where its rows and
// messages are in the batch's arrays (1-based; message_first 0: it has no
// message).  A segment's messages are contiguous, and so are their rows:
// coalescing goes shard by shard (delivery/claims.cpp) and lease_batch lays
// the rows out message by message.
struct SegmentLeases {
    int64 *tokens;
    int32 *row_first;
    int32 *message_first;
    int32 *message_count;
    int nleased; // segments with a message
};

SegmentLeases segment_leases(const DrainBatch *batch, const LeasedBatch *leased) {
    int nsegments = batch->nsegments;
    SegmentLeases s = {(int64 *)palloc0(sizeof(int64) * nsegments),
                       (int32 *)palloc(sizeof(int32) * nsegments),
                       (int32 *)palloc0(sizeof(int32) * nsegments),
                       (int32 *)palloc0(sizeof(int32) * nsegments), 0};
    for (int m = 0; m < leased->nmessages; m++) {
        int seg = leased->messages[m].segment;
        if (s.message_first[seg] == 0) {
            s.message_first[seg] = m + 1;
            s.row_first[seg] = m == 0 ? 1 : leased->messages[m - 1].row_end + 1;
            s.tokens[seg] = pg::random_token();
            s.nleased++;
        } else if (leased->messages[m - 1].segment != seg) {
            elog(ERROR, "pg_outbox: a claim's messages are not grouped by shard");
        }
        s.message_count[seg]++;
    }
    return s;
}

// One segment's lease as a row of outbox.consumer_claims (desc): its rows
// and messages in message order, encoded (handed_out.hpp).
Datum lease_row(TupleDesc desc, const DrainBatch *batch, const LeasedBatch *leased,
                const SegmentLeases *s, int seg, Oid role, TimestampTz claimed_at,
                TimestampTz lease_until) {
    int first = s->message_first[seg] - 1, nmessages = s->message_count[seg];
    int first_row = s->row_first[seg] - 1;
    int nrows = leased->messages[first + nmessages - 1].row_end - first_row;
    auto *rows = (HandedOutRow *)palloc(sizeof(HandedOutRow) * nrows);
    for (int r = 0; r < nrows; r++) {
        const ItemPointerData *ctid = &leased->ctids[first_row + r];
        rows[r] = HandedOutRow{ItemPointerGetBlockNumberNoCheck(ctid),
                               ItemPointerGetOffsetNumberNoCheck(ctid), leased->ids[first_row + r]};
    }
    auto *messages = (HandedOutMessage *)palloc(sizeof(HandedOutMessage) * nmessages);
    // The distinct categories, in order: a few.
    auto *categories = (int32 *)palloc(sizeof(int32) * nmessages);
    int ncategories = 0, end = first_row;
    for (int k = 0; k < nmessages; k++) {
        const LeasedMessage *message = &leased->messages[first + k];
        messages[k] = HandedOutMessage{message->row_end - end, message->category,
                                       message->object_identifier, message->oldest_added};
        end = message->row_end;
        int c = 0;
        while (c < ncategories && categories[c] < message->category)
            c++;
        if (c == ncategories || categories[c] != message->category) {
            memmove(&categories[c + 1], &categories[c], sizeof(int32) * (ncategories - c));
            categories[c] = message->category;
            ncategories++;
        }
    }
    auto *handed_out = (bytea *)palloc(VARHDRSZ + handed_out_max_bytes(nrows, nmessages));
    SET_VARSIZE(handed_out, VARHDRSZ + encode_handed_out(rows, nrows, messages, nmessages,
                                                         (uint8_t *)VARDATA(handed_out)));
    const ShardKey *shard = &batch->segments[seg].shard;
    Datum values[11] = {Int64GetDatum(s->tokens[seg]),
                        CStringGetTextDatum(silo_text(shard->silo)),
                        Int32GetDatum(shard->shard_scope),
                        Int64GetDatum(shard->shard_identifier),
                        CStringGetTextDatum(shard->cell_name ? shard->cell_name : ""),
                        ObjectIdGetDatum(role),
                        TimestampTzGetDatum(claimed_at),
                        TimestampTzGetDatum(lease_until),
                        pg::int4_array(categories, ncategories),
                        PointerGetDatum(handed_out),
                        BoolGetDatum(false)};
    bool nulls[11] = {false};
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

// Inserts the leases of the segments that have messages (one statement);
// returns the tokens recorded, sorted, and their count in *nrecorded.
int64 *insert_leases(const DrainBatch *batch, const LeasedBatch *leased, const SegmentLeases *s,
                     Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                     const TimestampTz *turn_before, uint64 *nrecorded) {
    // The leases are built here as rows of the table, each with its own
    // arrays: grouping flat arrays by shard in the statement (unnest,
    // array_agg ORDER BY) sorted every row and message of the claim, and
    // was most of what a claim cost (bench/consumer, workload B).
    Oid row_type =
        GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum("consumer_claims"),
                        ObjectIdGetDatum(get_namespace_oid("outbox", false)));
    TupleDesc desc = lookup_rowtype_tupdesc(row_type, -1);
    if (desc->natts != 11)
        elog(ERROR, "pg_outbox: outbox.consumer_claims has %d columns, not 11", desc->natts);
    auto *rows = (Datum *)palloc(sizeof(Datum) * s->nleased);
    auto *turns = (Datum *)palloc(sizeof(Datum) * s->nleased);
    int k = 0;
    for (int seg = 0; seg < batch->nsegments; seg++) {
        if (s->message_first[seg] == 0)
            continue;
        rows[k] = lease_row(desc, batch, leased, s, seg, role, claimed_at, lease_until);
        turns[k++] = TimestampTzGetDatum(turn_before[seg]);
    }
    ReleaseTupleDesc(desc);
    Oid types[2] = {get_array_type(row_type), TIMESTAMPTZARRAYOID};
    Datum args[2] = {
        PointerGetDatum(construct_array(rows, k, row_type, -1, false, TYPALIGN_DOUBLE)),
        PointerGetDatum(
            construct_array(turns, k, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};
    // A shard whose claim ended (its lease passed, or it was released) is
    // claimed again by replacing its row: by another role at once, by the
    // same role once the others had their turn (turn_before, $2; under the
    // shard's lock, taken by lease_batch, that row cannot change
    // meanwhile).  The OR keeps the check a probe of the key, made only for
    // the shards that may have a turn, not an anti-join over the table.
    const char *sql =
        "INSERT INTO outbox.consumer_claims AS l (claim, silo, shard_scope, shard_identifier,"
        " cell_name, consumer, claimed_at, lease_until, categories, handed_out)"
        " SELECT c.claim, c.silo, c.shard_scope, c.shard_identifier, c.cell_name, c.consumer,"
        " c.claimed_at, c.lease_until, c.categories, c.handed_out"
        " FROM pg_catalog.unnest($1) WITH ORDINALITY AS c"
        " JOIN pg_catalog.unnest($2) WITH ORDINALITY AS t (turn_before, k)"
        " ON t.k = c.ordinality"
        " WHERE t.turn_before = 'infinity' OR NOT EXISTS (SELECT FROM outbox.consumer_claims o"
        " WHERE o.silo = c.silo AND o.shard_scope = c.shard_scope"
        " AND o.shard_identifier = c.shard_identifier AND o.cell_name = c.cell_name"
        " AND o.consumer = c.consumer AND o.lease_until >= t.turn_before)"
        " ON CONFLICT (silo, shard_scope, shard_identifier, cell_name) DO UPDATE SET"
        " claim = excluded.claim, consumer = excluded.consumer,"
        " claimed_at = excluded.claimed_at, lease_until = excluded.lease_until,"
        " categories = excluded.categories, handed_out = excluded.handed_out,"
        " released = false WHERE l.lease_until <= pg_catalog.clock_timestamp()"
        " RETURNING l.claim";
    MemoryContext caller = CurrentMemoryContext;
    // Prepared for the table's row type: one made again (the extension
    // dropped and created in this session) needs a plan of its own.
    static SPIPlanPtr plan = nullptr;
    static Oid plan_row_type = InvalidOid;
    if (plan != nullptr && plan_row_type != row_type) {
        SPI_freeplan(plan);
        plan = nullptr;
    }
    plan_row_type = row_type;
    uint64 recorded = pg::spi_run_kept(&plan, "recording claims", sql, 2, types, args, nullptr,
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

void append_int(StringInfo json, int64 value) {
    char digits[MAXINT8LEN + 1];
    appendBinaryStringInfo(json, digits, pg_lltoa(value, digits));
}

// One message as a JSON array of outbox.claimed_message's columns, in its
// order (outbox.claim_json): the numbers and the payload of values, the
// silo and cell of shard; quoted: the call's categories (by index in
// categories) and its lease end, the same for every message.
void append_json_message(StringInfo json, const Datum *values, const bool *nulls,
                         const ShardKey *shard, const char *const *quoted_categories, int category,
                         const char *quoted_lease) {
    if (json->data[json->len - 1] != '[')
        appendStringInfoChar(json, ',');
    appendStringInfoChar(json, '[');
    append_int(json, DatumGetInt64(values[0]));
    appendStringInfoChar(json, ',');
    append_int(json, DatumGetInt32(values[1]));
    appendStringInfoChar(json, ',');
    escape_json(json, silo_text(shard->silo));
    appendStringInfoChar(json, ',');
    append_int(json, DatumGetInt32(values[3]));
    appendStringInfoChar(json, ',');
    append_int(json, DatumGetInt64(values[4]));
    appendStringInfoChar(json, ',');
    if (shard->cell_name == nullptr)
        appendStringInfoString(json, "null");
    else
        escape_json(json, shard->cell_name);
    appendStringInfoChar(json, ',');
    appendStringInfoString(json, quoted_categories[category]);
    appendStringInfoChar(json, ',');
    append_int(json, DatumGetInt64(values[7]));
    appendStringInfoChar(json, ',');
    if (nulls[8]) {
        appendStringInfoString(json, "null");
    } else {
        Jsonb *payload = DatumGetJsonbP(values[8]);
        (void)JsonbToCString(json, &payload->root, VARSIZE(payload));
    }
    for (int c = 9; c <= 10; c++) {
        appendStringInfoChar(json, ',');
        append_int(json, DatumGetInt64(values[c]));
    }
    appendStringInfoChar(json, ',');
    append_int(json, DatumGetInt32(values[11]));
    appendStringInfoChar(json, ',');
    appendStringInfoString(json, quoted_lease);
    appendStringInfoChar(json, ']');
}

// Writes the messages of the recorded leases to out; returns how many.
int write_messages(const DrainBatch *batch, const LeasedBatch *leased, const SegmentLeases *s,
                   const int64 *taken, uint64 ntaken, const Categories *categories,
                   TimestampTz lease_until, const ClaimOutput *out) {
    char **quoted_categories = nullptr;
    const char *quoted_lease = nullptr;
    if (out->json != nullptr) {
        quoted_categories = (char **)palloc(sizeof(char *) * Max(categories->n, 1));
        for (int c = 0; c < categories->n; c++) {
            StringInfoData quoted;
            initStringInfo(&quoted);
            escape_json(&quoted, categories->names[c]);
            quoted_categories[c] = quoted.data;
        }
        char iso[MAXDATELEN + 1];
        StringInfoData quoted;
        initStringInfo(&quoted);
        escape_json(&quoted, JsonEncodeDateTime(iso, TimestampTzGetDatum(lease_until),
                                                TIMESTAMPTZOID, nullptr));
        quoted_lease = quoted.data;
    }
    int written = 0;
    for (int m = 0; m < leased->nmessages; m++) {
        const LeasedMessage *message = &leased->messages[m];
        int seg = message->segment;
        if (!recorded(&s->tokens[seg], taken, ntaken))
            continue;
        const ShardKey *shard = &batch->segments[seg].shard;
        int first_row = m + 1 == s->message_first[seg] ? s->row_first[seg] - 1
                                                       : leased->messages[m - 1].row_end;
        int category = 0;
        while (category < categories->n && categories->ids[category] != message->category)
            category++;
        if (category == categories->n)
            elog(ERROR, "pg_outbox: a claimed message's category %d is not the call's",
                 message->category);
        Datum values[13];
        bool nulls[13] = {false};
        values[0] = Int64GetDatum(s->tokens[seg]);
        values[1] = Int32GetDatum(m + 2 - s->message_first[seg]);
        values[3] = Int32GetDatum(shard->shard_scope);
        values[4] = Int64GetDatum(shard->shard_identifier);
        nulls[5] = shard->cell_name == nullptr;
        values[7] = Int64GetDatum(message->object_identifier);
        values[8] = message->payload;
        nulls[8] = message->payload == (Datum)0;
        values[9] = Int64GetDatum(message->first_id);
        values[10] = Int64GetDatum(message->last_id);
        values[11] = Int32GetDatum(message->row_end - first_row);
        values[12] = TimestampTzGetDatum(lease_until);
        if (out->json != nullptr) {
            append_json_message(out->json, values, nulls, shard, quoted_categories, category,
                                quoted_lease);
        } else {
            // The text columns as datums for the rows only: the JSON writes
            // the strings themselves.
            values[2] = CStringGetTextDatum(silo_text(shard->silo));
            values[5] = nulls[5] ? (Datum)0 : CStringGetTextDatum(shard->cell_name);
            values[6] = CStringGetTextDatum(categories->names[category]);
            tuplestore_putvalues(out->rows, out->desc, values, nulls);
        }
        written++;
    }
    return written;
}

} // namespace

int record_leases(const DrainBatch *batch, const LeasedBatch *leased, const Categories *categories,
                  Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                  const TimestampTz *turn_before, const ClaimOutput *out) {
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
    return write_messages(batch, leased, &s, taken, ntaken, categories, lease_until, out);
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
