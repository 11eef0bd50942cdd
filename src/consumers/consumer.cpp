// Consumers outside the database: outbox.claim(), outbox.complete() and
// outbox.fail() (docs/consumers.md).
//
// A claim is a drain whose handler is a process outside the database.  It
// walks due shards with a drain pass (drain_pass.hpp) of its own, claims
// them as a drain does (advisory lock, tried; delivery/claims.cpp), and instead of
// calling handlers records a lease per shard in outbox.consumer_claims and
// returns the shard's first messages.  The lease holds the shard across
// transactions: drains and other claims leave a shard alone while its lease
// is live (delivery/claims.cpp, not_held and skip_stopped_shards), and find it due
// again once the lease has passed.  The same role's claims take it again
// only once the others had their turn (turns.hpp).
//
// complete() and fail() take the shard's advisory lock (waited for), then
// delete the claim row with a fresh snapshot and check its lease: a claim
// that replaced an expired one did so under the same lock, so a token whose
// lease passed can never delete rows that were handed to someone else.
// They delete exactly the rows the claim handed out (by ctid, checked by
// id), never a row committed after the claim.  The claim row goes too, or
// stays released as the shard's turn (turns.hpp).
//
// All of it runs as the extension's owner, after checking that the calling
// role holds CONSUME on the categories (outbox.grant_category): no code of
// the caller's runs in between.  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "consumers/turns.hpp"

#include <cmath>

#include "delivery/delivery.hpp"
#include "delivery/session_pass.hpp"
#include "delivery/tombstones.hpp"
#include "pg/guard.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "common/int.h"
#include "datatype/timestamp.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

using namespace pgoutbox;

namespace {

// What one call may claim at most: the messages are in memory.
constexpr int max_claim_messages = 10000;

// The categories a call works on, with their names.
struct Categories {
    int n;
    int32 *ids;
    char **names;
};

// The categories that role may consume: of names when given (an unknown or
// refused name is an ERROR), else all that it holds CONSUME on and that
// have no handler here (the worker's: a claim takes those only when it
// names them).  Inside SPI, as the extension's owner.
Categories consumable_categories(Oid role, ArrayType *names) {
    Oid types[2] = {TEXTARRAYOID, OIDOID};
    Datum args[2] = {names ? PointerGetDatum(names) : (Datum)0, ObjectIdGetDatum(role)};
    char nulls[2] = {names ? ' ' : 'n', ' '};
    static SPIPlanPtr plan = nullptr;
    uint64 n =
        pg::spi_run_kept(&plan, "reading the categories a role may consume",
                         "SELECT c.id, c.name, EXISTS (SELECT FROM outbox.category_grants g"
                         " WHERE g.category = c.id AND g.privilege = 'CONSUME'"
                         " AND pg_catalog.pg_has_role($2, g.role, 'USAGE'))"
                         " FROM outbox.categories c WHERE CASE WHEN $1 IS NULL"
                         " THEN NOT EXISTS (SELECT FROM outbox.handlers h WHERE h.category = c.id)"
                         " ELSE c.name = ANY ($1) END ORDER BY c.id",
                         2, types, args, nulls, true, SPI_OK_SELECT);
    bool everything = superuser_arg(role);
    Categories result = {0, (int32 *)palloc(sizeof(int32) * Max(n, 1)),
                         (char **)palloc(sizeof(char *) * Max(n, 1))};
    for (uint64 r = 0; r < n; r++) {
        HeapTuple tuple = SPI_tuptable->vals[r];
        bool isnull;
        char *name = SPI_getvalue(tuple, SPI_tuptable->tupdesc, 2);
        if (!everything && !DatumGetBool(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 3, &isnull))) {
            if (names == nullptr)
                continue;
            ereport(ERROR,
                    (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                     errmsg("permission denied to consume category %s", quote_literal_cstr(name)),
                     errhint("The extension's owner grants it with "
                             "outbox.grant_category(%s, role, 'CONSUME').",
                             quote_literal_cstr(name))));
        }
        result.ids[result.n] =
            DatumGetInt32(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &isnull));
        result.names[result.n] = name;
        result.n++;
    }
    if (names != nullptr) {
        Datum *items;
        bool *item_nulls;
        int nitems;
        deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT, &items, &item_nulls, &nitems);
        for (int i = 0; i < nitems; i++) {
            char *name = TextDatumGetCString(items[i]);
            bool found = false;
            for (int c = 0; c < result.n && !found; c++)
                found = strcmp(result.names[c], name) == 0;
            if (!found)
                ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                                errmsg("category %s is not registered", quote_literal_cstr(name))));
        }
    }
    if (result.n == 0)
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("role %s may consume no category", GetUserNameFromId(role, false)),
                        errhint("The extension's owner grants categories with "
                                "outbox.grant_category(category, role, 'CONSUME').")));
    return result;
}

