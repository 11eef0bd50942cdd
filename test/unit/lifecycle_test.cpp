#include "relocation/lifecycle.hpp"

#include <gtest/gtest.h>
#include <string>

using namespace pgoutbox::relocation;

namespace {

LifecycleFacts import_in(const std::string &state) {
    LifecycleFacts f;
    f.kind = RelocationKind::Import;
    f.relocation = "r1";
    f.state = state;
    return f;
}

LifecycleFacts move_at(const std::string &state, const std::string &step,
                       RelocationKind kind = RelocationKind::Move) {
    LifecycleFacts f;
    f.kind = kind;
    f.relocation = "r2";
    f.state = state;
    f.step = step;
    f.organization = 7;
    f.to_cell = "eu";
    return f;
}

} // namespace

TEST(Lifecycle, PausesAnImportOnlyWhileItImports) {
    LifecycleDecision d = decide(import_in("importing"), Operation::Pause);
    EXPECT_FALSE(d.refused);
    EXPECT_EQ(d.state, "paused");
    for (const char *state :
         {"paused", "failed", "imported", "complete", "mismatched", "cancelled"}) {
        d = decide(import_in(state), Operation::Pause);
        EXPECT_TRUE(d.refused) << state;
        EXPECT_EQ(d.sqlstate, "55000");
        EXPECT_EQ(d.message, std::string("relocation r1 is ") + state +
                                 ": only an import under way can be paused");
    }
}

TEST(Lifecycle, PausesAMoveOnlyBeforeItsFence) {
    for (const char *step : {"prepare", "export", "check", "copy", "import", "catch_up"}) {
        for (RelocationKind kind : {RelocationKind::Move, RelocationKind::Fork}) {
            LifecycleDecision d = decide(move_at("moving", step, kind), Operation::Pause);
            EXPECT_FALSE(d.refused) << step;
            EXPECT_EQ(d.state, "paused");
        }
    }
    for (const char *step :
         {"fence", "in_flight", "last_catch_up", "switch", "drain", "delete", "done", "bogus"}) {
        LifecycleDecision d = decide(move_at("moving", step), Operation::Pause);
        EXPECT_TRUE(d.refused) << step;
        EXPECT_EQ(d.sqlstate, "55000");
        EXPECT_EQ(d.message, std::string("relocation r2 is at step ") + step +
                                 ", past its fence: a pause would hold organization 7's writes");
        EXPECT_FALSE(d.hint.empty());
    }
    for (const char *state : {"paused", "failed", "complete", "cancelled"}) {
        LifecycleDecision d = decide(move_at(state, "copy"), Operation::Pause);
        EXPECT_TRUE(d.refused) << state;
        EXPECT_EQ(d.message, std::string("relocation r2 is ") + state +
                                 ": only a move under way can be paused");
    }
}

TEST(Lifecycle, ResumesAPausedOrFailedMove) {
    for (const char *state : {"paused", "failed"}) {
        LifecycleDecision d = decide(move_at(state, "check"), Operation::Resume);
        EXPECT_FALSE(d.refused) << state;
        EXPECT_EQ(d.state, "moving");
    }
    for (const char *state : {"moving", "complete", "cancelled"}) {
        LifecycleDecision d =
            decide(move_at(state, "copy", RelocationKind::Fork), Operation::Resume);
        EXPECT_TRUE(d.refused) << state;
        EXPECT_EQ(d.sqlstate, "55000");
    }
}

TEST(Lifecycle, SendsAnImportsResumeToItsCall) {
    for (const char *state : {"importing", "paused", "failed", "imported"}) {
        LifecycleDecision d = decide(import_in(state), Operation::Resume);
        EXPECT_TRUE(d.refused) << state;
        EXPECT_EQ(d.sqlstate, "22023");
        EXPECT_EQ(d.message, "relocation r1 is an import, which its CALL resumes");
        EXPECT_NE(d.hint.find("CALL outbox.import_organizations"), std::string::npos);
    }
}

TEST(Lifecycle, CancelsUntilTheCutover) {
    for (const char *state :
         {"importing", "paused", "failed", "imported", "complete", "mismatched"}) {
        LifecycleDecision d = decide(import_in(state), Operation::Cancel);
        EXPECT_FALSE(d.refused) << state;
        EXPECT_EQ(d.state, "cancelled");
    }
    for (const char *step : {"prepare", "export", "check", "copy", "import", "catch_up", "fence",
                             "in_flight", "last_catch_up"}) {
        LifecycleDecision d = decide(move_at("moving", step), Operation::Cancel);
        EXPECT_FALSE(d.refused) << step;
        EXPECT_EQ(d.state, "cancelled");
        EXPECT_FALSE(decide(move_at("failed", step), Operation::Cancel).refused);
    }
    for (const char *step : {"switch", "drain", "delete", "done"}) {
        LifecycleDecision d = decide(move_at("moving", step), Operation::Cancel);
        EXPECT_TRUE(d.refused) << step;
        EXPECT_EQ(d.message,
                  "relocation r2 is past its cutover: organization 7 lives in cell eu now");
    }
    LifecycleDecision d = decide(move_at("complete", "done"), Operation::Cancel);
    EXPECT_TRUE(d.refused);
    d = decide(move_at("complete", "done", RelocationKind::Fork), Operation::Cancel);
    EXPECT_TRUE(d.refused);
    EXPECT_EQ(
        d.message,
        "relocation r2 is complete: its copy of organization 7 is an organization of cell eu now");
}

TEST(Lifecycle, CancelsOnce) {
    for (const LifecycleFacts &f : {import_in("cancelled"), move_at("cancelled", "cancelled"),
                                    move_at("cancelled", "copy", RelocationKind::Fork)}) {
        LifecycleDecision d = decide(f, Operation::Cancel);
        EXPECT_TRUE(d.refused);
        EXPECT_EQ(d.sqlstate, "55000");
        EXPECT_EQ(d.message, "relocation " + f.relocation + " is already cancelled");
    }
}
