#include "relocation/move/peer_protocol.hpp"

#include <cstring>

namespace pgoutbox::relocation {

namespace {

// prepare is answered after the check that control recorded the move
// (peer_entry.cpp); every function named here is in
// extension/functions/69_relocation/.
const PeerOperation operations[] = {
    {"prepare", PeerSide::Any, "outbox._move_prepare($3, $2)"},
    {"cancel", PeerSide::Any, "outbox._move_cancel_peer($1)"},
    {"keys", PeerSide::Any, "outbox._move_keys($1, $2)"},
    {"taken", PeerSide::Any,
     "jsonb_build_object('taken', coalesce((SELECT jsonb_agg(to_jsonb(k))"
     " FROM outbox._move_taken($2->'keys') k), '[]'))"},
    {"export", PeerSide::Source, "outbox._move_export(o)"},
    // json, text as the answer goes out: built as jsonb, 10,000 rows took
    // 100 ms, against 12 (bench/relocation/move.sh: most of the source's
    // part of a copy step).
    {"chunk", PeerSide::Source,
     "json_build_object('rows', coalesce((SELECT json_agg(json_build_array(s.ordinal, s.model,"
     " s.pk, s.fields) ORDER BY s.ordinal) FROM outbox.relocation_rows s"
     " WHERE s.relocation = o.relocation"
     " AND s.ordinal BETWEEN ($2->>'first')::bigint AND ($2->>'last')::bigint), '[]'))"},
    {"changes", PeerSide::Source, "outbox._move_changes(o, $2)"},
    {"fence", PeerSide::Source, "outbox._move_fence(o)"},
    {"in_flight", PeerSide::Source, "outbox._move_in_flight(o)"},
    {"drained", PeerSide::Source, "outbox._move_drained(o)"},
    {"delete", PeerSide::Source, "outbox._move_delete(o, coalesce(($2->>'limit')::int, 1000))"},
    {"finish", PeerSide::Source, "outbox._move_finish(o)"},
    {"stage", PeerSide::Target, "outbox._move_stage(o, $2->'chunk'->'rows')"},
    {"import", PeerSide::Target, "outbox._move_import(o)"},
    {"apply", PeerSide::Target, "outbox._move_apply(o, $2->'changes')"},
    {"lift", PeerSide::Target, "outbox._move_lift(o, $2->'scopes')"},
    {"release", PeerSide::Target, "outbox._move_release(o)"},
};

} // namespace

const PeerOperation *find_peer_operation(const char *name) {
    if (name == nullptr)
        return nullptr;
    for (const PeerOperation &operation : operations)
        if (strcmp(operation.name, name) == 0)
            return &operation;
    return nullptr;
}

const char *peer_side_name(PeerSide side) {
    switch (side) {
    case PeerSide::Source:
        return "source";
    case PeerSide::Target:
        return "target";
    case PeerSide::Any:
        break;
    }
    return nullptr;
}

} // namespace pgoutbox::relocation