// The pass this session's claims walk.
SessionPass claimed = {};
// Messages a shard held in this session's last claimed batch.
double messages_per_shard = 1;

// Records the leases of a leased batch's shards (one INSERT) and writes
// their messages to the result; returns the messages written.  A shard
// whose live lease someone else recorded meanwhile is left out.
int record_leases(const DrainBatch *batch, const LeasedBatch *leased, const Categories *categories,
                  Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                  const TimestampTz *turn_before, Tuplestorestate *result, TupleDesc result_desc) {
    if (leased->nmessages == 0)
        return 0;
    int nsegments = batch->nsegments;
    // Per segment: its token, and where its first row and message are in
    // the flat arrays (1-based; message_first 0: it has no message).
    auto *tokens = (int64 *)palloc0(sizeof(int64) * nsegments);
    auto *row_first = (int32 *)palloc(sizeof(int32) * nsegments);
    auto *message_first = (int32 *)palloc(sizeof(int32) * nsegments);
    auto *ends = (int32 *)palloc(sizeof(int32) * leased->nmessages);
    auto *message_categories = (int32 *)palloc(sizeof(int32) * leased->nmessages);
    auto *objects = (int64 *)palloc(sizeof(int64) * leased->nmessages);
    auto *added = (Datum *)palloc(sizeof(Datum) * leased->nmessages);
    int nleased = 0;
    for (int s = 0; s < nsegments; s++)
        message_first[s] = 0;
    int row_start = 0;
    for (int m = 0; m < leased->nmessages; m++) {
        const LeasedMessage *message = &leased->messages[m];
        int s = message->segment;
        if (message_first[s] == 0) {
            message_first[s] = m + 1;
            row_first[s] = row_start + 1;
            tokens[s] = pg::random_token();
            nleased++;
        }
        ends[m] = message->row_end - row_first[s] + 1; // within the shard's rows
        message_categories[m] = message->category;
        objects[m] = message->object_identifier;
        added[m] = TimestampTzGetDatum(message->oldest_added);
        row_start = message->row_end;
    }
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
    auto *number = (int32 *)palloc0(sizeof(int32) * nsegments);
    int k = 0;
    for (int s = 0; s < nsegments; s++) {
        if (message_first[s] == 0)
            continue;
        const ShardKey *shard = &batch->segments[s].shard;
        silos[k] = CStringGetTextDatum(silo_text(shard->silo));
        scopes[k] = shard->shard_scope;
        identifiers[k] = shard->shard_identifier;
        cells[k] = CStringGetTextDatum(shard->cell_name ? shard->cell_name : "");
        leased_tokens[k] = tokens[s];
        leased_turns[k] = TimestampTzGetDatum(turn_before[s]);
        number[s] = ++k;
    }
    auto *row_shard = (int32 *)palloc(sizeof(int32) * Max(row_start, 1));
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
        pg::int4_array(row_shard, row_start),
        pg::int4_array(message_shard, leased->nmessages),
        ObjectIdGetDatum(role),
        TimestampTzGetDatum(claimed_at),
        TimestampTzGetDatum(lease_until),
        pg::tid_array(leased->ctids, row_start),
        pg::int8_array(leased->ids, row_start),
        pg::int4_array(ends, leased->nmessages),
        pg::int4_array(message_categories, leased->nmessages),
        pg::int8_array(objects, leased->nmessages),
        PointerGetDatum(construct_array(added, leased->nmessages, TIMESTAMPTZOID, 8,
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
    CommandCounterIncrement();
    for (int s = 0; s < nsegments; s++)
        if (message_first[s] != 0 &&
            bsearch(&tokens[s], taken, recorded, sizeof(int64), pg::compare_int64) != nullptr)
            turns_claimed(&batch->segments[s].shard, role, lease_until);

    int written = 0;
    for (int m = 0; m < leased->nmessages; m++) {
        const LeasedMessage *message = &leased->messages[m];
        int s = message->segment;
        if (bsearch(&tokens[s], taken, recorded, sizeof(int64), pg::compare_int64) == nullptr)
            continue;
        const ShardKey *shard = &batch->segments[s].shard;
        int first_row =
            m + 1 == message_first[s] ? row_first[s] - 1 : leased->messages[m - 1].row_end;
        Datum values[13];
        bool nulls[13] = {false};
        values[0] = Int64GetDatum(tokens[s]);
        values[1] = Int32GetDatum(m + 2 - message_first[s]);
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

// A claim as complete() and fail() take it: its row, deleted.
struct Claim {
    int64 token;
    ShardKey shard;
    int nrows;
    ItemPointerData *ctids;
    int64 *ids;
    int nmessages;
    int32 *ends; // message k's rows end at ends[k] (1-based counts)
    int32 *message_categories;
    int64 *objects;
    TimestampTz *added;
};

// Elements of a one-dimensional array from an SPI result column.
void spi_array(HeapTuple tuple, TupleDesc desc, int column, Oid element, int size, bool byval,
               char align, Datum **items, int *n) {
    bool isnull;
    Datum value = SPI_getbinval(tuple, desc, column, &isnull);
    deconstruct_array(DatumGetArrayTypeP(value), element, size, byval, align, items, nullptr, n);
}

// Takes the claims of tokens (all distinct) for the rest of the transaction:
// their shards' advisory locks, then their rows deleted.  An ERROR when a
// token is not held (never made, completed or failed, or replaced after its
// lease passed), when its lease has passed, or when role may not consume
// one of its categories.  Inside SPI, as the extension's owner.
Claim *take_claims(const int64 *tokens, int n, Oid role) {
    Oid types[1] = {INT8ARRAYOID};
    Datum args[1] = {pg::int8_array(tokens, n)};
    MemoryContext caller = CurrentMemoryContext;
    static SPIPlanPtr find_plan = nullptr, take_plan = nullptr, check_plan = nullptr;
    uint64 found =
        pg::spi_run_kept(&find_plan, "finding claims",
                         "SELECT claim, silo, shard_scope, shard_identifier, cell_name"
                         " FROM outbox.consumer_claims WHERE claim = ANY ($1) AND NOT released"
                         " ORDER BY claim",
                         1, types, args, nullptr, true, SPI_OK_SELECT);
    MemoryContextSwitchTo(caller);
    // Locks in token order: two calls that complete the same claims cannot
    // deadlock.
    for (uint64 r = 0; r < found; r++) {
        HeapTuple tuple = SPI_tuptable->vals[r];
        bool isnull;
        ShardKey shard;
        shard.silo = strcmp(SPI_getvalue(tuple, SPI_tuptable->tupdesc, 2), "cell") == 0
                         ? Silo::Cell
                         : Silo::Control;
        shard.shard_scope = DatumGetInt32(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 3, &isnull));
        shard.shard_identifier =
            DatumGetInt64(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 4, &isnull));
        char *cell = SPI_getvalue(tuple, SPI_tuptable->tupdesc, 5);
        shard.cell_name = shard.silo == Silo::Control ? cell : nullptr;
        (void)claim_shard(&shard, true);
    }
    // A fresh snapshot, after the locks: whoever replaced an expired claim
    // did so under the lock, and has committed.
    uint64 deleted = pg::spi_run_kept(
        &take_plan, "taking claims",
        "DELETE FROM outbox.consumer_claims WHERE claim = ANY ($1) AND NOT released"
        " RETURNING claim, silo, shard_scope, shard_identifier, cell_name,"
        " lease_until <= pg_catalog.clock_timestamp(), lease_until, rows_ctid, rows_id,"
        " message_ends, message_category, message_object, message_added, categories, consumer",
        1, types, args, nullptr, false, SPI_OK_DELETE_RETURNING);
    MemoryContextSwitchTo(caller);
    SPITupleTable *taken = SPI_tuptable;
    auto *claims = (Claim *)palloc0(sizeof(Claim) * Max(n, 1));
    int32 *categories = nullptr;
    int ncategories = 0;
    // The claims whose rows stay as their shards' turns.
    auto *turn_claims = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    auto *turn_silos = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    auto *turn_scopes = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    auto *turn_identifiers = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    auto *turn_cells = (Datum *)palloc(sizeof(Datum) * Max(n, 1));
    auto *turn_roles = (Oid *)palloc(sizeof(Oid) * Max(n, 1));
    int nturns = 0;
    for (int i = 0; i < n; i++) {
        uint64 r = 0;
        bool isnull;
        while (r < deleted && DatumGetInt64(SPI_getbinval(taken->vals[r], taken->tupdesc, 1,
                                                          &isnull)) != tokens[i])
            r++;
        if (r == deleted)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("claim " INT64_FORMAT " is not held", tokens[i]),
                            errdetail("It was completed or failed, its lease passed and another "
                                      "claim took the shard, or it was never made."),
                            errhint("Its messages are delivered to whoever claims them next.")));
        HeapTuple tuple = taken->vals[r];
        if (DatumGetBool(SPI_getbinval(tuple, taken->tupdesc, 6, &isnull)))
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("the lease of claim " INT64_FORMAT " ended at %s", tokens[i],
                                   SPI_getvalue(tuple, taken->tupdesc, 7)),
                            errdetail("A claim whose lease has passed delivers nothing: its "
                                      "messages go to whoever claims them next."),
                            errhint("Take a longer lease, or claim fewer messages at once.")));
        Claim *claim = &claims[i];
        claim->token = tokens[i];
        claim->shard.silo = strcmp(SPI_getvalue(tuple, taken->tupdesc, 2), "cell") == 0
                                ? Silo::Cell
                                : Silo::Control;
        claim->shard.shard_scope = DatumGetInt32(SPI_getbinval(tuple, taken->tupdesc, 3, &isnull));
        claim->shard.shard_identifier =
            DatumGetInt64(SPI_getbinval(tuple, taken->tupdesc, 4, &isnull));
        char *cell = SPI_getvalue(tuple, taken->tupdesc, 5);
        claim->shard.cell_name = claim->shard.silo == Silo::Control ? cell : nullptr;
        // The worker's turn, unless it wants nothing there: the claim's
        // row stays as the shard's turn (turn_before), and the worker reads
        // its partition once this commits.
        Oid claimer = DatumGetObjectId(SPI_getbinval(tuple, taken->tupdesc, 15, &isnull));
        if (turns_claim_ended(&claim->shard, claimer)) {
            turn_claims[nturns] = tokens[i];
            turn_silos[nturns] = CStringGetTextDatum(silo_text(claim->shard.silo));
            turn_scopes[nturns] = claim->shard.shard_scope;
            turn_identifiers[nturns] = claim->shard.shard_identifier;
            turn_cells[nturns] = CStringGetTextDatum(cell);
            turn_roles[nturns] = claimer;
            nturns++;
        }
        Datum *items;
        int count;
        spi_array(tuple, taken->tupdesc, 8, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT,
                  &items, &claim->nrows);
        claim->ctids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * Max(claim->nrows, 1));
        for (int k = 0; k < claim->nrows; k++)
            claim->ctids[k] = *(ItemPointer)DatumGetPointer(items[k]);
        spi_array(tuple, taken->tupdesc, 9, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &items,
                  &count);
        claim->ids = (int64 *)palloc(sizeof(int64) * Max(count, 1));
        for (int k = 0; k < count; k++)
            claim->ids[k] = DatumGetInt64(items[k]);
        spi_array(tuple, taken->tupdesc, 10, INT4OID, 4, true, TYPALIGN_INT, &items,
                  &claim->nmessages);
        claim->ends = (int32 *)palloc(sizeof(int32) * Max(claim->nmessages, 1));
        for (int k = 0; k < claim->nmessages; k++)
            claim->ends[k] = DatumGetInt32(items[k]);
        spi_array(tuple, taken->tupdesc, 11, INT4OID, 4, true, TYPALIGN_INT, &items, &count);
        claim->message_categories = (int32 *)palloc(sizeof(int32) * Max(count, 1));
        for (int k = 0; k < count; k++)
            claim->message_categories[k] = DatumGetInt32(items[k]);
        spi_array(tuple, taken->tupdesc, 12, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &items,
                  &count);
        claim->objects = (int64 *)palloc(sizeof(int64) * Max(count, 1));
        for (int k = 0; k < count; k++)
            claim->objects[k] = DatumGetInt64(items[k]);
        spi_array(tuple, taken->tupdesc, 13, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
                  &items, &count);
        claim->added = (TimestampTz *)palloc(sizeof(TimestampTz) * Max(count, 1));
        for (int k = 0; k < count; k++)
            claim->added[k] = DatumGetTimestampTz(items[k]);
        spi_array(tuple, taken->tupdesc, 14, INT4OID, 4, true, TYPALIGN_INT, &items, &count);
        categories = categories == nullptr
                         ? (int32 *)palloc(sizeof(int32) * Max(count, 1))
                         : (int32 *)repalloc(categories, sizeof(int32) * (ncategories + count));
        for (int k = 0; k < count; k++)
            categories[ncategories++] = DatumGetInt32(items[k]);
    }
    // The role must still hold CONSUME on every category it completes:
    // revoking it fences the role's claims.
    if (!superuser_arg(role) && ncategories > 0) {
        Oid check_types[2] = {INT4ARRAYOID, OIDOID};
        Datum check_args[2] = {pg::int4_array(categories, ncategories), ObjectIdGetDatum(role)};
        uint64 refused = pg::spi_run_kept(
            &check_plan, "checking a consumer's categories",
            "SELECT c.name FROM outbox.categories c WHERE c.id = ANY ($1) AND NOT EXISTS"
            " (SELECT FROM outbox.category_grants g WHERE g.category = c.id"
            " AND g.privilege = 'CONSUME' AND pg_catalog.pg_has_role($2, g.role, 'USAGE'))"
            " ORDER BY c.name LIMIT 1",
            2, check_types, check_args, nullptr, true, SPI_OK_SELECT);
        MemoryContextSwitchTo(caller);
        if (refused > 0) {
            char *name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
            ereport(ERROR,
                    (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                     errmsg("permission denied to consume category %s", quote_literal_cstr(name))));
        }
    }
    if (nturns > 0) {
        static SPIPlanPtr turn_plan = nullptr;
        Oid turn_types[6] = {INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID,
                             INT8ARRAYOID, TEXTARRAYOID, OIDARRAYOID};
        auto *roles = (Datum *)palloc(sizeof(Datum) * nturns);
        for (int t = 0; t < nturns; t++)
            roles[t] = ObjectIdGetDatum(turn_roles[t]);
        Datum turn_args[6] = {
            pg::int8_array(turn_claims, nturns),
            PointerGetDatum(construct_array(turn_silos, nturns, TEXTOID, -1, false, TYPALIGN_INT)),
            pg::int4_array(turn_scopes, nturns),
            pg::int8_array(turn_identifiers, nturns),
            PointerGetDatum(construct_array(turn_cells, nturns, TEXTOID, -1, false, TYPALIGN_INT)),
            PointerGetDatum(construct_array(roles, nturns, OIDOID, 4, true, TYPALIGN_INT))};
        (void)pg::spi_run_kept(
            &turn_plan, "keeping the shards' turns",
            "INSERT INTO outbox.consumer_claims (claim, silo, shard_scope, shard_identifier,"
            " cell_name, consumer, claimed_at, lease_until, categories, rows_ctid, rows_id,"
            " message_ends, message_category, message_object, message_added, released)"
            " SELECT k.claim, k.silo, k.scope, k.identifier, k.cell, k.consumer,"
            " pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(), '{}', '{}', '{}', '{}',"
            " '{}', '{}', '{}', true FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
            " pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5),"
            " pg_catalog.unnest($6)) AS k (claim, silo, scope, identifier, cell, consumer)",
            6, turn_types, turn_args, nullptr, false, SPI_OK_INSERT);
        MemoryContextSwitchTo(caller);
    }
    return claims;
}

