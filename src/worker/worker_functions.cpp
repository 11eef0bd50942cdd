// SQL entry points that need the worker: outbox.wake_worker().
#include "pg/guard.hpp"
#include "worker/worker.hpp"

using namespace pgoutbox;

// Wakes the worker for a cycle now; returns whether it is running.
OUTBOX_FUNCTION(wake_worker) {
    if (worker_shared == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("the pg_outbox worker is not available"),
                        errhint("Add pg_outbox to shared_preload_libraries and restart.")));
    SpinLockAcquire(&worker_shared->mutex);
    Latch *latch = worker_shared->latch;
    bool running = worker_shared->pid != 0;
    SpinLockRelease(&worker_shared->mutex);
    if (running && latch != nullptr)
        SetLatch(latch);
    PG_RETURN_BOOL(running);
}
