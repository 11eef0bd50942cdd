// The one state machine of every relocation an operator controls: an
// import (relocation_state), and a move or a fork that control drives
// (organization_moves).  pause_relocation, resume_relocation and
// cancel_relocation ask here whether the operation may happen in the
// relocation's state and step, and which state it leaves; the SQL only
// reads the row and writes the answer (69_relocation/22_import_control.sql).
// Pure C++, no PostgreSQL types (test/unit/lifecycle_test.cpp).
//
// States (docs/relocation.md, "State and control"):
//   import: importing, paused, failed, imported, complete, mismatched,
//           cancelled;
//   move, fork: moving, paused, failed, complete, cancelled.
#pragma once

#include <string>

namespace pgoutbox::relocation {

enum class RelocationKind { Import, Move, Fork };
enum class Operation { Pause, Resume, Cancel };

// The relocation as its row says.
struct LifecycleFacts {
    RelocationKind kind = RelocationKind::Import;
    std::string relocation; // its uuid, for the messages
    std::string state;
    std::string step;           // a move's step; an import's is not read
    long long organization = 0; // a move's
    std::string to_cell;        // a move's target
};

// refused: sqlstate, message and hint say why (the ERROR to raise);
// else state is the state to record.
struct LifecycleDecision {
    bool refused = false;
    std::string sqlstate;
    std::string message;
    std::string hint;
    std::string state;
};

LifecycleDecision decide(const LifecycleFacts &facts, Operation operation);

} // namespace pgoutbox::relocation