// The rows of a claim's messages from first to last (0-based, last
// excluded).
ClaimedRows claimed_rows(const Claim *claim, int first, int last) {
    int start = first == 0 ? 0 : claim->ends[first - 1];
    int end = last == 0 ? 0 : claim->ends[last - 1];
    return ClaimedRows{claim->shard, claim->ctids + start, claim->ids + start, end - start};
}

// Delivers the first k messages of a claim: their rows go, their counts and
// lag are recorded, and the rows whose object is gone leave tombstones.
void deliver_claimed(const Claim *claim, int k, TimestampTz now) {
    if (k == 0)
        return;
    ClaimedRows rows = claimed_rows(claim, 0, k);
    (void)delete_claimed_rows(&rows);
    auto *control = (bool *)palloc(sizeof(bool) * k);
    for (int m = 0; m < k; m++) {
        int nrows = claim->ends[m] - (m == 0 ? 0 : claim->ends[m - 1]);
        stats_count_delivered(claim->message_categories[m], claim->added[m], now);
        stats_count_processed(claim->message_categories[m], nrows);
        control[m] = claim->shard.silo == Silo::Control;
    }
    tombstones_of_delivered(k, claim->message_categories, claim->objects, control);
}

// Shards that went through: their recorded errors go (one statement).
void clear_errors(const Claim *claims, const int32 *through, int n) {
    auto *silos = (Datum *)palloc(sizeof(Datum) * n);
    auto *scopes = (int32 *)palloc(sizeof(int32) * n);
    auto *identifiers = (int64 *)palloc(sizeof(int64) * n);
    auto *cells = (Datum *)palloc(sizeof(Datum) * n);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (through[i] == 0)
            continue;
        const ShardKey *shard = &claims[i].shard;
        silos[k] = CStringGetTextDatum(silo_text(shard->silo));
        scopes[k] = shard->shard_scope;
        identifiers[k] = shard->shard_identifier;
        cells[k] = CStringGetTextDatum(shard->cell_name ? shard->cell_name : "");
        k++;
    }
    if (k == 0)
        return;
    Oid types[4] = {TEXTARRAYOID, INT4ARRAYOID, INT8ARRAYOID, TEXTARRAYOID};
    Datum args[4] = {PointerGetDatum(construct_array(silos, k, TEXTOID, -1, false, TYPALIGN_INT)),
                     pg::int4_array(scopes, k), pg::int8_array(identifiers, k),
                     PointerGetDatum(construct_array(cells, k, TEXTOID, -1, false, TYPALIGN_INT))};
    MemoryContext caller = CurrentMemoryContext;
    static SPIPlanPtr plan = nullptr;
    (void)pg::spi_run_kept(
        &plan, "clearing shard errors",
        "DELETE FROM outbox.shard_errors e USING ROWS FROM (pg_catalog.unnest($1),"
        " pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4))"
        " AS k (silo, scope, identifier, cell) WHERE e.silo = k.silo"
        " AND e.shard_scope = k.scope AND e.shard_identifier = k.identifier"
        " AND e.cell_name = k.cell",
        4, types, args, nullptr, false, SPI_OK_DELETE);
    MemoryContextSwitchTo(caller);
}

} // namespace

