// The transitions of a move that control drives (docs/relocation.md,
// "Moving an organization between cells"): given where a move is and what
// the cells answered in its step, which step comes next.  Pure C++, no
// PostgreSQL types (test/unit/move_machine_test.cpp); the calls to the
// cells are made by the step's SQL (69_relocation/50_move_control.sql),
// which asks here through outbox._move_next (move_next_entry.cpp).  A step
// whose answer was lost is called again: every step's operations in the
// cells are idempotent, so a fault is a step taken twice, and the
// transition is the same.
#pragma once

#include <cstdint>

namespace pgoutbox::relocation {

enum class MoveStep {
    Prepare,
    Export,
    Check,
    Copy,
    Import,
    CatchUp,
    Fence,
    InFlight,
    LastCatchUp,
    Switch,
    Drain,
    Delete,
    Done,
};

// The step's name in outbox.organization_moves, and back (false: no step
// of that name).
const char *move_step_name(MoveStep step);
bool parse_move_step(const char *name, MoveStep *step);

// What control's record says of the move as its step begins.
struct MoveFacts {
    MoveStep step = MoveStep::Prepare;
    bool fork = false;      // a copy with new keys: no check, catch-up, fence or delete
    int64_t chunk_rows = 0; // outbox.relocation_chunk_rows
    int64_t rows_done = 0;  // copy: rows staged in the target; delete: rows deleted
    int64_t rows_total = 0; // rows of the export
    int64_t checked = 0;    // check: export ordinals whose keys the target was asked about
};

// What the cells answered in the step: the fields that step reads (-1 and
// false: not given).
struct MoveAnswer {
    bool waiting = false;   // export, in_flight: transactions the source still waits for
    int64_t rows = -1;      // export: the rows exported
    bool taken = false;     // check: a key of the page taken in the target
    int64_t first_row = -1; // copy: the ordinal of the chunk's first row
    int64_t row_count = -1; // copy: the chunk's rows
    bool more = false;      // import: chunks left to import
    int64_t left = -1;      // catch_up: changes left in the source; drain: messages left
    int64_t applied = 0;    // catch_up: changes in this batch
    int64_t seqs = 0;       // catch_up: log entries this batch read
    int64_t deleted = -1;   // delete: rows deleted in this batch
    bool done = false;      // delete: the organization is gone from the source
};

enum class MoveOutcome {
    Next,              // record the next step (which may be this one again) and go on
    Wait,              // the same step again shortly: the source is waiting for something
    Failed,            // check: a key is taken in the target; the operator decides
    Complete,          // the move is done
    ProtocolViolation, // the answer is not one this step can give
};

struct MoveTransition {
    MoveOutcome outcome = MoveOutcome::Next;
    MoveStep step = MoveStep::Prepare;
    int64_t rows_done = 0;
    int64_t rows_total = 0;
    int64_t checked = 0;
    bool fenced = false; // the source refuses the organization's writes from this step on
};

MoveTransition next_move_step(const MoveFacts &facts, const MoveAnswer &answer);

} // namespace pgoutbox::relocation
