// outbox.complete() (docs/consumers.md): the claims taken back
// (claims.hpp), their messages delivered.  Runs as the extension's owner.
// Plain C-style code: PostgreSQL errors unwind through it.
#include "consumers/claims.hpp"
#include "pg/guard.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/array.h"
}

using namespace pgoutbox;

namespace {

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
