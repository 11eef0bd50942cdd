#include "backfill/batch_plan.hpp"

#include <algorithm>

namespace pgoutbox {

std::optional<Cursor> batch_start(const Cursor &cursor, int32_t target_version) {
    if (cursor.version > target_version)
        return std::nullopt;
    if (cursor.version < target_version)
        return Cursor{0, target_version};
    return cursor;
}

int64_t clamp_lower(int64_t lower, std::optional<int64_t> min_id) {
    return std::max(min_id.value_or(0), lower);
}

BatchPlan finish_plan(int64_t low, int32_t version, int64_t upper, int32_t coded_version) {
    BatchPlan plan;
    plan.low = low;
    plan.up = upper;
    plan.version = version;
    plan.has_more = upper > low;
    plan.count = std::max<int64_t>(upper - low + 1, 0);
    plan.next = plan.has_more ? Cursor{upper + 1, version} : Cursor{0, coded_version + 1};
    return plan;
}

int64_t backfill_budget(int64_t max_batch_rate, int64_t scheduled_count) {
    return max_batch_rate - scheduled_count;
}

} // namespace pgoutbox
