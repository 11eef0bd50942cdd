// The budgeted walk over the local tables: Sentry's backfill_outboxes_for.
// Each table in turn gets one batch as large as what is left of the budget,
// and a batch's id span counts against it, until the budget is spent or
// every table had its batch.  One walk, three callers:
// outbox.backfill_outboxes_for, outbox.run_replications_sync (walks of
// 1,000 ids until nothing moves) and the background worker (each batch in a
// transaction of its own, against its per-minute budget).  Pure C++
// (unit-tested); backfill_walk.cpp holds the SQL functions.
#pragma once

#include "backfill/batch_plan.hpp"

#include <algorithm>
#include <cstdint>

namespace pgoutbox {

enum class BatchOutcome {
    Ran,     // the batch ran: its id span and rows written are set
    Nothing, // nothing to do for this table now (complete, gate closed, paused)
    Stop,    // stop the walk (the worker: the cursor store is down)
};

struct WalkTotals {
    int64_t ids;          // id spans, saturating (ids can be sparse)
    int64_t rows_written; // outbox rows
    bool progressed;      // some batch covered ids
};

// batch(i, batch_size, &ids, &rows_written) runs the batch of table i.
template <typename Batch> WalkTotals backfill_walk(int ntables, int64_t budget, Batch &&batch) {
    WalkTotals totals = {0, 0, false};
    for (int i = 0; i < ntables && budget > 0; i++) {
        int64_t ids = 0, written = 0;
        BatchOutcome outcome =
            batch(i, (int32_t)std::min<int64_t>(budget, INT32_MAX), &ids, &written);
        if (outcome == BatchOutcome::Stop)
            break;
        if (outcome == BatchOutcome::Nothing)
            continue;
        budget = saturating_sub(budget, ids);
        totals.ids = saturating_add(totals.ids, ids);
        totals.rows_written = saturating_add(totals.rows_written, written);
        totals.progressed = totals.progressed || ids > 0;
    }
    return totals;
}

} // namespace pgoutbox
