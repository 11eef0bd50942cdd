#include "relocation/move/move_machine.hpp"

#include <gtest/gtest.h>
#include <string>
#include <vector>

using namespace pgoutbox::relocation;

namespace {

MoveFacts at(MoveStep step, int64_t rows_done = 0, int64_t rows_total = 100, bool fork = false) {
    MoveFacts f;
    f.step = step;
    f.fork = fork;
    f.chunk_rows = 10;
    f.rows_done = rows_done;
    f.rows_total = rows_total;
    return f;
}

std::string name(MoveStep step) {
    return move_step_name(step);
}

} // namespace

TEST(MoveMachine, NamesEveryStepBothWays) {
    std::vector<std::string> names = {"prepare",  "export", "check",     "copy",          "import",
                                      "catch_up", "fence",  "in_flight", "last_catch_up", "switch",
                                      "drain",    "delete", "done"};
    for (size_t i = 0; i < names.size(); i++) {
        MoveStep step;
        ASSERT_TRUE(parse_move_step(names[i].c_str(), &step)) << names[i];
        EXPECT_EQ(static_cast<size_t>(step), i);
        EXPECT_EQ(name(step), names[i]);
    }
    MoveStep step;
    for (const char *bad : {"", "Prepare", "copy ", "deleted", "lifted"})
        EXPECT_FALSE(parse_move_step(bad, &step)) << bad;
    EXPECT_FALSE(parse_move_step(nullptr, &step));
}

TEST(MoveMachine, AMoveWalksEveryStepInOrder) {
    MoveFacts f = at(MoveStep::Prepare, 0, 0);
    f.chunk_rows = 10;
    std::vector<std::string> seen;
    auto take = [&](const MoveAnswer &a) {
        MoveTransition t = next_move_step(f, a);
        EXPECT_TRUE(t.outcome == MoveOutcome::Next || t.outcome == MoveOutcome::Complete)
            << name(f.step);
        f.step = t.step;
        f.rows_done = t.rows_done;
        f.rows_total = t.rows_total;
        f.checked = t.checked;
        seen.push_back(name(t.step) + (t.fenced ? "*" : ""));
        return t;
    };
    take({});
    MoveAnswer exported;
    exported.rows = 25;
    take(exported);
    take({}); // keys of 100 ordinals checked: all of them
    for (int64_t first : {1, 11, 21}) {
        MoveAnswer chunk;
        chunk.first_row = first;
        chunk.row_count = first == 21 ? 5 : 10;
        take(chunk);
    }
    MoveAnswer importing;
    importing.more = true;
    take(importing);
    take({});
    MoveAnswer changes;
    changes.left = 1; // at most a tenth of a chunk: fence
    take(changes);
    take({}); // fence
    take({}); // in_flight: nothing waiting
    MoveAnswer last;
    last.left = 0;
    last.seqs = 1; // it read one: acknowledged by the next batch
    take(last);
    last.seqs = 0;
    take(last);
    take({}); // switch
    MoveAnswer drained;
    drained.left = 0;
    take(drained);
    MoveAnswer deleting;
    deleting.deleted = 20;
    take(deleting);
    deleting.deleted = 5;
    deleting.done = true;
    MoveTransition end = take(deleting);
    EXPECT_EQ(end.outcome, MoveOutcome::Complete);
    EXPECT_EQ(end.rows_done, 25);
    std::vector<std::string> want = {
        "export",  "check",    "copy",    "copy",       "copy",           "import",
        "import",  "catch_up", "fence",   "in_flight*", "last_catch_up*", "last_catch_up*",
        "switch*", "drain*",   "delete*", "delete*",    "done*"};
    EXPECT_EQ(seen, want);
}

TEST(MoveMachine, AForkCopiesImportsAndEnds) {
    MoveAnswer exported;
    exported.rows = 7;
    MoveTransition t = next_move_step(at(MoveStep::Export, 0, 0, true), exported);
    EXPECT_EQ(t.step, MoveStep::Copy); // no check: new keys
    EXPECT_EQ(t.rows_total, 7);
    MoveTransition end = next_move_step(at(MoveStep::Import, 7, 7, true), {});
    EXPECT_EQ(end.outcome, MoveOutcome::Complete);
    EXPECT_EQ(end.step, MoveStep::Done);
    EXPECT_FALSE(end.fenced);
    for (MoveStep step : {MoveStep::Check, MoveStep::CatchUp, MoveStep::LastCatchUp})
        EXPECT_EQ(next_move_step(at(step, 7, 7, true), {}).outcome, MoveOutcome::ProtocolViolation)
            << name(step);
}

