// Delivery lag histogram: pure C++, unit-tested (test/unit/lag_histogram_test.cpp).
//
// Lags are counted in buckets with HdrHistogram's layout: each power of two
// of microseconds is split into lag_sub_buckets equal parts, so a bucket is
// at most 1/lag_sub_buckets (25%) of its lower bound wide, and a quantile
// read at the bucket's middle is within 12.5% of the true value.  A
// histogram is a fixed array, so it lives in shared memory as it is; 160
// buckets cover 0 to 2^41 us (25 days), and anything longer lands in the
// last bucket (quantiles there report the largest lag seen).
#pragma once

#include <cstdint>

namespace pgoutbox {

constexpr int lag_sub_buckets = 4;
constexpr int lag_buckets = 160;

// The bucket of a lag in microseconds (negative lags count as 0).
int lag_bucket(int64_t micros);

// The smallest lag of a bucket, and one more than its largest.
int64_t lag_bucket_low(int bucket);
int64_t lag_bucket_high(int bucket);

// The lag at quantile q (0 < q <= 1) of the counts: the middle of the
// bucket holding the ceil(q * total)-th smallest lag, never above max_seen.
// -1 when the histogram is empty.
int64_t lag_quantile(const uint64_t counts[lag_buckets], int64_t max_seen, double q);

} // namespace pgoutbox
