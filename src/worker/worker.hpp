// The background worker (worker.cpp): what the rest of pg_outbox may ask of
// it.  Its shared state is worker/'s alone (worker_shared.hpp).
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

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

// At the commit of a transaction that wrote outbox rows; never raises an
// ERROR (it runs from a commit callback).  Nothing without
// shared_preload_libraries.
void worker_outbox_committed();

// outbox.wake_worker(): a cycle now; false when the worker is not running.
bool worker_wake_for_cycle();

// From _PG_init, while shared_preload_libraries is processed.
void register_worker();

// From the shmem hooks of pg_outbox.cpp (the startup one holds
// AddinShmemInitLock).
void worker_shmem_request();
void worker_shmem_startup();

} // namespace pgoutbox