TEST(MoveMachine, WaitsWhereTheSourceWaits) {
    MoveAnswer waiting;
    waiting.waiting = true;
    for (MoveStep step : {MoveStep::Export, MoveStep::InFlight}) {
        MoveTransition t = next_move_step(at(step), waiting);
        EXPECT_EQ(t.outcome, MoveOutcome::Wait) << name(step);
        EXPECT_EQ(t.step, step);
    }
    MoveAnswer undrained;
    undrained.left = 3;
    MoveTransition t = next_move_step(at(MoveStep::Drain), undrained);
    EXPECT_EQ(t.outcome, MoveOutcome::Wait);
    EXPECT_EQ(t.step, MoveStep::Drain);
    EXPECT_TRUE(t.fenced);
}

TEST(MoveMachine, ATakenKeyFailsTheCheckWhereItIs) {
    MoveAnswer taken;
    taken.taken = true;
    MoveFacts f = at(MoveStep::Check);
    f.checked = 100;
    f.rows_total = 1000;
    MoveTransition t = next_move_step(f, taken);
    EXPECT_EQ(t.outcome, MoveOutcome::Failed);
    EXPECT_EQ(t.step, MoveStep::Check);
    EXPECT_EQ(t.checked, 100); // resumed, the page is asked again
    MoveTransition page = next_move_step(f, {});
    EXPECT_EQ(page.step, MoveStep::Check);
    EXPECT_EQ(page.checked, 200);
}

TEST(MoveMachine, RefusesAnswersAStepCannotGive) {
    struct Case {
        MoveStep step;
        MoveAnswer answer;
        const char *why;
    };
    MoveAnswer none;
    MoveAnswer empty_chunk;
    empty_chunk.first_row = 1;
    empty_chunk.row_count = 0;
    MoveAnswer skipped;
    skipped.first_row = 12; // rows 11 staged: 12 skips one
    skipped.row_count = 10;
    MoveAnswer again;
    again.first_row = 1; // a chunk already staged
    again.row_count = 10;
    MoveAnswer nothing_exported;
    nothing_exported.rows = 0;
    MoveAnswer bad_changes;
    bad_changes.left = -5;
    MoveAnswer bad_delete;
    bad_delete.deleted = -1;
    std::vector<Case> cases = {
        {MoveStep::Export, none, "no row count"},
        {MoveStep::Export, nothing_exported, "an export without its root"},
        {MoveStep::Copy, none, "no chunk"},
        {MoveStep::Copy, empty_chunk, "an empty chunk"},
        {MoveStep::Copy, skipped, "a chunk that skips a row"},
        {MoveStep::Copy, again, "a chunk from before"},
        {MoveStep::CatchUp, none, "no count of changes left"},
        {MoveStep::LastCatchUp, bad_changes, "a negative count"},
        {MoveStep::Drain, none, "no count of messages left"},
        {MoveStep::Delete, bad_delete, "a negative count of rows deleted"},
    };
    for (const Case &c : cases) {
        MoveTransition t = next_move_step(at(c.step, 10), c.answer);
        EXPECT_EQ(t.outcome, MoveOutcome::ProtocolViolation) << name(c.step) << ": " << c.why;
        EXPECT_EQ(t.step, c.step) << c.why;
        EXPECT_EQ(t.rows_done, 10) << c.why;
    }
}

TEST(MoveMachine, AStepTakenTwiceAfterALostAnswerGoesTheSameWay) {
    // Each step's operations in the cells are idempotent; control, which
    // lost the answer, asks again from the same record and gets the same
    // answer, and so the same transition.
    MoveAnswer chunk;
    chunk.first_row = 11;
    chunk.row_count = 10;
    MoveTransition once = next_move_step(at(MoveStep::Copy, 10), chunk);
    MoveTransition twice = next_move_step(at(MoveStep::Copy, 10), chunk);
    EXPECT_EQ(once.rows_done, 20);
    EXPECT_EQ(twice.rows_done, once.rows_done);
    EXPECT_EQ(twice.step, once.step);
}

TEST(MoveMachine, TheCatchUpFencesAtATenthOfAChunk) {
    MoveFacts f = at(MoveStep::CatchUp);
    f.chunk_rows = 1000;
    MoveAnswer a;
    a.left = 101;
    EXPECT_EQ(next_move_step(f, a).step, MoveStep::CatchUp);
    a.left = 100;
    EXPECT_EQ(next_move_step(f, a).step, MoveStep::Fence);
    f.chunk_rows = 5; // at least one
    a.left = 1;
    EXPECT_EQ(next_move_step(f, a).step, MoveStep::Fence);
    a.left = 2;
    EXPECT_EQ(next_move_step(f, a).step, MoveStep::CatchUp);
}

TEST(MoveMachine, TheDrainStartsTheDeleteCount) {
    MoveAnswer drained;
    drained.left = 0;
    MoveTransition t = next_move_step(at(MoveStep::Drain, 100, 100), drained);
    EXPECT_EQ(t.step, MoveStep::Delete);
    EXPECT_EQ(t.rows_done, 0);
}
