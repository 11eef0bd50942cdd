// Changes that capture lets pass without an outbox row: only those of the
// step of a move that removes an organization from the cell it left (its
// rows live on in the new cell; taking them for deletions would send
// tombstones and cascade in control): its deletions, and the updates that
// clear the references of a cycle first; and a move's import and catch-up
// in the target.  Set by outbox._run_as_table_owner for that one statement
// (relocation/import/owner_statement.cpp), which only the extension's owner
// may execute; never a setting.  Only that statement's own rows: what the
// table owner's triggers, defaults or functions write from inside it runs
// one executor deeper and is captured (issue 44: a trigger fired by a
// move's write changed another organization's row, and control never heard
// of it).
#pragma once

#include "pg/executor_depth.hpp"

namespace pgoutbox {

// The executor depth (pg/executor_depth.hpp) of the statement whose rows
// capture lets pass; 0 when none.
extern int capture_suppressed_depth;

inline bool capture_suppressed() {
    return capture_suppressed_depth != 0 && pg::executor_depth() == capture_suppressed_depth;
}

} // namespace pgoutbox
