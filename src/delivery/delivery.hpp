// The delivery core: due shards, claims, coalescing, outcomes (backoff,
// errors, dead letters), shared by every sink (handlers/, consumers/,
// link/); passes in drain_pass.hpp, tombstones of delivered rows in
// tombstones.hpp, compaction in compaction.hpp.
//
// A shard is (silo, shard_scope, shard_identifier[, cell_name]).  It is due
// when any of its rows has scheduled_for <= now(); a due shard drains whole,
// from its oldest row, in id order.  Draining works on batches (drain_pass.hpp
// makes them): a batch is at most outbox.drain_batch_size rows of at most
// 1,000 shards, each shard's rows a run (a segment) in id order.  Delivering
// a batch, in the caller's transaction:
//   1. claim each segment's shard with a transaction-level advisory lock,
//      tried, never waited for: a shard another session is draining is
//      skipped (and the rest of it, in later batches, too: order);
//   2. check by ctid, following updates, that the rows are still there and
//      not backed off since they were read (another drainer may have
//      delivered or failed them meanwhile);
//   3. coalesce rows with the same (category, object_identifier) into one
//      message, in the order of their first rows, carrying the newest payload
//      (claims.cpp: claim_and_coalesce);
//   4. a sink delivers the messages: the handlers (handlers/, under
//      savepoints: a failing message and the rest of its shard stay, the
//      other shards go on), a consumer's lease (lease_batch), a link's round;
//   5. delete exactly the rows that were delivered (by ctid), so a row
//      committed while the batch was being drained is never deleted unseen;
//      back the failed shards off (2 s, 4 s, ... 1 h) and record their errors
//      in outbox.shard_errors (outcomes.cpp: settle_batch).
// Messages of a category without a handler stay in the outbox.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

struct DrainStats {
    int64 shards;   // segments claimed and due
    int64 messages; // delivered to handlers
    int64 rows;     // outbox rows deleted after delivery
    int64 failures; // shards stopped by a handler error
};

struct ShardKey {
    Silo silo;
    int32 shard_scope;
    int64 shard_identifier;
    const char *cell_name; // control silo only
};

// One outbox row as a drain pass read it.
struct DrainRow {
    ItemPointerData ctid;
    int64 id;
    int32 category;
    int64 object_identifier;
    TimestampTz scheduled_for; // as read
    TimestampTz date_added;
};

enum class SegmentAction {
    Deliver,
    BackOff, // the rest of a shard that failed in an earlier batch
    Leave,   // not to be claimed now: not the consumer's turn (consumers/)
};

// Outcome of a segment, for the pass: whether the rest of its shard is
// skipped, or backed off, in later batches.
enum class SegmentOutcome {
    Done,    // delivered (or nothing left to deliver)
    Blocked, // claimed elsewhere, changed meanwhile, or deferred
    Failed,  // a handler failed: the rest of the shard backs off
};

struct DrainSegment {
    ShardKey shard;
    Oid partition; // the outbox partition holding the shard
    // Its file when the rows were read: compaction (or VACUUM FULL, or
    // CLUSTER) gives it a new one, and the ctids read before mean nothing.
    Oid filenode;
    SegmentAction action;
    int first; // index of its first row in the batch
    int nrows;
    // drain_shard() sees one batch of a shard, not the rest of it: a failure
    // backs off the shard's later rows too, by SQL.
    bool back_off_rest;
    SegmentOutcome outcome; // set by drain_batch
};

struct DrainBatch {
    int nrows;
    DrainRow *rows;
    int nsegments;
    DrainSegment *segments;
    // The snapshot the rows were read with, when that was before the claims
    // (a pass): a shard that failed in another session since is skipped.
    // NULL when the rows were read after the claim (drain_shard).
    Snapshot read_snapshot;
};

// Rows a drainer holds at once (outbox.drain_batch_size).
extern int drain_batch_size;

// Shards one batch claims, at most: each claim is a lock held to the end of
// the transaction, and the lock table is finite.
constexpr int drain_max_shards = 1000;

// Set while a handler runs (handlers/): a handler that drains or claims
// would nest deliveries (and handler timeouts) without end.
extern bool in_handler;

// ERROR when called while a handler runs.
void refuse_drain_in_handler(const char *function);

// The condition that leaves out of a read of the outbox (of silo, aliased
// o) the shards that are paused or that a consumer holds under a live lease.
// A lease is live until now(), the transaction's start: clock_timestamp()
// would be volatile and keep the planner from hashing the claims once per
// read (a claim that ended during the transaction waits for the next read).
const char *not_held(Silo silo);

