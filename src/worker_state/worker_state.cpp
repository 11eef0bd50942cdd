// The worker's shared state and what other modules ask of it
// (worker_state.hpp).
#include "worker_state/worker_state.hpp"

#include "settings.hpp"

extern "C" {
#include "access/xact.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
}

namespace pgoutbox {

WorkerShared *worker_shared = nullptr;

void worker_shmem_request() {
    RequestAddinShmemSpace(MAXALIGN(sizeof(WorkerShared)));
}

void worker_shmem_startup() {
    bool found;
    worker_shared =
        (WorkerShared *)ShmemInitStruct("pg_outbox worker", sizeof(WorkerShared), &found);
    if (!found) {
        memset(worker_shared, 0, sizeof(WorkerShared));
        SpinLockInit(&worker_shared->mutex);
        pg_atomic_init_u32(&worker_shared->notify_pending, 0);
        pg_atomic_init_u32(&worker_shared->cycle_requested, 0);
        pg_atomic_init_u64(&worker_shared->written[0], 0);
        pg_atomic_init_u64(&worker_shared->written[1], 0);
        pg_atomic_init_u32(&worker_shared->handlers_changed, 0);
        pg_atomic_init_u32(&worker_shared->claims_ended, 0);
    }
}

namespace {

void worker_set_latch() {
    SpinLockAcquire(&worker_shared->mutex);
    Latch *latch = worker_shared->latch;
    SpinLockRelease(&worker_shared->mutex);
    if (latch != nullptr)
        SetLatch(latch);
}

// The worker NOTIFYs consumers for all the commits since its last NOTIFY.
void ask_worker_to_notify() {
    if (worker_shared == nullptr || pg_atomic_read_u32(&worker_shared->notify_pending) != 0 ||
        pg_atomic_exchange_u32(&worker_shared->notify_pending, 1) != 0)
        return;
    worker_set_latch();
}

// The partitions this transaction wrote rows into that a handler takes, by
// silo.  A subtransaction that rolls back leaves its bits: the worker then
// reads a partition for nothing, once.
uint64 written_partitions[2] = {0, 0};
bool changed_handlers = false;
bool ended_claims = false; // claim_ended_at_commit

// Once the commit is visible (XACT_EVENT_COMMIT comes after the procarray
// says so): a read that starts after the worker cleared a bit sees this
// transaction's rows.  The latch is set only when a bit was not set yet:
// a bit already set has its wake-up on the way, so a stream of commits
// costs the worker one wake-up per pass, not one per commit.
void wake_for_written() {
    if (changed_handlers)
        pg_atomic_fetch_add_u32(&worker_shared->handlers_changed, 1);
    if (ended_claims)
        pg_atomic_fetch_add_u32(&worker_shared->claims_ended, 1);
    bool news = false;
    for (int silo = 0; silo < 2; silo++) {
        uint64 bits = written_partitions[silo];
        if (bits != 0 && (pg_atomic_read_u64(&worker_shared->written[silo]) & bits) != bits)
            news = (pg_atomic_fetch_or_u64(&worker_shared->written[silo], bits) & bits) != bits ||
                   news;
    }
    if (news && wake_on_commit)
        worker_set_latch();
}

// The lowest transaction nesting level that wrote outbox rows and is not
// rolled back; 0: none.  A subtransaction's writes go to its parent at its
// commit and are gone at its abort.
int written_level = 0;
bool callbacks_registered = false;

// Runs at commit: raises no ERROR (a spinlock and a latch).
void on_xact(XactEvent event, void *) {
    if (event == XACT_EVENT_COMMIT) {
        wake_for_written();
        if (written_level > 0 && notify_consumers)
            ask_worker_to_notify();
    }
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE) {
        written_level = 0;
        written_partitions[0] = written_partitions[1] = 0;
        changed_handlers = false;
        ended_claims = false;
    }
}

void on_subxact(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    int level = GetCurrentTransactionNestLevel();
    if (written_level < level)
        return;
    if (event == SUBXACT_EVENT_COMMIT_SUB)
        written_level = level - 1;
    else if (event == SUBXACT_EVENT_ABORT_SUB)
        written_level = 0;
}

void register_callbacks() {
    if (!callbacks_registered) {
        RegisterXactCallback(on_xact, nullptr);
        RegisterSubXactCallback(on_subxact, nullptr);
        callbacks_registered = true;
    }
}

} // namespace