// outbox.claim(max_messages, lease, categories, silo, cell_name): up to
// max_messages due messages of whole shards, each shard under a lease of
// its own.
OUTBOX_FUNCTION(outbox_claim) {
    refuse_drain_in_handler("outbox.claim()");
    if (PG_ARGISNULL(0))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("max_messages must not be NULL")));
    int32 max_messages = PG_GETARG_INT32(0);
    if (max_messages < 1 || max_messages > max_claim_messages)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("max_messages must be between 1 and %d, not %d", max_claim_messages,
                               max_messages)));
    int64 lease_usecs = lease_usecs_argument(fcinfo, 1);
    ArrayType *names = PG_ARGISNULL(2) ? nullptr : PG_GETARG_ARRAYTYPE_P(2);
    if (names != nullptr) {
        if (ARR_NDIM(names) > 1)
            ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                            errmsg("categories must be a one-dimensional array")));
        if (ArrayGetNItems(ARR_NDIM(names), ARR_DIMS(names)) == 0)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("categories must not be empty"),
                            errhint("Pass NULL for every category the role may consume.")));
        if (array_contains_nulls(names))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("categories must not contain NULL")));
    }
    bool cell = true, control = true;
    char *cell_name = PG_ARGISNULL(4) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(4));
    if (!PG_ARGISNULL(3)) {
        Silo silo = silo_argument(fcinfo, 3);
        cell = silo == Silo::Cell;
        control = silo == Silo::Control;
        if (cell && cell_name != nullptr)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("cell_name is for control shards only")));
    } else if (cell_name != nullptr) {
        cell = false; // one cell's messages: the control silo's
    } else if (silo_mode != SILO_MODE_MONOLITH) {
        cell = silo_mode == SILO_MODE_CELL;
        control = silo_mode == SILO_MODE_CONTROL;
    }
    Oid role = GetUserId();
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Categories categories = consumable_categories(role, names);
    if (cell_name != nullptr) {
        static SPIPlanPtr plan = nullptr;
        Oid types[1] = {TEXTOID};
        Datum args[1] = {CStringGetTextDatum(cell_name)};
        if (pg::spi_run_kept(&plan, "looking up a cell",
                             "SELECT FROM outbox.cells c WHERE c.name = $1", 1, types, args,
                             nullptr, true, SPI_OK_SELECT) == 0)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                            errmsg("cell_name %s is not a registered cell",
                                   quote_literal_cstr(cell_name))));
    }
    DrainPass *pass =
        session_pass_resume(&claimed, cell, control, categories.ids, categories.n, cell_name);
    Turns turns = turns_begin(role);
    TimestampTz claimed_at = GetCurrentTimestamp();
    TimestampTz lease_until = claimed_at + lease_usecs;
    bool started = false;
    int messages = 0, shards = 0;
    // Rows are read and coalesced as the drain does (SPEC section 4): up to
    // outbox.drain_batch_size rows of a shard a read, so that one object's
    // rows within a read are one message with the newest payload;
    // max_messages counts messages.
    MemoryContext work =
        AllocSetContextCreate(CurrentMemoryContext, "pg_outbox claim", ALLOCSET_DEFAULT_SIZES);
    while (messages < max_messages && shards < drain_max_shards) {
        if (pass == nullptr) {
            if (started)
                break;
            pass = session_pass_begin(&claimed, cell, control, categories.ids, categories.n,
                                      cell_name);
            started = true;
        }
        int wanted = max_messages - messages;
        // Shards for about the messages wanted, by the messages a shard
        // held in this session's last batch: the shards of a batch past the
        // messages wanted wait for the next pass, so that batches of
        // drain_batch_size rows for claims of 1,000 one-row messages read
        // and left 9,000 rows each, and the pass read its partitions ten
        // times as often (bench/consumer, workload B).
        int most = (int)Min((double)(drain_max_shards - shards),
                            ceil((double)wanted / messages_per_shard));
        DrainBatch *batch = drain_pass_next(pass, drain_batch_size, Max(most, 1));
        if (batch == nullptr) {
            session_pass_end(&claimed);
            pass = nullptr;
            continue;
        }
        MemoryContext old = MemoryContextSwitchTo(work);
        LeasedBatch leased;
        TimestampTz *turn_before = turns_leave(&turns, batch);
        lease_batch(batch, &leased);
        if (batch->nsegments > 0)
            messages_per_shard = Max(1.0, (double)leased.nmessages / batch->nsegments);
        // Beyond the messages wanted: not handed out.  A shard cut there
        // is claimed with its first messages; one past the cut waits for
        // the next pass.
        if (leased.nmessages > wanted)
            leased.nmessages = wanted;
        messages += record_leases(batch, &leased, &categories, role, claimed_at, lease_until,
                                  turn_before, rsinfo->setResult, rsinfo->setDesc);
        MemoryContextSwitchTo(old);
        MemoryContextReset(work);
        drain_pass_batch_done(pass);
        shards += batch->nsegments;
    }
    pg::run_as_end(&scope);
    SPI_finish();
    return (Datum)0;
}

