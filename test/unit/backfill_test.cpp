#include "backfill/backfill_walk.hpp"
#include "backfill/batch_plan.hpp"
#include "cursor/cursor_value.hpp"

#include <gtest/gtest.h>
#include <vector>

using namespace pgoutbox;

TEST(CursorValue, FormatsLikePythonJsonDumps) {
    EXPECT_EQ(format_cursor({0, 1}), "[0, 1]");
    EXPECT_EQ(format_cursor({1234567890123, 7}), "[1234567890123, 7]");
}

TEST(CursorValue, ParsesWhatSentryAndPgOutboxWrite) {
    EXPECT_EQ(parse_cursor("[0, 1]"), (Cursor{0, 1}));
    EXPECT_EQ(parse_cursor("[17,3]"), (Cursor{17, 3}));
    EXPECT_EQ(parse_cursor(" [ 9223372036854775807 ,\n2147483647 ] "),
              (Cursor{INT64_MAX, INT32_MAX}));
    EXPECT_EQ(parse_cursor("[-5, 0]"), (Cursor{-5, 0}));
    auto round_trip = parse_cursor(format_cursor({42, 10001}));
    EXPECT_EQ(round_trip, (Cursor{42, 10001}));
}

TEST(CursorValue, RejectsAnythingElse) {
    for (const char *bad : {"", "[]", "[1]", "[1, 2, 3]", "[1, 2", "1, 2", "{\"a\": 1}", "[1.5, 2]",
                            "[1, 2e3]", "[\"1\", 2]", "[01, 2]", "[1, 2] x", "[1, 2147483648]",
                            "[99999999999999999999, 1]", "null", "[-, 1]", "[1, true]"})
        EXPECT_FALSE(parse_cursor(bad).has_value()) << bad;
}

TEST(BatchPlan, VersionPastTargetMeansNothingToDo) {
    EXPECT_FALSE(batch_start({0, 4}, 3).has_value());  // complete at coded + 1
    EXPECT_FALSE(batch_start({10, 2}, 0).has_value()); // gate closed again
}

TEST(BatchPlan, NewerVersionResetsCursor) {
    EXPECT_EQ(batch_start({500, 1}, 2), (Cursor{0, 2}));
    EXPECT_EQ(batch_start({500, 2}, 2), (Cursor{500, 2}));
}

TEST(BatchPlan, LowerNeverBelowSmallestId) {
    EXPECT_EQ(clamp_lower(0, 100), 100);
    EXPECT_EQ(clamp_lower(150, 100), 150);
    EXPECT_EQ(clamp_lower(0, std::nullopt), 0);
    EXPECT_EQ(clamp_lower(5, std::nullopt), 5);
}

TEST(BatchPlan, AdvancingBatch) {
    BatchPlan plan = finish_plan(10, 2, 20, 2);
    EXPECT_TRUE(plan.has_more);
    EXPECT_EQ(plan.count, 11);
    EXPECT_EQ(plan.next, (Cursor{21, 2}));
}

TEST(BatchPlan, LastBatchCompletesAtCodedPlusOne) {
    BatchPlan one_row_left = finish_plan(30, 2, 30, 5);
    EXPECT_FALSE(one_row_left.has_more);
    EXPECT_EQ(one_row_left.count, 1);
    EXPECT_EQ(one_row_left.next, (Cursor{0, 6}));
    BatchPlan nothing_left = finish_plan(31, 2, 0, 5);
    EXPECT_FALSE(nothing_left.has_more);
    EXPECT_EQ(nothing_left.count, 0);
    EXPECT_EQ(nothing_left.next, (Cursor{0, 6}));
}

// Issue 9: ids {1, 2, 9223372036854775807} wrapped the cursor negative and
// the walk never ended.
TEST(BatchPlan, BatchReachingTheLargestBigintCompletes) {
    BatchPlan plan = finish_plan(1, 2, INT64_MAX, 2);
    EXPECT_FALSE(plan.has_more);
    EXPECT_EQ(plan.count, INT64_MAX);
    EXPECT_EQ(plan.next, (Cursor{0, 3}));
}

