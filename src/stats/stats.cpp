#include "stats/stats.hpp"
#include "pg/guard.hpp"

#include "settings.hpp"
#include "stats/lag_histogram.hpp"

extern "C" {
#include "common/hashfn.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace pgoutbox {

namespace {

// Slots for (database, category) pairs, all databases together.  Sentry has
// a few dozen categories; when every slot is taken, new pairs are not
// counted and stats_untracked() says how many counts were dropped.
constexpr int stats_slots = 512;

struct Counters {
    int64 saved;
    int64 backfilled;
    int64 backfill_batches;
    int64 delivered;
    int64 processed;
    int64 handler_errors;
    int64 lag_max;
    TimestampTz last_delivery_at;
    TimestampTz since;
    uint64 lag_counts[lag_buckets];
};

// Found by open addressing from hash(dbid, category); never removed (a
// reset zeroes the counters), so probing needs no tombstones.
struct Slot {
    slock_t mutex; // guards counters
    bool used;     // set once, under the exclusive lock
    Oid dbid;
    int32 category;
    Counters counters;
};

struct StatsShared {
    LWLock *lock; // shared: find a slot; exclusive: take one, reset
    slock_t mutex;
    int64 untracked;
    Slot slots[stats_slots];
};

StatsShared *shared = nullptr;

} // namespace

void stats_shmem_request() {
    RequestAddinShmemSpace(MAXALIGN(sizeof(StatsShared)));
    RequestNamedLWLockTranche("pg_outbox stats", 1);
}

void stats_shmem_startup() {
    bool found;
    shared = (StatsShared *)ShmemInitStruct("pg_outbox stats", sizeof(StatsShared), &found);
    if (!found) {
        memset(shared, 0, sizeof(StatsShared));
        shared->lock = &GetNamedLWLockTranche("pg_outbox stats")->lock;
        SpinLockInit(&shared->mutex);
        for (Slot &slot : shared->slots)
            SpinLockInit(&slot.mutex);
    }
}

namespace {

// The slot of (this database, category), taken if need be; NULL when all
// are taken.  Never raises an ERROR: it runs in commit callbacks.
uint32 first_slot(Oid dbid, int32 category) {
    return hash_combine(hash_uint32(dbid), hash_uint32((uint32)category)) % (uint32)stats_slots;
}

Slot *find_slot(int32 category, bool take) {
    uint32 start = first_slot(MyDatabaseId, category);
    for (int i = 0; i < stats_slots; i++) {
        Slot *slot = &shared->slots[(start + i) % stats_slots];
        if (!slot->used) {
            if (!take)
                return nullptr;
            // A slot freed by stats_reset() still holds its old counters.
            memset(&slot->counters, 0, sizeof(Counters));
            slot->used = true;
            slot->dbid = MyDatabaseId;
            slot->category = category;
            slot->counters.since = GetCurrentTimestamp();
            return slot;
        }
        if (slot->dbid == MyDatabaseId && slot->category == category)
            return slot;
    }
    return nullptr;
}

// Adds to a category's counters: fn(Counters *) under the slot's spinlock.
template <typename Fn> void update(int32 category, Fn fn) {
    LWLockAcquire(shared->lock, LW_SHARED);
    Slot *slot = find_slot(category, false);
    if (slot == nullptr) {
        LWLockRelease(shared->lock);
        LWLockAcquire(shared->lock, LW_EXCLUSIVE);
        slot = find_slot(category, true);
    }
    if (slot != nullptr) {
        SpinLockAcquire(&slot->mutex);
        fn(&slot->counters);
        SpinLockRelease(&slot->mutex);
    } else {
        SpinLockAcquire(&shared->mutex);
        shared->untracked++;
        SpinLockRelease(&shared->mutex);
    }
    LWLockRelease(shared->lock);
}

// Counts of this transaction not yet added, per subtransaction and category.
struct Pending {
    SubTransactionId subxact;
    int32 category;
    int64 saved;
    int64 backfilled;
    int64 backfill_batches;
    int64 processed;
};

Pending *pending = nullptr; // in TopMemoryContext
int npending = 0;
int pending_capacity = 0;
bool callbacks_registered = false;

void flush_pending() {
    for (int i = 0; i < npending; i++) {
        const Pending &p = pending[i];
        update(p.category, [&p](Counters *c) {
            c->saved += p.saved;
            c->backfilled += p.backfilled;
            c->backfill_batches += p.backfill_batches;
            c->processed += p.processed;
        });
    }
    npending = 0;
}

// Runs at commit: must not raise an ERROR (update() does not).
void on_xact(XactEvent event, void *) {
    pg::forget_abandoned_frames();
    switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PREPARE:
        flush_pending();
        break;
    case XACT_EVENT_ABORT:
        npending = 0;
        break;
    default:
        break;
    }
}

void on_subxact(SubXactEvent event, SubTransactionId subxact, SubTransactionId parent, void *) {
    pg::forget_abandoned_frames();
    if (event == SUBXACT_EVENT_ABORT_SUB) {
        int kept = 0;
        for (int i = 0; i < npending; i++)
            if (pending[i].subxact < subxact)
                pending[kept++] = pending[i];
        npending = kept;
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
        // Into the parent, merged with its counts of the same category, so
        // that a loop of many subtransactions keeps one entry per category.
        int kept = 0;
        for (int i = 0; i < npending; i++) {
            Pending p = pending[i];
            if (p.subxact >= subxact)
                p.subxact = parent;
            int j = kept - 1;
            while (j >= 0 &&
                   !(pending[j].subxact == p.subxact && pending[j].category == p.category))
                j--;
            if (j < 0) {
                pending[kept++] = p;
                continue;
            }
            pending[j].saved += p.saved;
            pending[j].backfilled += p.backfilled;
            pending[j].backfill_batches += p.backfill_batches;
            pending[j].processed += p.processed;
        }
        npending = kept;
    }
}

Pending *pending_for(int32 category) {
    SubTransactionId subxact = GetCurrentSubTransactionId();
    // The latest entries are the likeliest: scan from the end.
    for (int i = npending - 1; i >= 0; i--)
        if (pending[i].subxact == subxact && pending[i].category == category)
            return &pending[i];
    if (!callbacks_registered) {
        RegisterXactCallback(on_xact, nullptr);
        RegisterSubXactCallback(on_subxact, nullptr);
        callbacks_registered = true;
    }
    if (npending == pending_capacity) {
        int capacity = Max(pending_capacity * 2, 16);
        pending = pending == nullptr
                      ? (Pending *)MemoryContextAlloc(TopMemoryContext, sizeof(Pending) * capacity)
                      : (Pending *)repalloc(pending, sizeof(Pending) * capacity);
        pending_capacity = capacity;
    }
    Pending *p = &pending[npending++];
    *p = Pending{subxact, category, 0, 0, 0, 0};
    return p;
}

int compare_int32(const void *a, const void *b) {
    int32 x = *(const int32 *)a;
    int32 y = *(const int32 *)b;
    return (x > y) - (x < y);
}

} // namespace

