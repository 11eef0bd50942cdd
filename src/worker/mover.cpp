// The background worker "pg_outbox mover": on control (outbox.silo_mode =
// control), it drives the moves of organizations between cells
// (relocation/move/move_step.hpp), one step a transaction, while there is
// one to take.  It is a process of its own, apart from "pg_outbox worker":
// a step calls a cell and waits for its answer up to outbox.link_timeout,
// and control's delivery (its handlers, its links) must not wait with it
// (issue 44: a cell's slow table owner stopped control's delivery for
// 30 s).  Registered with the worker (worker.cpp, register_workers);
// idle elsewhere than on control, and while outbox.worker_enabled is off.
// Woken by outbox.wake_worker() and the functions that start or resume a
// move; otherwise it looks every outbox.naptime.
//
// Plain C-style code: every PostgreSQL error unwinds to the PG_TRY of the
// step it happened in.
#include "relocation/move/move_step.hpp"
#include "worker/worker.hpp"
#include "pg/guard.hpp"
#include "settings.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "pgstat.h"
#include "commands/extension.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"

PGDLLEXPORT void outbox_mover_main(Datum);
}

namespace pgoutbox {

namespace {

// One step of a move in a transaction of its own; whether a move has more
// to do at once.  An ERROR (the step records a cell's in the move itself)
// is logged, and the mover looks again a naptime later.
bool step_moves() {
    MemoryContext context = CurrentMemoryContext;
    volatile bool more = false;
    PG_TRY();
    {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
        SPI_connect();
        PushActiveSnapshot(GetTransactionSnapshot());
        pgstat_report_activity(STATE_RUNNING, "pg_outbox: moving organizations");
        if (hold_extension())
            more = relocation::move_step();
        SPI_finish();
        PopActiveSnapshot();
        CommitTransactionCommand();
    }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        HOLD_INTERRUPTS();
        MemoryContextSwitchTo(context);
        ErrorData *edata = CopyErrorData();
        FlushErrorState();
        AbortOutOfAnyTransaction();
        RESUME_INTERRUPTS();
        ereport(LOG, (errmsg("pg_outbox mover: moving organizations failed: %s", edata->message)));
        FreeErrorData(edata);
        more = false;
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    pgstat_report_activity(STATE_IDLE, nullptr);
    return more;
}

void forget_latch(int, Datum) {
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->mover_latch = nullptr;
    SpinLockRelease(&worker_shared->mutex);
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

void outbox_mover_main(Datum) {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(database_name, nullptr, 0);
    // As the worker's: READ COMMITTED whatever the cluster's default, and
    // its SQL resolves names in pg_catalog first (SPEC section 9).
    SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->mover_latch = MyLatch;
    SpinLockRelease(&worker_shared->mutex);
    before_shmem_exit(forget_latch, 0);

    MemoryContext loop_context =
        AllocSetContextCreate(TopMemoryContext, "pg_outbox mover loop", ALLOCSET_SMALL_SIZES);
    bool more = false;
    for (;;) {
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        more ? 0 : naptime_ms, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        MemoryContextSwitchTo(loop_context);
        MemoryContextReset(loop_context);
        more = worker_enabled && silo_mode == SILO_MODE_CONTROL && step_moves();
        (void)pgstat_report_stat(false);
    }
}
