// The background worker's state in shared memory, low in the layers so
// that the modules the worker drives can reach the few things they share
// with it without including the worker: the wake-ups, the relay of
// consumers' NOTIFY, the measured backfill rate, the totals.  The struct
// itself is written by worker/ only; the rest of pg_outbox goes through the
// functions below.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
}

namespace pgoutbox {

// The outbox partitions (by remainder) whose reads the worker tells
// consumers of; beyond them, turns fall back on a naptime.
constexpr int turn_partitions = 256;

struct WorkerShared {
    slock_t mutex;
    pid_t pid;          // 0 until the worker has started
    Latch *latch;       // set to wake it
    Latch *mover_latch; // "pg_outbox mover"'s (worker/mover.cpp), woken with it
    TimestampTz last_cycle_start;
    TimestampTz last_cycle_end;
    int64 shards_drained;
    int64 messages_delivered;
    int64 rows_scheduled;
    int64 rows_backfilled;
    int64 backfill_budget_left;
    bool backfill_paused; // the cursor store (Redis) failed: retrying
    // outbox.worker_enabled as the worker last applied it, between cycles:
    // once it reads false, no cycle runs until it reads true again (a
    // reload the worker has not yet taken does not show here).
    bool enabled;
    // outbox.backfill_max_shard_depth as the worker applies it (read again
    // before each backfill step)
    int32 backfill_max_shard_depth;
    TimestampTz last_error_at; // 0: none since start or reset
    char last_error[256];
    // Tables whose backfill waits for a shard to drain
    // (outbox.backfill_max_shard_depth); beyond the array, not shown.
    int nthrottled;
    Oid throttled[64];
    // Tables whose backfill ('b') or cascade ('c') failed and waits out its
    // pause (a lock or owner code past its bound, a hostile trigger, a
    // bad cursor); beyond the array, not shown.
    int nfailing;
    Oid failing[64];
    char failing_job[64];
    // The backfill batches that ran, for outbox.plan_backfill's ETA.
    int64 backfill_ids_timed;
    int64 backfill_usecs;
    // Set by a commit that wrote outbox rows; the worker NOTIFYs consumers
    // (worker_outbox_committed) and clears it.
    pg_atomic_uint32 notify_pending;
    // Set by outbox.wake_worker(): a cycle now, not at the next naptime.
    pg_atomic_uint32 cycle_requested;
    // The outbox partitions, by silo (cell, control), that committed
    // transactions wrote rows into that a handler takes, since the worker
    // last read them: bit r % 64 for the partition of remainder r
    // (delivery/partition_watch.hpp reads and clears them).
    pg_atomic_uint64 written[2];
    // Counts commits that changed the handlers, told before their bits.
    pg_atomic_uint32 handlers_changed;
    // The turns of consumers' claims (consumers/, docs/consumers.md): per
    // silo and outbox partition (by remainder), when the transaction of the
    // worker's last read of it that left nothing behind began, once that
    // read's batches are over (0: none), and whether its last read was
    // clean: no lease hid rows it would take, nothing left behind.  Under
    // mutex.
    TimestampTz offered[2][turn_partitions];
    bool offered_clean[2][turn_partitions];
    // Counts the commits that ended consumers' claims: after a pass that
    // began after one, the worker NOTIFYs consumers.
    pg_atomic_uint32 claims_ended;
};

// NULL unless pg_outbox is in shared_preload_libraries.
extern WorkerShared *worker_shared;

// Zeroes the worker's totals and forgets its last error
// (outbox.stats_reset()); nothing without shared_preload_libraries.
void worker_reset_totals();

// The ids a second the worker's backfill batches have covered, over the
// time they took (budget waits left out); false before any batch, or
// without shared_preload_libraries.
bool worker_backfill_rate(double *ids_per_second);

// The channel consumers LISTEN on: the worker NOTIFYs it (no payload) after
// commits that wrote outbox rows, once for all those that committed while
// it was busy, so that capture never takes NOTIFY's cluster-wide commit
// lock itself.
constexpr const char *consumer_channel = "pg_outbox";

// This transaction wrote outbox rows (capture, a backfill batch): at its
// commit, when outbox.notify_consumers is on, the worker is asked to NOTIFY
// consumers.  Nothing without shared_preload_libraries; never raises.
void notify_consumers_at_commit();

// This transaction wrote outbox rows that a handler takes into the
// partitions of silo (0 cell, 1 control) whose bits are set (bit r % 64 for
// remainder r; ~0: any of them): once it has committed, the worker drains
// them, at once when outbox.wake_on_commit is on.  Nothing without
// shared_preload_libraries; never raises.
void drain_at_commit(int silo, uint64 partitions);

// This transaction changed the handlers: at its commit, before its bits,
// the count in WorkerShared moves.
void handlers_changed_at_commit();

// This transaction ends a consumer's claim of a shard in the partition
// (silo, remainder): once it has committed, the worker reads the partition
// (the handlers' turn), then NOTIFYs consumers (the claimer's turn may be
// back).  Nothing without shared_preload_libraries; never raises.
void claim_ended_at_commit(int silo, int remainder);

// The worker's read of a partition, in a transaction that began at began,
// is over: clean or not (a consumer's lease hid rows it would take), and
// with something left behind or not.
void worker_offered(int silo, int remainder, TimestampTz began, bool clean, bool left_behind);

// Since when the worker has had its turn at the partition: when its last
// read of it began; DT_NOEND when that read was clean and no commit wrote
// rows for the handlers since (the worker wants nothing there).  False
// when the worker is not running, or the partition is not one it tells.
bool worker_offered_at(int silo, int remainder, TimestampTz *since);

// The count of commits that ended claims (the worker's, around its passes).
uint32 worker_claims_ended();

// outbox.wake_worker(): a cycle now; false when the worker is not running.
bool worker_wake_for_cycle();

// From the shmem hooks of pg_outbox.cpp (the startup one holds
// AddinShmemInitLock).
void worker_shmem_request();
void worker_shmem_startup();

} // namespace pgoutbox
