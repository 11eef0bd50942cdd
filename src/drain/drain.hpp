// Draining: due shards, claims, coalescing, handler calls, backoff.
//
// A shard is (silo, shard_scope, shard_identifier[, cell_name]).  It is due
// when any of its rows has scheduled_for <= now(); a due shard drains whole.
// Draining one shard:
//   1. claim it with a transaction-level advisory lock, tried, never waited
//      for: a shard another session is draining is skipped;
//   2. if its rows were read before the claim, check by ctid and id that they
//      are still there (another drainer may have delivered them meanwhile);
//   3. coalesce rows with the same (category, object_identifier) into one
//      message, in the order of their first rows, carrying the newest payload;
//   4. call each message's handler in its own subtransaction; a handler error
//      (or outbox.handler_timeout) stops the shard there: that message and the
//      later ones stay, the shard backs off (2 s, 4 s, ... 1 h) and the error
//      is recorded in outbox.shard_errors;
//   5. delete exactly the rows that were delivered (by ctid and id), so a row
//      committed while the shard was being drained is never deleted unseen.
// Messages of a category without a handler stay in the outbox.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

struct DrainStats {
    int64 shards;   // drained (claimed and due)
    int64 messages; // delivered to handlers
    int64 rows;     // outbox rows deleted after delivery
    int64 failures; // shards stopped by a handler error
};

// One row of a shard as read for draining.
struct DrainRow {
    ItemPointerData ctid;
    int64 id;
    int32 category;
    int64 object_identifier;
    Datum payload; // jsonb, 0 for NULL
    TimestampTz scheduled_for;
    TimestampTz date_added;
    bool backed_off; // scheduled_for > scheduled_from: a failure was recorded
};

struct DrainShard {
    Silo silo;
    int32 shard_scope;
    int64 shard_identifier;
    const char *cell_name; // control silo only
    int nrows;
    DrainRow *rows; // in id order
};

// ERROR when called while a handler runs.
void refuse_drain_in_handler(const char *function);

// Claims a shard for the rest of the transaction; false when another
// session holds it.
bool claim_shard(const DrainShard *shard);

// Drains a claimed shard whose rows were read already (verify: they were
// read before the claim, in this transaction or an earlier one).  Runs
// inside SPI, in the caller's transaction.  Returns messages delivered.
int drain_claimed(DrainShard *shard, bool verify, DrainStats *stats);

// Reads the rows of up to max_shards due shards of one silo, oldest
// scheduled_for first, into context; returns how many shards.  Inside SPI.
int read_due_shards(Silo silo, int max_shards, MemoryContext context, DrainShard **shards);

// Reads the rows of one shard, in id order.  Inside SPI.
void read_shard(DrainShard *shard, MemoryContext context);

} // namespace pgoutbox
