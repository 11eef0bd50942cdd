#include "backfill/batch_plan.hpp"

#include <algorithm>
#include <cstdint>

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
    // Nothing can come after the largest bigint: the walk is complete there
    // (Sentry's cursor would be one past it, which a bigint cannot hold).
    plan.has_more = upper > low && upper < INT64_MAX;
    plan.count = saturating_add(saturating_sub(upper, low), 1);
    if (plan.count < 0)
        plan.count = 0;
    plan.next = plan.has_more ? Cursor{upper + 1, version} : Cursor{0, coded_version + 1};
    return plan;
}

} // namespace pgoutbox