bool stats_available() {
    return shared != nullptr;
}

void stats_count_saved(int32 category, int64 rows) {
    if (shared != nullptr && rows > 0)
        pending_for(category)->saved += rows;
}

void stats_count_backfill(int32 category, int64 rows) {
    if (shared == nullptr)
        return;
    Pending *p = pending_for(category);
    p->backfilled += rows;
    p->backfill_batches++;
}

void stats_count_processed(int32 category, int64 rows) {
    if (shared != nullptr && rows > 0)
        pending_for(category)->processed += rows;
}

void stats_count_delivered(int32 category, TimestampTz oldest_added, TimestampTz delivered_at) {
    if (shared == nullptr)
        return;
    int64 lag = Max(delivered_at - oldest_added, 0);
    int bucket = lag_bucket(lag);
    update(category, [&](Counters *c) {
        c->delivered++;
        c->lag_max = Max(c->lag_max, lag);
        c->lag_counts[bucket]++;
        c->last_delivery_at = Max(c->last_delivery_at, delivered_at);
    });
}

void stats_count_handler_error(int32 category) {
    if (shared != nullptr)
        update(category, [](Counters *c) { c->handler_errors++; });
}

int stats_read(CategoryStats **rows) {
    *rows = (CategoryStats *)palloc(sizeof(CategoryStats) * stats_slots);
    int n = 0;
    auto *copy = (Counters *)palloc(sizeof(Counters));
    LWLockAcquire(shared->lock, LW_SHARED);
    for (Slot &slot : shared->slots) {
        if (!slot.used || slot.dbid != MyDatabaseId)
            continue;
        SpinLockAcquire(&slot.mutex);
        *copy = slot.counters;
        SpinLockRelease(&slot.mutex);
        CategoryStats *row = &(*rows)[n++];
        row->category = slot.category;
        row->saved = copy->saved;
        row->backfilled = copy->backfilled;
        row->backfill_batches = copy->backfill_batches;
        row->delivered = copy->delivered;
        row->processed = copy->processed;
        row->handler_errors = copy->handler_errors;
        row->lag_p50 = lag_quantile(copy->lag_counts, copy->lag_max, 0.5);
        row->lag_p99 = lag_quantile(copy->lag_counts, copy->lag_max, 0.99);
        row->lag_max = copy->delivered > 0 ? copy->lag_max : -1;
        row->last_delivery_at = copy->last_delivery_at;
        row->since = copy->since;
    }
    LWLockRelease(shared->lock);
    pfree(copy);
    return n;
}

void stats_reset(int32 *keep, int nkeep) {
    qsort(keep, nkeep, sizeof(int32), compare_int32);
    TimestampTz now = GetCurrentTimestamp();
    // Forgetting a slot breaks the probe chains through it: the slots are
    // laid out again, so allocate before taking the lock.
    auto *kept = (Slot *)palloc(sizeof(Slot) * stats_slots);
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    int nkept = 0;
    for (Slot &slot : shared->slots) {
        if (!slot.used)
            continue;
        if (slot.dbid == MyDatabaseId) {
            int32 category = slot.category;
            if (bsearch(&category, keep, nkeep, sizeof(int32), compare_int32) == nullptr)
                continue;
            memset(&slot.counters, 0, sizeof(Counters));
            slot.counters.since = now;
        }
        kept[nkept++] = slot;
    }
    for (Slot &slot : shared->slots)
        slot.used = false;
    for (int i = 0; i < nkept; i++) {
        uint32 start = first_slot(kept[i].dbid, kept[i].category);
        for (int j = 0; j < stats_slots; j++) {
            Slot *slot = &shared->slots[(start + j) % stats_slots];
            if (!slot->used) {
                slot->used = true;
                slot->dbid = kept[i].dbid;
                slot->category = kept[i].category;
                slot->counters = kept[i].counters;
                break;
            }
        }
    }
    LWLockRelease(shared->lock);
    pfree(kept);
}

int64 stats_untracked() {
    SpinLockAcquire(&shared->mutex);
    int64 untracked = shared->untracked;
    SpinLockRelease(&shared->mutex);
    return untracked;
}

} // namespace pgoutbox
