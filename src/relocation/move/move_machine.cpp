#include "relocation/move/move_machine.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace pgoutbox::relocation {

namespace {

const char *const step_names[] = {
    "prepare",   "export",        "check",  "copy",  "import", "catch_up", "fence",
    "in_flight", "last_catch_up", "switch", "drain", "delete", "done",
};

MoveTransition to(const MoveFacts &facts, MoveStep step) {
    MoveTransition t;
    t.step = step;
    t.rows_done = facts.rows_done;
    t.rows_total = facts.rows_total;
    t.checked = facts.checked;
    return t;
}

MoveTransition with(const MoveFacts &facts, MoveOutcome outcome) {
    MoveTransition t = to(facts, facts.step);
    t.outcome = outcome;
    return t;
}

MoveTransition catch_up(const MoveFacts &facts, const MoveAnswer &answer) {
    if (answer.left < 0 || answer.applied < 0 || answer.seqs < 0)
        return with(facts, MoveOutcome::ProtocolViolation);
    // Few enough left to fence: the last catch-up, under the fence, is
    // short.  It ends when the source's log holds nothing and this batch
    // acknowledged the last one it read.
    if (facts.step == MoveStep::CatchUp)
        return to(facts, answer.left <= std::max<int64_t>(facts.chunk_rows / 10, 1)
                             ? MoveStep::Fence
                             : MoveStep::CatchUp);
    return to(facts,
              answer.left == 0 && answer.seqs == 0 ? MoveStep::Switch : MoveStep::LastCatchUp);
}

MoveTransition copy(const MoveFacts &facts, const MoveAnswer &answer) {
    // A chunk starts where the target's staging ends: one sent again after
    // a lost answer is recognised there by its ordinals.
    if (answer.row_count <= 0 || answer.first_row != facts.rows_done + 1)
        return with(facts, MoveOutcome::ProtocolViolation);
    MoveTransition t = to(facts, MoveStep::Copy);
    t.rows_done = facts.rows_done + answer.row_count;
    if (t.rows_done >= facts.rows_total)
        t.step = MoveStep::Import;
    return t;
}

MoveTransition step_once(const MoveFacts &facts, const MoveAnswer &answer) {
    switch (facts.step) {
    case MoveStep::Prepare:
        return to(facts, MoveStep::Export);
    case MoveStep::Export: {
        if (answer.waiting)
            return with(facts, MoveOutcome::Wait);
        if (answer.rows <= 0)
            return with(facts, MoveOutcome::ProtocolViolation);
        MoveTransition t = to(facts, facts.fork ? MoveStep::Copy : MoveStep::Check);
        t.rows_total = answer.rows;
        return t;
    }
    case MoveStep::Check: {
        if (facts.fork)
            return with(facts, MoveOutcome::ProtocolViolation);
        if (answer.taken)
            return with(facts, MoveOutcome::Failed);
        // Ten chunks' keys a page.
        MoveTransition t = to(facts, MoveStep::Check);
        t.checked = facts.checked + 10 * facts.chunk_rows;
        if (t.checked >= facts.rows_total)
            t.step = MoveStep::Copy;
        return t;
    }
    case MoveStep::Copy:
        return copy(facts, answer);
    case MoveStep::Import:
        if (answer.more)
            return to(facts, MoveStep::Import);
        if (facts.fork) {
            MoveTransition t = to(facts, MoveStep::Done);
            t.outcome = MoveOutcome::Complete;
            return t;
        }
        return to(facts, MoveStep::CatchUp);
    case MoveStep::CatchUp:
    case MoveStep::LastCatchUp:
        if (facts.fork)
            return with(facts, MoveOutcome::ProtocolViolation);
        return catch_up(facts, answer);
    case MoveStep::Fence:
        return to(facts, MoveStep::InFlight);
    case MoveStep::InFlight:
        return answer.waiting ? with(facts, MoveOutcome::Wait) : to(facts, MoveStep::LastCatchUp);
    case MoveStep::Switch:
        return to(facts, MoveStep::Drain);
    case MoveStep::Drain: {
        if (answer.left < 0)
            return with(facts, MoveOutcome::ProtocolViolation);
        if (answer.left > 0)
            return with(facts, MoveOutcome::Wait);
        MoveTransition t = to(facts, MoveStep::Delete);
        t.rows_done = 0; // from now on, the rows deleted in the source
        return t;
    }
    case MoveStep::Delete: {
        if (answer.deleted < 0)
            return with(facts, MoveOutcome::ProtocolViolation);
        MoveTransition t = to(facts, answer.done ? MoveStep::Done : MoveStep::Delete);
        t.rows_done = facts.rows_done + answer.deleted;
        if (answer.done)
            t.outcome = MoveOutcome::Complete;
        return t;
    }
    case MoveStep::Done:
        break;
    }
    MoveTransition t = to(facts, MoveStep::Done);
    t.outcome = MoveOutcome::Complete;
    return t;
}

} // namespace

const char *move_step_name(MoveStep step) {
    return step_names[static_cast<int>(step)];
}

bool parse_move_step(const char *name, MoveStep *step) {
    for (size_t i = 0; name != nullptr && i < std::size(step_names); i++) {
        if (std::strcmp(name, step_names[i]) == 0) {
            *step = static_cast<MoveStep>(i);
            return true;
        }
    }
    return false;
}

MoveTransition next_move_step(const MoveFacts &facts, const MoveAnswer &answer) {
    MoveTransition t = step_once(facts, answer);
    // The source is fenced from the fence's answer on, for good (control's
    // record of it; the source keeps its own).
    t.fenced = t.step == MoveStep::InFlight || t.step == MoveStep::LastCatchUp ||
               t.step == MoveStep::Switch || t.step == MoveStep::Drain ||
               t.step == MoveStep::Delete || (t.step == MoveStep::Done && !facts.fork);
    return t;
}

} // namespace pgoutbox::relocation
