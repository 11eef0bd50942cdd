// Claims taken back (claims.hpp).  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "consumers/claims.hpp"

#include "consumers/handed_out.hpp"
#include "consumers/turns.hpp"
#include "delivery/tombstones.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "stats/stats.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
}

namespace pgoutbox {

namespace {

// Elements of a one-dimensional array from an SPI result column.
void spi_array(HeapTuple tuple, TupleDesc desc, int column, Oid element, int size, bool byval,
               char align, Datum **items, int *n) {
    bool isnull;
    Datum value = SPI_getbinval(tuple, desc, column, &isnull);
    deconstruct_array(DatumGetArrayTypeP(value), element, size, byval, align, items, nullptr, n);
}

// A taken claim's rows and messages, from the handed_out DELETE RETURNING
// gave (handed_out.hpp).
void read_claim_rows(HeapTuple tuple, TupleDesc desc, int column, Claim *claim) {
    bool isnull;
    bytea *bytes = DatumGetByteaPP(SPI_getbinval(tuple, desc, column, &isnull));
    auto *data = (const uint8_t *)VARDATA_ANY(bytes);
    size_t length = VARSIZE_ANY_EXHDR(bytes), nrows, nmessages;
    HandedOutRow *rows = nullptr;
    HandedOutMessage *messages = nullptr;
    bool valid = handed_out_counts(data, length, &nrows, &nmessages);
    if (valid) {
        rows = (HandedOutRow *)palloc(sizeof(HandedOutRow) * Max(nrows, 1));
        messages = (HandedOutMessage *)palloc(sizeof(HandedOutMessage) * Max(nmessages, 1));
        valid = decode_handed_out(data, length, rows, messages);
    }
    if (!valid)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("the lease of claim " INT64_FORMAT " is corrupt", claim->token),
                        errdetail("Its handed_out in outbox.consumer_claims is not a lease.")));
    claim->nrows = int(nrows);
    claim->ctids = (ItemPointerData *)palloc(sizeof(ItemPointerData) * Max(nrows, 1));
    claim->ids = (int64 *)palloc(sizeof(int64) * Max(nrows, 1));
    for (size_t r = 0; r < nrows; r++) {
        ItemPointerSet(&claim->ctids[r], rows[r].block, rows[r].offset);
        claim->ids[r] = rows[r].id;
    }
    claim->nmessages = int(nmessages);
    claim->ends = (int32 *)palloc(sizeof(int32) * Max(nmessages, 1));
    claim->message_categories = (int32 *)palloc(sizeof(int32) * Max(nmessages, 1));
    claim->objects = (int64 *)palloc(sizeof(int64) * Max(nmessages, 1));
    claim->added = (TimestampTz *)palloc(sizeof(TimestampTz) * Max(nmessages, 1));
    int32 end = 0;
    for (size_t m = 0; m < nmessages; m++) {
        end += messages[m].nrows;
        claim->ends[m] = end;
        claim->message_categories[m] = messages[m].category;
        claim->objects[m] = messages[m].object;
        claim->added[m] = messages[m].added;
    }
}

// The rows of ended claims kept, released, as their shards' turns
// (turns.hpp).
void keep_turns(const int64 *turn_claims, Datum *turn_silos, const int32 *turn_scopes,
                const int64 *turn_identifiers, Datum *turn_cells, const Oid *turn_roles,
                int nturns) {
    MemoryContext caller = CurrentMemoryContext;
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
        " cell_name, consumer, claimed_at, lease_until, categories, handed_out, released)"
        " SELECT k.claim, k.silo, k.scope, k.identifier, k.cell, k.consumer,"
        " pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(), '{}', '', true"
        " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
        " pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5),"
        " pg_catalog.unnest($6)) AS k (claim, silo, scope, identifier, cell, consumer)",
        6, turn_types, turn_args, nullptr, false, SPI_OK_INSERT);
    MemoryContextSwitchTo(caller);
}

} // namespace

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
        " lease_until <= pg_catalog.clock_timestamp(), lease_until, handed_out, categories,"
        " consumer",
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
        Oid claimer = DatumGetObjectId(SPI_getbinval(tuple, taken->tupdesc, 10, &isnull));
        if (turns_claim_ended(&claim->shard, claimer)) {
            turn_claims[nturns] = tokens[i];
            turn_silos[nturns] = CStringGetTextDatum(silo_text(claim->shard.silo));
            turn_scopes[nturns] = claim->shard.shard_scope;
            turn_identifiers[nturns] = claim->shard.shard_identifier;
            turn_cells[nturns] = CStringGetTextDatum(cell);
            turn_roles[nturns] = claimer;
            nturns++;
        }
        read_claim_rows(tuple, taken->tupdesc, 8, claim);
        Datum *items;
        int count;
        spi_array(tuple, taken->tupdesc, 9, INT4OID, 4, true, TYPALIGN_INT, &items, &count);
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
    if (nturns > 0)
        keep_turns(turn_claims, turn_silos, turn_scopes, turn_identifiers, turn_cells, turn_roles,
                   nturns);
    return claims;
}

ClaimedRows claimed_rows(const Claim *claim, int first, int last) {
    int start = first == 0 ? 0 : claim->ends[first - 1];
    int end = last == 0 ? 0 : claim->ends[last - 1];
    return ClaimedRows{claim->shard, claim->ctids + start, claim->ids + start, end - start};
}

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

} // namespace pgoutbox
