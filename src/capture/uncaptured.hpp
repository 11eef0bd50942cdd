// Changes that capture lets pass without an outbox row: only those of the
// step of a move that removes an organization from the cell it left (its
// rows live on in the new cell; taking them for deletions would send
// tombstones and cascade in control): its deletions, and the updates that
// clear the references of a cycle first.  Set by outbox._run_as_table_owner
// for that one statement (relocation/import/owner_statement.cpp), which only the
// extension's owner may execute; never a setting.
#pragma once

namespace pgoutbox {

extern bool capture_suppressed;

} // namespace pgoutbox