// outbox.complete(claims, through): delivers the first through[i] messages
// of claims[i] (NULL: all of them) and ends the claims.
OUTBOX_FUNCTION(outbox_complete) {
    if (PG_ARGISNULL(0))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("claims must not be NULL")));
    ArrayType *claims_array = PG_GETARG_ARRAYTYPE_P(0);
    Datum *items;
    bool *nulls;
    int n;
    deconstruct_array(claims_array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &items, &nulls,
                      &n);
    auto *tokens = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    for (int i = 0; i < n; i++) {
        if (nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("claims must not contain NULL")));
        tokens[i] = DatumGetInt64(items[i]);
    }
    auto *sorted = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    memcpy(sorted, tokens, sizeof(int64) * n);
    qsort(sorted, n, sizeof(int64), pg::compare_int64);
    for (int i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1])
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("claim " INT64_FORMAT " appears twice in claims", sorted[i])));
    auto *through = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    bool all = PG_ARGISNULL(1);
    if (!all) {
        int count;
        deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), INT4OID, 4, true, TYPALIGN_INT, &items, &nulls,
                          &count);
        if (count != n)
            ereport(ERROR,
                    (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                     errmsg("through has %d elements, claims %d: they must match", count, n)));
        for (int i = 0; i < n; i++) {
            if (nulls[i])
                ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                                errmsg("through must not contain NULL")));
            through[i] = DatumGetInt32(items[i]);
            if (through[i] < 0)
                ereport(ERROR,
                        (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                         errmsg("through[%d] must not be negative, not %d", i + 1, through[i])));
        }
    }
    if (n == 0)
        PG_RETURN_INT64(0);
    Oid role = GetUserId();
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Claim *claims = take_claims(tokens, n, role);
    TimestampTz now = GetCurrentTimestamp();
    int64 delivered = 0;
    for (int i = 0; i < n; i++) {
        if (all)
            through[i] = claims[i].nmessages;
        else if (through[i] > claims[i].nmessages)
            ereport(ERROR,
                    (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                     errmsg("through[%d] is %d, but claim " INT64_FORMAT " holds %d messages",
                            i + 1, through[i], tokens[i], claims[i].nmessages)));
        deliver_claimed(&claims[i], through[i], now);
        delivered += through[i];
    }
    clear_errors(claims, through, n);
    pg::run_as_end(&scope);
    SPI_finish();
    PG_RETURN_INT64(delivered);
}

