// SQL entry points: outbox.drain_shard(silo, shard_scope, shard_identifier,
// cell_name) and outbox.drain(silo).  Both run in the caller's transaction;
// each message in its own subtransaction.
#include "drain/drain.hpp"
#include "pg/guard.hpp"
#include "settings.hpp"

using namespace pgoutbox;

namespace {

Silo silo_argument(FunctionCallInfo fcinfo, int n) {
    if (PG_ARGISNULL(n))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("silo must not be NULL")));
    char *silo = text_to_cstring(PG_GETARG_TEXT_PP(n));
    if (strcmp(silo, "cell") == 0)
        return Silo::Cell;
    if (strcmp(silo, "control") == 0)
        return Silo::Control;
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("silo must be 'cell' or 'control', not %s", quote_literal_cstr(silo))));
    pg_unreachable();
}

// Shards drained per outbox.drain() call: each keeps its claim (a lock) to
// the end of the caller's transaction, and the lock table is finite.
constexpr int drain_max_shards = 1000;

} // namespace

OUTBOX_FUNCTION(drain_shard) {
    refuse_drain_in_handler("outbox.drain_shard()");
    Silo silo = silo_argument(fcinfo, 0);
    if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("%s must not be NULL",
                               PG_ARGISNULL(1) ? "shard_scope" : "shard_identifier")));
    bool has_cell = !PG_ARGISNULL(3);
    if (silo == Silo::Control && !has_cell)
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("cell_name must not be NULL for a control shard")));
    if (silo == Silo::Cell && has_cell)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("cell_name is for control shards only")));
    DrainShard shard;
    shard.silo = silo;
    shard.shard_scope = PG_GETARG_INT32(1);
    shard.shard_identifier = PG_GETARG_INT64(2);
    shard.cell_name = has_cell ? text_to_cstring(PG_GETARG_TEXT_PP(3)) : nullptr;
    shard.nrows = 0;
    shard.rows = nullptr;

    // Claim first, then read: the rows need no second look.
    if (!claim_shard(&shard))
        PG_RETURN_INT32(0);
    MemoryContext caller = CurrentMemoryContext;
    SPI_connect();
    read_shard(&shard, caller);
    DrainStats stats = {0, 0, 0, 0};
    int delivered = drain_claimed(&shard, false, &stats);
    SPI_finish();
    PG_RETURN_INT32(delivered);
}

OUTBOX_FUNCTION(drain) {
    refuse_drain_in_handler("outbox.drain()");
    bool cell = true, control = true;
    if (!PG_ARGISNULL(0)) {
        Silo silo = silo_argument(fcinfo, 0);
        cell = silo == Silo::Cell;
        control = silo == Silo::Control;
    } else if (silo_mode != SILO_MODE_MONOLITH) {
        cell = silo_mode == SILO_MODE_CELL;
        control = silo_mode == SILO_MODE_CONTROL;
    }
    MemoryContext caller = CurrentMemoryContext;
    SPI_connect();
    DrainStats stats = {0, 0, 0, 0};
    for (int i = 0; i < 2; i++) {
        Silo silo = i == 0 ? Silo::Cell : Silo::Control;
        if (!(i == 0 ? cell : control))
            continue;
        DrainShard *shards;
        int n = read_due_shards(silo, drain_max_shards, caller, &shards);
        for (int s = 0; s < n; s++)
            if (claim_shard(&shards[s]))
                drain_claimed(&shards[s], true, &stats);
    }
    SPI_finish();
    PG_RETURN_INT64(stats.messages);
}
