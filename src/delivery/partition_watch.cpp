// The worker's knowledge of the outbox partitions (partition_watch.hpp).
#include "delivery/partition_watch.hpp"

#include "worker_state/worker_state.hpp"

namespace pgoutbox {

namespace {

struct PartitionState {
    Oid relid;  // what was read: a partition made again is unknown
    bool known; // false: never read, or its last read did not finish
    TimestampTz read_again_at;
    int retries; // reads in a row that left something behind
};

constexpr int quick_retries = 3;

PartitionState *states[2] = {nullptr, nullptr};
int nstates[2] = {0, 0};
// The handlers the states were learnt with; -1: none yet.
int32 *handlers = nullptr;
int nhandlers = -1;
uint32 handler_changes_seen = 0;

void forget_all() {
    for (int silo = 0; silo < 2; silo++)
        for (int r = 0; r < nstates[silo]; r++)
            states[silo][r].known = false;
}

// A new handler may take rows a read left; a removed one leaves nothing
// behind, but its rows then stay for a reason the states do not record.
// Every partition is read again, by passes woken for it too.
void check_handlers(const Registry *registry) {
    if (nhandlers == registry->nhandlers &&
        (nhandlers == 0 ||
         memcmp(handlers, registry->handler_categories, sizeof(int32) * nhandlers) == 0))
        return;
    forget_all();
    if (nhandlers >= 0) {
        pg_atomic_fetch_or_u64(&worker_shared->written[0], ~uint64(0));
        pg_atomic_fetch_or_u64(&worker_shared->written[1], ~uint64(0));
    }
    if (handlers != nullptr)
        pfree(handlers);
    handlers =
        (int32 *)MemoryContextAlloc(TopMemoryContext, sizeof(int32) * Max(registry->nhandlers, 1));
    if (registry->nhandlers > 0)
        memcpy(handlers, registry->handler_categories, sizeof(int32) * registry->nhandlers);
    nhandlers = registry->nhandlers;
}

PartitionState *state_of(const Registry *registry, int silo, int remainder) {
    int n = (silo == 0 ? registry->cell_outbox : registry->control_outbox).nremainders;
    if (n != nstates[silo]) { // first use, or the outbox was made again
        if (states[silo] != nullptr)
            pfree(states[silo]);
        states[silo] = (PartitionState *)MemoryContextAllocZero(TopMemoryContext,
                                                                sizeof(PartitionState) * Max(n, 1));
        nstates[silo] = n;
    }
    return &states[silo][remainder];
}

} // namespace

bool partition_watch_wants(PassScope scope, const Registry *registry, int silo, int remainder,
                           Oid relid, TimestampTz now, uint64 taken[2]) {
    if (scope == PassScope::Unwatched)
        return true;
    check_handlers(registry);
    PartitionState *state = state_of(registry, silo, remainder);
    // Taken before the read's snapshot: a commit before this is in it, one
    // after sets the bit again.
    uint64 bit = uint64(1) << (remainder % 64);
    uint64 written = pg_atomic_read_u64(&worker_shared->written[silo]);
    // Bits of no partition (outbox._drain_soon() sets them all) would
    // keep waking the worker for nothing.
    uint64 partitions = nstates[silo] >= 64 ? ~uint64(0) : (uint64(1) << nstates[silo]) - 1;
    if ((written & ~partitions) != 0)
        pg_atomic_fetch_and_u64(&worker_shared->written[silo], partitions);
    if ((written & bit) != 0) {
        pg_atomic_fetch_and_u64(&worker_shared->written[silo], ~bit);
        taken[silo] |= bit;
    }
    bool wanted = (taken[silo] & bit) != 0 || scope == PassScope::All ||
                  (scope == PassScope::Due &&
                   (!state->known || state->relid != relid || now >= state->read_again_at));
    if (wanted)
        state->known = false; // until the read and its batches are over
    return wanted;
}

void partition_watch_read(int silo, int remainder, Oid relid, TimestampTz read_again_at,
                          bool left_behind) {
    if (remainder >= nstates[silo])
        return;
    PartitionState *state = &states[silo][remainder];
    state->relid = relid;
    state->known = true;
    state->read_again_at = read_again_at;
    state->retries = left_behind ? state->retries + 1 : 0;
    if (left_behind && state->retries <= quick_retries)
        pg_atomic_fetch_or_u64(&worker_shared->written[silo], uint64(1) << (remainder % 64));
}

bool partition_watch_handlers_changed() {
    uint32 changes = pg_atomic_read_u32(&worker_shared->handlers_changed);
    if (changes == handler_changes_seen)
        return false;
    handler_changes_seen = changes;
    return true;
}

bool partition_watch_written(bool cell, bool control) {
    return worker_shared != nullptr &&
           ((cell && pg_atomic_read_u64(&worker_shared->written[0]) != 0) ||
            (control && pg_atomic_read_u64(&worker_shared->written[1]) != 0));
}

} // namespace pgoutbox