TEST(BatchPlan, CountSaturatesInsteadOfWrapping) {
    EXPECT_EQ(finish_plan(-5, 1, INT64_MAX - 1, 1).count, INT64_MAX);
    EXPECT_EQ(finish_plan(INT64_MIN, 1, 0, 1).count, INT64_MAX);
    EXPECT_EQ(finish_plan(INT64_MAX, 1, 0, 1).count, 0);
}

TEST(Saturating, StopsAtTheLimits) {
    EXPECT_EQ(saturating_add(INT64_MAX, 1), INT64_MAX);
    EXPECT_EQ(saturating_add(INT64_MIN, -1), INT64_MIN);
    EXPECT_EQ(saturating_add(10, -3), 7);
    EXPECT_EQ(saturating_sub(INT64_MIN, 1), INT64_MIN);
    EXPECT_EQ(saturating_sub(INT64_MAX, -1), INT64_MAX);
    EXPECT_EQ(saturating_sub(10000, 9000), 1000);
}

// The budgeted walk: batch i is asked for what is left of the budget.
TEST(BackfillWalk, EachTableGetsWhatIsLeftUntilTheBudgetIsSpent) {
    std::vector<int32_t> asked;
    WalkTotals totals =
        backfill_walk(4, 1000, [&](int i, int32_t size, int64_t *ids, int64_t *written) {
            asked.push_back(size);
            if (i == 1)
                return BatchOutcome::Nothing;
            *ids = 600;
            *written = 2 * 600;
            return BatchOutcome::Ran;
        });
    EXPECT_EQ(asked, (std::vector<int32_t>{1000, 400, 400}));
    EXPECT_EQ(totals.ids, 1200);
    EXPECT_EQ(totals.rows_written, 2400);
    EXPECT_TRUE(totals.progressed);
}

TEST(BackfillWalk, StopEndsTheWalkAndEmptyBatchesAreNoProgress) {
    int calls = 0;
    WalkTotals stopped = backfill_walk(3, 1000, [&](int, int32_t, int64_t *, int64_t *) {
        calls++;
        return BatchOutcome::Stop;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_FALSE(stopped.progressed);
    WalkTotals empty = backfill_walk(3, 1000, [&](int, int32_t, int64_t *ids, int64_t *) {
        *ids = 0;
        return BatchOutcome::Ran;
    });
    EXPECT_FALSE(empty.progressed);
}

TEST(BackfillWalk, HugeBudgetsAndSpansSaturate) {
    std::vector<int32_t> asked;
    WalkTotals totals =
        backfill_walk(2, INT64_MAX, [&](int, int32_t size, int64_t *ids, int64_t *) {
            asked.push_back(size);
            *ids = INT64_MAX;
            return BatchOutcome::Ran;
        });
    EXPECT_EQ(asked, (std::vector<int32_t>{INT32_MAX}));
    EXPECT_EQ(totals.ids, INT64_MAX);
}

TEST(WatermarkValue, FormatsLikePythonJsonDumpsAndReadsItBack) {
    EXPECT_EQ(format_watermark({0, "ab12"}), "[0, \"ab12\"]");
    EXPECT_EQ(parse_watermark("[0, \"ab12\"]"), (Watermark{0, "ab12"}));
    EXPECT_EQ(parse_watermark(" [ 500 ,\"f\" ] "), (Watermark{500, "f"}));
    EXPECT_EQ(parse_watermark(format_watermark({INT64_MAX, "x"})), (Watermark{INT64_MAX, "x"}));
}

TEST(WatermarkValue, RejectsAnythingElse) {
    for (const char *bad :
         {"", "[]", "[1]", "[1, 2]", "[\"a\", 1]", "[1, \"a\", 3]", "[1, \"a\"", "[1, \"a\\\"b\"]",
          "[1, \"\xc3\xa9\"]", "[1.5, \"a\"]", "null", "[1, \"a\"] x", "[1, \"a\nb\"]"})
        EXPECT_FALSE(parse_watermark(bad).has_value()) << bad;
}
