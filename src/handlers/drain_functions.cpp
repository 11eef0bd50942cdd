// SQL entry points: outbox.drain_shard(silo, shard_scope, shard_identifier,
// cell_name) and outbox.drain(silo).  Both run in the caller's transaction;
// each message in its own subtransaction.
#include "delivery/compaction.hpp"
#include "delivery/delivery.hpp"
#include "delivery/session_pass.hpp"
#include "handlers/handlers.hpp"
#include "pg/guard.hpp"
#include "settings.hpp"

using namespace pgoutbox;

namespace {

// The shard named by arguments 0 to 3: silo, shard_scope, shard_identifier,
// cell_name (control shards only).
ShardKey shard_arguments(FunctionCallInfo fcinfo) {
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
    ShardKey shard;
    shard.silo = silo;
    shard.shard_scope = PG_GETARG_INT32(1);
    shard.shard_identifier = PG_GETARG_INT64(2);
    shard.cell_name = has_cell ? text_to_cstring(PG_GETARG_TEXT_PP(3)) : nullptr;
    return shard;
}

// The pass this session's outbox.drain() calls walk.
SessionPass drained = {};

} // namespace

OUTBOX_FUNCTION(outbox_drain_shard) {
    refuse_drain_in_handler("outbox.drain_shard()");
    ShardKey shard = shard_arguments(fcinfo);

    // Claim first, then read: what is read is current.
    if (!claim_shard(&shard, false) || !subtransactions_left())
        PG_RETURN_INT32(0);
    SPI_connect();
    DrainBatch *batch = read_shard(&shard, drain_batch_size);
    DrainStats stats = {0, 0, 0, 0};
    if (batch->nrows > 0)
        drain_batch(batch, &stats);
    SPI_finish();
    PG_RETURN_INT32((int32)stats.messages);
}

OUTBOX_FUNCTION(outbox_drain) {
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
    if (!subtransactions_left())
        PG_RETURN_INT64(0);
    SPI_connect();
    DrainPass *pass = session_pass_resume(&drained, cell, control, nullptr, 0, nullptr);
    // One unit of work: outbox.drain_batch_size rows, or more until a
    // message was delivered (batches that only skip or back off rows go
    // by), of up to 1,000 shards (each claim is a lock held to the end of
    // the caller's transaction), from this pass and, when it ends, from one
    // new pass.  So 0 means: nothing more to deliver now, or this
    // transaction has no claims or subtransactions left.
    bool started = false;
    int rows = 0, shards = 0;
    DrainStats stats = {0, 0, 0, 0};
    while ((rows < drain_batch_size || stats.messages == 0) && shards < drain_max_shards &&
           subtransactions_left()) {
        if (pass == nullptr) {
            if (started)
                break;
            pass = session_pass_begin(&drained, cell, control, nullptr, 0, nullptr);
            started = true;
        }
        DrainBatch *batch =
            drain_pass_next(pass, Max(drain_batch_size - rows, 1), drain_max_shards - shards);
        if (batch == nullptr) {
            session_pass_end(&drained);
            pass = nullptr;
            continue;
        }
        drain_batch(batch, &stats);
        drain_pass_batch_done(pass);
        rows += batch->nrows;
        shards += batch->nsegments;
    }
    SPI_finish();
    PG_RETURN_INT64(stats.messages);
}

// outbox.compact_outbox(silo, force): compacts what is due now (force: every
// partition with a file), in the caller's transaction; returns how many
// partitions it compacted.
OUTBOX_FUNCTION(outbox_compact_outbox) {
    bool cell = true, control = true;
    if (!PG_ARGISNULL(0)) {
        Silo silo = silo_argument(fcinfo, 0);
        cell = silo == Silo::Cell;
        control = silo == Silo::Control;
    }
    if (PG_ARGISNULL(1))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("force must not be NULL")));
    bool force = PG_GETARG_BOOL(1);
    SPI_connect();
    int compacted = 0;
    for (int silo = 0; silo < 2; silo++) {
        if (!(silo == 0 ? cell : control))
            continue;
        const Registry *registry = registry_get();
        const OutboxTable *table = silo == 0 ? &registry->cell_outbox : &registry->control_outbox;
        int n = table->nremainders;
        Oid *partitions = (Oid *)palloc(sizeof(Oid) * n);
        for (int r = 0; r < n; r++)
            partitions[r] = table->by_remainder[r].relid;
        for (int r = 0; r < n; r++)
            if (compaction_due(partitions[r], force) && compact_partition(partitions[r]))
                compacted++;
    }
    SPI_finish();
    PG_RETURN_INT32(compacted);
}

// outbox._claim_shard(silo, shard_scope, shard_identifier, cell_name): the
// drain's claim of a shard, to the end of the transaction, waited for
// (operating control changes a shard only under it).
OUTBOX_FUNCTION(outbox__claim_shard) {
    ShardKey shard = shard_arguments(fcinfo);
    (void)claim_shard(&shard, true);
    PG_RETURN_VOID();
}
