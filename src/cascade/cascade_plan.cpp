#include "cascade/cascade_plan.hpp"

#include "pg/saturating.hpp"

#include <algorithm>

namespace pgoutbox {

WatermarkBatch plan_watermark_batch(int64_t stored_low, std::optional<int64_t> min_id,
                                    std::optional<int64_t> max_id, int32_t batch_size) {
    int64_t smallest = min_id.value_or(0) != 0 ? *min_id : 1;
    int64_t low = stored_low != 0 ? stored_low : saturating_sub(smallest, 1);
    int64_t upper = max_id.value_or(0);
    int64_t up = std::min(upper, saturating_add(low, batch_size));
    return WatermarkBatch{low, up, up < upper};
}

} // namespace pgoutbox
