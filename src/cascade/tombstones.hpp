// Tombstones recorded by the drain (SPEC section 7, Sentry's
// maybe_process_tombstone): a delivered message whose row is gone from the
// only table registered under its category (in its silo) was a deletion.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

// Records a tombstone for each of the n ids that table has no row for any
// more: in cell_tombstone for a control table, in control_tombstone for a
// cell table; one already there is kept.  The table is read as its owner; a
// table dropped meanwhile, one that forces row-level security on its owner
// (the read could not tell a hidden row from a deleted one), or one its owner
// cannot read (a WARNING then) records nothing.
void record_tombstones(const SoleTable *table, const int64 *ids, int n);

// Of the n ids, those table has no row for (an int8[] in the caller's
// memory context), or 0 for none or when it records nothing (above).
Datum gone_ids(const SoleTable *table, const int64 *ids, int n);

} // namespace pgoutbox
