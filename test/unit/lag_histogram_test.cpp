#include "stats/lag_histogram.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace pgoutbox;

TEST(LagHistogram, BucketsTileTheRangeInOrder) {
    EXPECT_EQ(lag_bucket_low(0), 0);
    for (int b = 0; b + 1 < lag_buckets; b++) {
        EXPECT_EQ(lag_bucket_high(b), lag_bucket_low(b + 1)) << "bucket " << b;
        EXPECT_LT(lag_bucket_low(b), lag_bucket_high(b));
        EXPECT_EQ(lag_bucket(lag_bucket_low(b)), b);
        EXPECT_EQ(lag_bucket(lag_bucket_high(b) - 1), b);
    }
}

TEST(LagHistogram, BucketsAreAtMostAQuarterWide) {
    for (int b = lag_sub_buckets; b < lag_buckets; b++)
        EXPECT_LE(4 * (lag_bucket_high(b) - lag_bucket_low(b)), lag_bucket_low(b)) << b;
}

TEST(LagHistogram, SmallNegativeAndHugeLags) {
    EXPECT_EQ(lag_bucket(-5), 0);
    EXPECT_EQ(lag_bucket(3), 3);
    EXPECT_EQ(lag_bucket(4), 4);
    EXPECT_EQ(lag_bucket(1000000), lag_bucket(1000001));
    EXPECT_EQ(lag_bucket(INT64_MAX), lag_buckets - 1);
    EXPECT_GT(lag_bucket_low(lag_buckets - 1), int64_t(20) * 86400 * 1000000); // 20 days
}

TEST(LagHistogram, EmptyHistogramHasNoQuantile) {
    uint64_t counts[lag_buckets] = {};
    EXPECT_EQ(lag_quantile(counts, 0, 0.5), -1);
}

TEST(LagHistogram, QuantilesWithinAnEighthOfTheTruth) {
    // 1..100,000 us, one lag each: the exact p50 is 50,000 and p99 99,000.
    uint64_t counts[lag_buckets] = {};
    for (int64_t v = 1; v <= 100000; v++)
        counts[lag_bucket(v)]++;
    for (double q : {0.5, 0.9, 0.99}) {
        double exact = q * 100000;
        auto got = (double)lag_quantile(counts, 100000, q);
        EXPECT_NEAR(got, exact, exact / 8) << "q=" << q;
    }
    EXPECT_EQ(lag_quantile(counts, 100000, 1.0), 100000); // capped at the max seen
}

TEST(LagHistogram, QuantileNeverAboveTheLargestLag) {
    uint64_t counts[lag_buckets] = {};
    counts[lag_bucket(900)] = 3; // 900 us lies low in [896, 1024)
    EXPECT_EQ(lag_quantile(counts, 900, 0.99), 900);
    counts[lag_buckets - 1] = 1;
    EXPECT_EQ(lag_quantile(counts, int64_t(1) << 50, 1.0), int64_t(1) << 50);
}

TEST(LagHistogram, SkewedDistribution) {
    // 98 fast deliveries (2 ms) and 2 slow ones (5 s): p50 is fast, p99 slow.
    uint64_t counts[lag_buckets] = {};
    counts[lag_bucket(2000)] += 98;
    counts[lag_bucket(5000000)] += 2;
    EXPECT_NEAR((double)lag_quantile(counts, 5000000, 0.5), 2000, 250);
    EXPECT_NEAR((double)lag_quantile(counts, 5000000, 0.99), 5000000, 625000);
}
