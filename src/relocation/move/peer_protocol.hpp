// Relocation protocol 1 (docs/relocation.md, "Moving an organization
// between cells"): the operations control asks of a cell through
// outbox.relocation_peer, which side of a move each is for, and the SQL
// that answers it.  Pure C++, no PostgreSQL types
// (test/unit/peer_protocol_test.cpp); the entry that checks the caller
// and runs the answer is peer_entry.cpp.
#pragma once

namespace pgoutbox::relocation {

constexpr int peer_protocol = 1;

enum class PeerSide {
    Any,    // of no one move's side: prepare, cancel, keys, taken
    Source, // of the move whose source this cell is, its row locked
    Target, // of the move whose target this cell is, its row locked
};

struct PeerOperation {
    const char *name;
    PeerSide side;
    // The answer, a json or jsonb expression over $1 (the relocation, uuid), $2
    // (the argument, jsonb), $3 (this cell's name, text) and, for a side's
    // operation, o (the move's row of outbox.organization_moves on that
    // side).
    const char *answer;
};

// The operation of that name; nullptr for none of protocol 1 (or NULL).
const PeerOperation *find_peer_operation(const char *name);

// "source" or "target" (organization_moves.side); nullptr for Any.
const char *peer_side_name(PeerSide side);

} // namespace pgoutbox::relocation
