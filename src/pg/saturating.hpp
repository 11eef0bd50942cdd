// Budget and id-span arithmetic that stops at the int64 limits instead of
// wrapping (an id span can be as large as the id type).  Plain C++, for the
// pure planning code (backfill/batch_plan, cascade/cascade_plan) and the
// worker's budget alike.
#pragma once

#include <cstdint>

namespace pgoutbox {

inline int64_t saturating_add(int64_t a, int64_t b) {
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return sum;
}

inline int64_t saturating_sub(int64_t a, int64_t b) {
    int64_t difference;
    if (__builtin_sub_overflow(a, b, &difference))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return difference;
}

} // namespace pgoutbox