// The condition that leaves out the rows a link delivers to another
// cluster (a control row of a cell with a server; every cell row once the
// control database is linked): handlers never see them.
const char *linked_elsewhere(Silo silo);

// Claims a shard for the rest of the transaction; false when another
// session holds it, unless wait (then it waits for that session's end).
bool claim_shard(const ShardKey *shard, bool wait);

// The partition that holds a shard's rows, routed as capture routes them.
Oid shard_partition(const ShardKey *shard);

// The file of a partition, as this transaction sees it (it locks the
// partition, as the read that goes with it does).
Oid partition_filenode(Oid partition);

// Whether this transaction may still open the subtransactions a batch needs.
bool subtransactions_left();

// A row as it is now, found from the ctid it was read at.
struct RowNow {
    bool present;
    ItemPointerData ctid; // of its latest version
    Datum payload;        // jsonb, 0 for NULL
    bool backed_off;      // scheduled_for > scheduled_from
    int message;          // -1: not part of a message
};

// What makes rows one message: their segment, category and
// object_identifier (hashed as a blob: 64-bit fields, no padding).
struct MessageKey {
    int64 object_identifier;
    int64 segment_category;
};

inline MessageKey message_key(int segment, const DrainRow *row) {
    return MessageKey{row->object_identifier,
                      (int64)(((uint64)(uint32)segment << 32) | (uint32)row->category)};
}

// A message: the rows of one (category, object_identifier) in a segment.
struct Message {
    int segment;
    int first;  // index of its first row
    int newest; // index of its newest row
    int nrows;
    int32 category;
    int64 object_identifier;
    TimestampTz oldest_added; // for the delivery lag
};

// Steps 1 to 3, in the caller's memory context, inside SPI: claims each
// segment's shard, finds its rows as they are now (*now_rows, one per row
// of the batch) and coalesces them into messages (*messages, in order);
// returns how many.  The rest of a shard that failed in an earlier batch is
// backed off here.  A segment not claimed, stopped or changed meanwhile is
// Blocked, and its rows are in no message.
int claim_and_coalesce(DrainBatch *batch, DrainStats *stats, RowNow **now_rows, Message **messages);

// Step 5, once a sink has delivered (delivered[m]) or failed (segment
// outcome Failed, failed_at[s] its failing message, errors[s] the error)
// the messages: records the tombstones of the delivered ones, deletes
// their rows, backs the failed shards off (or moves the failing message to
// the dead letters at max_attempts), and clears the error of a shard that
// went through.
void settle_batch(DrainBatch *batch, const RowNow *now_rows, const Message *messages, int nmessages,
                  const bool *delivered, const int *failed_at, char *const *errors,
                  DrainStats *stats);

// Backs these rows of a partition off (Sentry's backoff: each waits twice
// as long as it last did, between 1 s and 1 h).
void back_off_rows(Oid partition, const ItemPointerData *tids, int n);

// A batch handed to a consumer or a link instead of handlers: steps 1
// to 3 above, then the messages of the segments it claimed, in order, with
// their rows as they are now, grouped message by message.  Every segment's
// outcome is Blocked: the rest of a claimed shard waits for its completion.
struct LeasedMessage {
    int segment;
    int32 category;
    int64 object_identifier;
    Datum payload; // the newest row's jsonb; 0 for NULL
    int64 first_id, last_id;
    TimestampTz oldest_added;
    int row_end; // its rows end here in LeasedBatch's row arrays
};

struct LeasedBatch {
    int nmessages;
    LeasedMessage *messages;
    ItemPointerData *ctids; // of every row of the messages, message by message
    int64 *ids;
};

// In the caller's memory context, inside SPI.
void lease_batch(DrainBatch *batch, LeasedBatch *leased);

// Claimed rows, delivered or given up, as a consumer reports them.
struct ClaimedRows {
    ShardKey shard;
    const ItemPointerData *ctids; // where the claim found them
    const int64 *ids;
    int n;
};

// Deletes the rows (their latest versions; a row that moved without a trace
// is looked up by id) that are still there; returns how many it deleted.
int64 delete_claimed_rows(const ClaimedRows *rows);

// A consumer's failure of a message (the one of category, object_identifier
// in the shard), as a handler's failure is recorded: the shard's error and
// its failure count; at max_attempts, failing_rows go to the dead letters
// and the shard is due, else the whole shard backs off.
void fail_claimed_message(const ClaimedRows *failing_rows, int32 category, int64 object_identifier,
                          const char *error);

} // namespace pgoutbox
