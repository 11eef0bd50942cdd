#include "stats/lag_histogram.hpp"

#include <cmath>

namespace pgoutbox {

namespace {

constexpr int sub_bits = 2; // log2(lag_sub_buckets)
static_assert(1 << sub_bits == lag_sub_buckets);

int floor_log2(uint64_t v) {
    return 63 - __builtin_clzll(v);
}

} // namespace

// Values below lag_sub_buckets get a bucket each; above, bucket
// (e - 1) * lag_sub_buckets + s for v in [2^e, 2^(e+1)), s its next
// sub_bits bits below the top one.
int lag_bucket(int64_t micros) {
    if (micros < lag_sub_buckets)
        return micros < 0 ? 0 : (int)micros;
    auto v = (uint64_t)micros;
    int e = floor_log2(v);
    int bucket =
        (e - sub_bits + 1) * lag_sub_buckets + (int)((v >> (e - sub_bits)) & (lag_sub_buckets - 1));
    return bucket < lag_buckets ? bucket : lag_buckets - 1;
}

int64_t lag_bucket_low(int bucket) {
    if (bucket < lag_sub_buckets)
        return bucket;
    int e = bucket / lag_sub_buckets + sub_bits - 1;
    int s = bucket % lag_sub_buckets;
    return (int64_t)(lag_sub_buckets + s) << (e - sub_bits);
}

int64_t lag_bucket_high(int bucket) {
    if (bucket < lag_sub_buckets)
        return bucket + 1;
    int e = bucket / lag_sub_buckets + sub_bits - 1;
    return lag_bucket_low(bucket) + ((int64_t)1 << (e - sub_bits));
}

int64_t lag_quantile(const uint64_t counts[lag_buckets], int64_t max_seen, double q) {
    uint64_t total = 0;
    for (int b = 0; b < lag_buckets; b++)
        total += counts[b];
    if (total == 0)
        return -1;
    auto rank = (uint64_t)std::ceil(q * (double)total);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (int b = 0; b < lag_buckets; b++) {
        seen += counts[b];
        if (seen >= rank) {
            if (b == lag_buckets - 1)
                return max_seen;
            int64_t middle = (lag_bucket_low(b) + lag_bucket_high(b)) / 2;
            return middle < max_seen ? middle : max_seen;
        }
    }
    return max_seen;
}

} // namespace pgoutbox
