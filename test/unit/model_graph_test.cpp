#include "relocation/model/model_graph.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace pgoutbox::relocation;

namespace {

struct Order {
    int stuck;
    std::vector<int> order;
    std::vector<bool> deferred;
};

Order plan(int nodes, const std::vector<GraphEdge> &edges, std::vector<bool> member = {}) {
    if (member.empty())
        member.assign(nodes, true);
    bool members[64];
    for (int i = 0; i < nodes; i++)
        members[i] = member[i];
    int order[64], count = 0;
    bool deferred[64] = {};
    int stuck =
        plan_export_order(nodes, edges.data(), int(edges.size()), members, order, &count, deferred);
    return {stuck, std::vector<int>(order, order + count),
            std::vector<bool>(deferred, deferred + edges.size())};
}

int position(const std::vector<int> &order, int node) {
    for (size_t i = 0; i < order.size(); i++)
        if (order[i] == node)
            return int(i);
    return -1;
}

} // namespace

TEST(ExportOrder, ParentsComeFirstAndTiesGoBySmallestIndex) {
    // 0 organization, 1 team -> 0, 2 project -> 0 and 1, 3 member -> 0.
    Order o = plan(4, {{1, 0, false}, {2, 0, false}, {2, 1, true}, {3, 0, false}});
    EXPECT_EQ(o.stuck, -1);
    EXPECT_EQ(o.order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(o.deferred, (std::vector<bool>{false, false, false, false}));
}

TEST(ExportOrder, ANullableSelfReferenceIsDeferred) {
    Order o = plan(2, {{1, 0, false}, {1, 1, true}});
    EXPECT_EQ(o.stuck, -1);
    EXPECT_EQ(o.order, (std::vector<int>{0, 1}));
    EXPECT_EQ(o.deferred, (std::vector<bool>{false, true}));
}

TEST(ExportOrder, ACycleIsBrokenAtItsNullableEdge) {
    // 1 -> 2 NOT NULL, 2 -> 1 nullable: 2 is written first, its column later.
    Order o = plan(3, {{1, 0, false}, {1, 2, false}, {2, 1, true}});
    EXPECT_EQ(o.stuck, -1);
    EXPECT_EQ(o.order, (std::vector<int>{0, 2, 1}));
    EXPECT_EQ(o.deferred, (std::vector<bool>{false, false, true}));
}

TEST(ExportOrder, ACycleOfNotNullEdgesCannotBeOrdered) {
    Order o = plan(3, {{1, 0, false}, {1, 2, false}, {2, 1, false}});
    EXPECT_TRUE(o.stuck == 1 || o.stuck == 2);
    Order self = plan(1, {{0, 0, false}});
    EXPECT_EQ(self.stuck, 0);
}

TEST(ExportOrder, EdgesLeavingTheMembersAreIgnored) {
    // 1 refers to 2, which is not exported (a Global table): no wait for it.
    Order o = plan(3, {{1, 2, false}, {1, 0, false}}, {true, true, false});
    EXPECT_EQ(o.stuck, -1);
    EXPECT_EQ(o.order, (std::vector<int>{0, 1}));
}

TEST(ExportOrder, ALongChainNeedsNoDeepRecursion) {
    const int n = 50;
    std::vector<GraphEdge> chain;
    for (int i = 1; i < n; i++)
        chain.push_back({i - 1, i, false}); // each refers to the next
    Order o = plan(n, chain);
    EXPECT_EQ(o.stuck, -1);
    EXPECT_EQ(position(o.order, n - 1), 0);
    EXPECT_EQ(position(o.order, 0), n - 1);
}

TEST(ReachRoot, NullableOnlyPathsAreTold) {
    // 1 -> 0 NOT NULL; 2 -> 1 nullable; 3 reaches nothing; 4 -> 2 NOT NULL.
    std::vector<GraphEdge> e{{1, 0, false}, {2, 1, true}, {4, 2, false}};
    bool member[5] = {true, true, true, true, true}, any[5], not_null[5];
    reach_root(5, e.data(), int(e.size()), member, 0, any, not_null);
    EXPECT_TRUE(any[0] && any[1] && any[2] && any[4]);
    EXPECT_FALSE(any[3]);
    EXPECT_TRUE(not_null[0] && not_null[1]);
    EXPECT_FALSE(not_null[2] || not_null[3] || not_null[4]);
    // Through a table that is not a member, nothing is reached.
    member[1] = false;
    reach_root(5, e.data(), int(e.size()), member, 0, any, not_null);
    EXPECT_FALSE(any[2] || any[4]);
}

TEST(NotNullCycles, OnlyCyclesWithoutANullableEdge) {
    std::vector<GraphEdge> e{{0, 1, false}, {1, 0, true}, {2, 3, false},
                             {3, 2, false}, {4, 4, true}, {5, 5, false}};
    bool member[6] = {true, true, true, true, true, true}, cycle[6];
    not_null_cycles(6, e.data(), int(e.size()), member, cycle);
    EXPECT_FALSE(cycle[0] || cycle[1] || cycle[4]);
    EXPECT_TRUE(cycle[2] && cycle[3] && cycle[5]);
}
