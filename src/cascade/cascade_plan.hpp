// One batch of a watermark walk of the cross-silo cascade (SPEC section 7,
// Sentry's chunk_watermark_batch).  Pure C++, unit-tested.
#pragma once

#include <cstdint>
#include <optional>

namespace pgoutbox {

struct WatermarkBatch {
    int64_t low; // the batch covers ids in (low, up]
    int64_t up;
    bool has_more; // ids above up remain
};

// low := stored_low, or (min(id) or 1) - 1 (a stored 0 counts as unset, as
// Python's `or` does); upper := max(id) or 0; up := min(upper, low +
// batch_size); has_more := up < upper.  min_id and max_id are nullopt for an
// empty table.  Saturates at the int64 limits.  No work when low >= up.
WatermarkBatch plan_watermark_batch(int64_t stored_low, std::optional<int64_t> min_id,
                                    std::optional<int64_t> max_id, int32_t batch_size);

} // namespace pgoutbox
