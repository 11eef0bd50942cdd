#include "relocation/lifecycle.hpp"

#include "relocation/move/move_machine.hpp"

#include <utility>

namespace pgoutbox::relocation {

namespace {

const char *const not_in_state = "55000";  // object_not_in_prerequisite_state
const char *const invalid_value = "22023"; // invalid_parameter_value

LifecycleDecision refuse(const char *sqlstate, std::string message, std::string hint = {}) {
    LifecycleDecision d;
    d.refused = true;
    d.sqlstate = sqlstate;
    d.message = std::move(message);
    d.hint = std::move(hint);
    return d;
}

LifecycleDecision to(const char *state) {
    LifecycleDecision d;
    d.state = state;
    return d;
}

std::string named(const LifecycleFacts &f) {
    return "relocation " + f.relocation;
}

// The steps of a move before its fence: the organization's writes go on in
// the source, so a pause there holds nobody.
bool before_fence(const std::string &step) {
    MoveStep s;
    return parse_move_step(step.c_str(), &s) && s <= MoveStep::CatchUp;
}

// From the switch on, control routes the organization to the target.
bool past_cutover(const LifecycleFacts &f) {
    MoveStep s;
    return f.state == "complete" || (parse_move_step(f.step.c_str(), &s) && s >= MoveStep::Switch);
}

LifecycleDecision pause(const LifecycleFacts &f) {
    if (f.kind == RelocationKind::Import)
        return f.state == "importing"
                   ? to("paused")
                   : refuse(not_in_state, named(f) + " is " + f.state +
                                              ": only an import under way can be paused");
    if (f.state != "moving")
        return refuse(not_in_state,
                      named(f) + " is " + f.state + ": only a move under way can be paused");
    if (!before_fence(f.step))
        return refuse(not_in_state,
                      named(f) + " is at step " + f.step +
                          ", past its fence: a pause would hold organization " +
                          std::to_string(f.organization) + "'s writes",
                      "Wait for the move to end, or cancel it before its switch.");
    return to("paused");
}

LifecycleDecision resume(const LifecycleFacts &f) {
    if (f.kind == RelocationKind::Import)
        return refuse(invalid_value, named(f) + " is an import, which its CALL resumes",
                      "CALL outbox.import_organizations (or import_users) again: an import runs "
                      "in the session that calls it, a chunk per transaction.");
    if (f.state != "paused" && f.state != "failed")
        return refuse(not_in_state, named(f) + " is " + f.state +
                                        ": only a paused or failed move can be resumed");
    return to("moving");
}

LifecycleDecision cancel(const LifecycleFacts &f) {
    if (f.state == "cancelled")
        return refuse(not_in_state, named(f) + " is already cancelled");
    if (f.kind == RelocationKind::Move && past_cutover(f))
        return refuse(not_in_state,
                      named(f) + " is past its cutover: organization " +
                          std::to_string(f.organization) + " lives in cell " + f.to_cell + " now",
                      "Move it back with outbox.relocate_organization.");
    if (f.kind == RelocationKind::Fork && past_cutover(f))
        return refuse(not_in_state,
                      named(f) + " is complete: its copy of organization " +
                          std::to_string(f.organization) + " is an organization of cell " +
                          f.to_cell + " now",
                      "Delete that organization there as any other.");
    return to("cancelled");
}

} // namespace

LifecycleDecision decide(const LifecycleFacts &facts, Operation operation) {
    switch (operation) {
    case Operation::Pause:
        return pause(facts);
    case Operation::Resume:
        return resume(facts);
    case Operation::Cancel:
        break;
    }
    return cancel(facts);
}

} // namespace pgoutbox::relocation