void notify_consumers_at_commit() {
    if (worker_shared == nullptr)
        return;
    register_callbacks();
    int level = GetCurrentTransactionNestLevel();
    if (written_level == 0 || level < written_level)
        written_level = level;
}

void drain_at_commit(int silo, uint64 partitions) {
    if (worker_shared == nullptr || partitions == 0)
        return;
    register_callbacks();
    written_partitions[silo] |= partitions;
}

void handlers_changed_at_commit() {
    if (worker_shared == nullptr)
        return;
    register_callbacks();
    changed_handlers = true;
}

bool worker_wake_for_cycle() {
    pg_atomic_write_u32(&worker_shared->cycle_requested, 1);
    SpinLockAcquire(&worker_shared->mutex);
    Latch *latch = worker_shared->latch;
    Latch *mover_latch = worker_shared->mover_latch;
    bool running = worker_shared->pid != 0;
    SpinLockRelease(&worker_shared->mutex);
    if (running && latch != nullptr)
        SetLatch(latch);
    if (mover_latch != nullptr)
        SetLatch(mover_latch);
    return running;
}

void worker_reset_totals() {
    if (worker_shared == nullptr)
        return;
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->shards_drained = 0;
    worker_shared->messages_delivered = 0;
    worker_shared->rows_scheduled = 0;
    worker_shared->rows_backfilled = 0;
    worker_shared->last_error[0] = '\0';
    worker_shared->last_error_at = 0;
    SpinLockRelease(&worker_shared->mutex);
}

bool worker_backfill_rate(double *ids_per_second) {
    if (worker_shared == nullptr)
        return false;
    SpinLockAcquire(&worker_shared->mutex);
    int64 ids = worker_shared->backfill_ids_timed;
    int64 usecs = worker_shared->backfill_usecs;
    SpinLockRelease(&worker_shared->mutex);
    if (ids <= 0 || usecs <= 0)
        return false;
    *ids_per_second = (double)ids * USECS_PER_SEC / (double)usecs;
    return true;
}

void claim_ended_at_commit(int silo, int remainder) {
    if (worker_shared == nullptr)
        return;
    register_callbacks();
    written_partitions[silo] |= uint64(1) << (remainder % 64);
    ended_claims = true;
}

void worker_offered(int silo, int remainder, TimestampTz began, bool clean, bool left_behind) {
    if (remainder >= turn_partitions)
        return;
    SpinLockAcquire(&worker_shared->mutex);
    // A read that left something behind had no turn at that shard: often
    // the very claim whose end woke the worker still held its lock (the
    // commit's callbacks come before its locks go).
    if (!left_behind)
        worker_shared->offered[silo][remainder] = began;
    worker_shared->offered_clean[silo][remainder] = clean && !left_behind;
    SpinLockRelease(&worker_shared->mutex);
}

bool worker_offered_at(int silo, int remainder, TimestampTz *since) {
    if (worker_shared == nullptr || remainder >= turn_partitions)
        return false;
    SpinLockAcquire(&worker_shared->mutex);
    bool running = worker_shared->pid != 0;
    *since = worker_shared->offered[silo][remainder];
    bool clean = worker_shared->offered_clean[silo][remainder];
    SpinLockRelease(&worker_shared->mutex);
    // A commit that wrote rows for the handlers since sets the bit: the
    // worker has something to read there again.
    uint64 bit = uint64(1) << (remainder % 64);
    if (clean && *since != 0 && (pg_atomic_read_u64(&worker_shared->written[silo]) & bit) == 0)
        *since = DT_NOEND;
    return running;
}

uint32 worker_claims_ended() {
    return pg_atomic_read_u32(&worker_shared->claims_ended);
}

} // namespace pgoutbox
