#include "relocation/move/peer_protocol.hpp"

#include <gtest/gtest.h>
#include <string>
#include <vector>

using namespace pgoutbox::relocation;

namespace {

void expect_side(const std::vector<std::string> &names, PeerSide side) {
    for (const std::string &name : names) {
        const PeerOperation *operation = find_peer_operation(name.c_str());
        ASSERT_NE(operation, nullptr) << name;
        EXPECT_EQ(operation->name, name);
        EXPECT_EQ(operation->side, side) << name;
        std::string answer = operation->answer;
        // A side's operation answers from the move's row (o), which the
        // entry locks first; the others have no row to read.
        EXPECT_EQ(answer.find("(o") != std::string::npos || answer.find("o.") != std::string::npos,
                  side != PeerSide::Any)
            << name << ": " << answer;
        EXPECT_EQ(answer.find(';'), std::string::npos) << name << ": one expression";
    }
}

} // namespace

TEST(PeerProtocol, EveryOperationOfProtocolOneOnItsSide) {
    expect_side({"prepare", "cancel", "keys", "taken"}, PeerSide::Any);
    expect_side({"export", "chunk", "changes", "fence", "in_flight", "drained", "delete", "finish"},
                PeerSide::Source);
    expect_side({"stage", "import", "apply", "lift", "release"}, PeerSide::Target);
}

TEST(PeerProtocol, NoOtherOperation) {
    for (const char *bad : {"", "Export", "export ", "record", "lifted", "drop", "chunk;"})
        EXPECT_EQ(find_peer_operation(bad), nullptr) << bad;
    EXPECT_EQ(find_peer_operation(nullptr), nullptr);
}

TEST(PeerProtocol, SideNamesAreOrganizationMovesSides) {
    EXPECT_STREQ(peer_side_name(PeerSide::Source), "source");
    EXPECT_STREQ(peer_side_name(PeerSide::Target), "target");
    EXPECT_EQ(peer_side_name(PeerSide::Any), nullptr);
}
