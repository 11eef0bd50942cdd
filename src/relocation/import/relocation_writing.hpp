// Whether a relocation's own statement runs (outbox._run_as_table_owner,
// relocation/import/owner_statement.cpp, which only the extension's owner may
// execute): the fence of a move (relocation/move/move_trigger.cpp) lets those
// writes through, and nobody else's.  Never a setting.
#pragma once

namespace pgoutbox {

extern bool relocation_writing;

} // namespace pgoutbox