// outbox.fail(claim, message_number, error): the messages before it were
// delivered; it failed with error, as after a handler's failure.
OUTBOX_FUNCTION(outbox_fail) {
    for (int i = 0; i < 3; i++)
        if (PG_ARGISNULL(i))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", i == 0   ? "claim"
                                                          : i == 1 ? "message_number"
                                                                   : "error")));
    int64 token = PG_GETARG_INT64(0);
    int32 number = PG_GETARG_INT32(1);
    char *error = text_to_cstring(PG_GETARG_TEXT_PP(2));
    if (number < 1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("message_number must be 1 or more, not %d", number)));
    if (error[0] == '\0')
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("error must not be empty"),
                        errhint("It is what outbox.shard_depth shows as the shard's last error.")));
    Oid role = GetUserId();
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Claim *claim = take_claims(&token, 1, role);
    if (number > claim->nmessages)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("message_number is %d, but claim " INT64_FORMAT " holds %d messages",
                               number, token, claim->nmessages)));
    deliver_claimed(claim, number - 1, GetCurrentTimestamp());
    ClaimedRows failing = claimed_rows(claim, number - 1, number);
    fail_claimed_message(&failing, claim->message_categories[number - 1],
                         claim->objects[number - 1], error);
    pg::run_as_end(&scope);
    SPI_finish();
    PG_RETURN_VOID();
}
