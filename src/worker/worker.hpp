// The background worker's shared state (worker.cpp).
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "storage/latch.h"
#include "storage/spin.h"
}

namespace pgoutbox {

struct WorkerShared {
    slock_t mutex;
    pid_t pid;    // 0 until the worker has started
    Latch *latch; // set to wake it
    TimestampTz last_cycle_start;
    TimestampTz last_cycle_end;
    int64 shards_drained;
    int64 messages_delivered;
    int64 rows_scheduled;
    int64 rows_backfilled;
    int64 backfill_budget_left;
    bool backfill_paused;      // the cursor store (Redis) failed: retrying
    TimestampTz last_error_at; // 0: none since start or reset
    char last_error[256];
};

// NULL unless pg_outbox is in shared_preload_libraries.  Read and written
// by worker/ only; others go through the functions below.
extern WorkerShared *worker_shared;

// Zeroes the worker's totals and forgets its last error
// (outbox.stats_reset()); nothing without shared_preload_libraries.
void worker_reset_totals();

// From _PG_init, while shared_preload_libraries is processed.
void register_worker();

// From the shmem hooks of pg_outbox.cpp (the startup one holds
// AddinShmemInitLock).
void worker_shmem_request();
void worker_shmem_startup();

} // namespace pgoutbox
