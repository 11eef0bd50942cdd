#include "cascade/cascade_plan.hpp"

#include <gtest/gtest.h>

using namespace pgoutbox;

TEST(WatermarkBatch, AnUnsetWatermarkStartsBelowTheSmallestId) {
    WatermarkBatch b = plan_watermark_batch(0, 5, 2000, 500);
    EXPECT_EQ(b.low, 4);
    EXPECT_EQ(b.up, 504);
    EXPECT_TRUE(b.has_more);
    // Python's `or`: a smallest id of 0 counts as unset too.
    EXPECT_EQ(plan_watermark_batch(0, 0, 10, 500).low, 0);
}

TEST(WatermarkBatch, ContinuesFromTheStoredLowAndEndsAtTheLargestId) {
    WatermarkBatch b = plan_watermark_batch(1800, 5, 2000, 500);
    EXPECT_EQ(b.low, 1800);
    EXPECT_EQ(b.up, 2000);
    EXPECT_FALSE(b.has_more);
}

TEST(WatermarkBatch, NoWorkWhenNothingIsAboveTheWatermark) {
    WatermarkBatch done = plan_watermark_batch(2000, 5, 2000, 500);
    EXPECT_GE(done.low, done.up);
    EXPECT_FALSE(done.has_more);
    WatermarkBatch empty = plan_watermark_batch(0, std::nullopt, std::nullopt, 500);
    EXPECT_EQ(empty.low, 0);
    EXPECT_EQ(empty.up, 0);
    EXPECT_FALSE(empty.has_more);
}

TEST(WatermarkBatch, BatchOfOne) {
    WatermarkBatch b = plan_watermark_batch(0, 1, 3, 1);
    EXPECT_EQ(b.low, 0);
    EXPECT_EQ(b.up, 1);
    EXPECT_TRUE(b.has_more);
}

TEST(WatermarkBatch, SaturatesAtTheInt64Limits) {
    WatermarkBatch high = plan_watermark_batch(INT64_MAX - 10, 1, INT64_MAX, 500);
    EXPECT_EQ(high.up, INT64_MAX);
    EXPECT_FALSE(high.has_more);
    WatermarkBatch low = plan_watermark_batch(0, INT64_MIN, 0, 500);
    EXPECT_EQ(low.low, INT64_MIN);
}
