// Targeted re-sync (docs/guide.md, "Sending rows again"): what the worker
// needs to run the jobs, a batch at a time, after the backfill's tables,
// from the same per-minute budget.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

struct ResyncBatch {
    int64 rows;     // the job's rows it covered: the budget it used
    int64 written;  // outbox rows
    bool throttled; // a shard was at the guard's bound: nothing written
    bool done;
};

// One batch of job in the caller's transaction: up to batch_size of its
// rows, each sent as an UPDATE of it would be.  With max_shard_depth > 0, a
// batch that would add rows to a shard already holding that many outbox
// rows writes nothing and moves no cursor (the hot-shard guard).  False
// when the job is not running.
bool resync_batch(int64 job, int32 batch_size, int32 max_shard_depth, ResyncBatch *batch);

// A failed batch's error as the job's last_error (the job goes on).  In a
// transaction.
void resync_record_error(int64 job, const char *message);

// The running jobs, oldest first, allocated in context.  Inside SPI.
int running_resyncs(MemoryContext context, int64 **jobs);

} // namespace pgoutbox
