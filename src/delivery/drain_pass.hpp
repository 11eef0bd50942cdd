// A drain pass: one walk over every due shard of the outbox, cut into
// batches (delivery.hpp), at a cost per row that does not depend on how deep
// the outbox is or how many shards it has.
//
// The outbox has no index (extension/tables/20_outbox.sql), so what
// is due can only be found by reading it.  0.4.0 read the whole outbox twice
// for every 1,000 shards it drained: quadratic in the depth.  A pass reads
// each hash partition once, in a short transaction of its own (sorted by
// shard and id, only due shards, only categories with a handler), into a
// tuplestore that spills to a temporary file and outlives the transaction;
// batches then stream from it, each delivered in a transaction of the
// caller's.  A partition read is a sixteenth of the outbox, so the read
// transaction holding back the xmin horizon stays short, and what the pass
// holds in memory is bounded by outbox.drain_batch_size and the tuplestore's
// budget, never by the depth of a shard.
//
// Rows change between the read and a batch: claims.cpp claims, then finds
// each row as it is now.  Across batches the pass keeps per-shard order: when
// a shard's batch was blocked, failed, or its transaction did not commit,
// the rest of that shard is skipped (or, after a failure, backed off) for the
// rest of the pass and found again by the next one.
#pragma once

#include "delivery/delivery.hpp"
#include "delivery/partition_watch.hpp"

namespace pgoutbox {

struct DrainPass;

// A pass over the due shards of the given silos, as of now, reading the
// rows of the given categories (NULL: those that have a handler), of one
// cell when cell_name is given (control rows).  Rows that a link delivers
// to another cluster are left out, except for a link's own pass (linked).
// The worker's passes read the partitions that scope says
// (partition_watch.hpp).  Lives in its own memory context under
// TopMemoryContext until drain_pass_end.
DrainPass *drain_pass_begin(bool cell, bool control, const int32 *categories = nullptr,
                            int ncategories = 0, const char *cell_name = nullptr,
                            bool linked = false, PassScope scope = PassScope::Unwatched);

// The next batch, of at most max_rows rows of at most max_shards shards, or
// NULL when the pass is over.  Inside SPI; reads the next partition when the
// current one is used up.  The batch lives until the next call.  With
// max_messages, no shard is added once the batch holds that many messages,
// counted as coalescing makes them (MessageKey): a claim's shards past its
// messages were read for nothing and waited for the next pass.
DrainBatch *drain_pass_next(DrainPass *pass, int max_rows, int max_shards,
                            int max_messages = INT_MAX);

// Tells the pass that drain_batch() returned for the last batch: its
// segments' outcomes hold, if the current transaction commits.
void drain_pass_batch_done(DrainPass *pass);

// Whether the pass was begun with these arguments (a link's pass never is).
bool drain_pass_reads(const DrainPass *pass, bool cell, bool control, const int32 *categories,
                      int ncategories, const char *cell_name);

// When the partition being walked was read.
TimestampTz drain_pass_read_at(const DrainPass *pass);

void drain_pass_end(DrainPass *pass);

// The first max_rows rows of one due shard, read now (after its claim), as
// a batch of one segment; no rows when the shard is not due.  Inside SPI.
DrainBatch *read_shard(const ShardKey *shard, int max_rows);

} // namespace pgoutbox
