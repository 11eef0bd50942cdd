// The rows of a statement trigger's transition table, one at a time.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "executor/tuptable.h"
#include "utils/tuplestore.h"
}

namespace pgoutbox::pg {

// Calls fn(slot) for every row of a transition table, in per_row memory
// reset after each row.  The tuplestore reads in the caller's context: a
// spilled tuplestore hands the slot tuples that the slot later frees.
template <typename Fn>
void for_each_row(Tuplestorestate *rows, TupleTableSlot *slot, MemoryContext per_row, Fn fn) {
    tuplestore_rescan(rows);
    while (tuplestore_gettupleslot(rows, true, false, slot)) {
        MemoryContext old = MemoryContextSwitchTo(per_row);
        fn(slot);
        MemoryContextSwitchTo(old);
        MemoryContextReset(per_row);
    }
    ExecClearTuple(slot);
}

} // namespace pgoutbox::pg
