// Whether a relocation's own statement runs (outbox._run_as_table_owner,
// relocation/import/owner_statement.cpp, which only the extension's owner may
// execute): the fence of a move (relocation/move/move_trigger.cpp) lets those
// writes through, and nobody else's.  Never a setting.
#pragma once

#include "pg/spi.hpp"

namespace pgoutbox {

extern bool relocation_writing;

// Whether a move's step runs, called by control over the link
// (outbox.relocation_peer, relocation/move/peer_entry.cpp).  Never a setting.
extern bool move_step_running;

// Whom a relocation's read or write of rel runs as: its owner, and in a
// move's step under outbox.owner_code_timeout and owner_lock_timeout, as
// the worker's own reads are (nobody waits on a step but control, whose
// call would otherwise hang for outbox.link_timeout, issue 44); an import
// or an export an operator calls is bounded by that statement's own
// statement_timeout, as any statement of theirs.
inline pg::RunAsRole relocation_owner_role(Relation rel) {
    return move_step_running ? pg::table_owner_role(rel) : pg::table_owner_role_for_caller(rel);
}

} // namespace pgoutbox
