// Backfill batch planning, Sentry's _chunk_processing_batch and the cursor
// arithmetic of process_outbox_backfill_batch, as pure C++ (unit-tested).
// The caller supplies what it reads from the table.
#pragma once

#include "cursor/cursor_value.hpp"
#include "pg/saturating.hpp"

#include <optional>

namespace pgoutbox {

// Steps 1-3 of the plan: where a batch starts, or nullopt when there is
// nothing to do (the cursor's version is past the target: complete, or the
// gate was closed again).  A cursor behind the target restarts at 0.
std::optional<Cursor> batch_start(const Cursor &cursor, int32_t target_version);

// Step 4: never below the table's smallest id (nullopt: empty table).
int64_t clamp_lower(int64_t lower, std::optional<int64_t> min_id);

struct BatchPlan {
    int64_t low;
    int64_t up;
    int32_t version;
    bool has_more;
    int64_t count; // Sentry's count: the id span, max(up - low + 1, 0)
    Cursor next;   // the cursor once the batch has committed
};

// Steps 5-6 and the cursor that follows.  upper is the largest id among the
// first batch_size + 1 rows with id >= low, or 0 when there are none.  Near
// the int64 limits: count saturates, and a batch that reaches the largest
// bigint completes the walk.
BatchPlan finish_plan(int64_t low, int32_t version, int64_t upper, int32_t coded_version);

} // namespace pgoutbox
