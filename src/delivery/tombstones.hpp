// Tombstones of delivered rows (SPEC section 7, Sentry's
// maybe_process_tombstone): a delivered message whose row is gone from the
// only table registered under its category (in its silo) was a deletion.
// Every sink records them (settle_batch for handlers, complete() for
// consumers, a taken round for links); the cascade (cascade/) reads them.
#pragma once

#include "delivery/delivery.hpp"

namespace pgoutbox {

// Of the n ids, those table has no row for, in *gone (an int8[] in the
// caller's memory context, or 0 for none); a table dropped meanwhile has
// none.  The table is read as its owner, under the bounds of
// pg/run_as.hpp.  False, with *error, when the read failed for a reason of
// the table's: its lock or its owner's code passed its bound, the owner
// cannot read it or the table forces row security on it (a hidden row
// would look deleted), the owner's code failed.  A
// cancel of the caller's, a deadlock, a serialization failure or a shutdown
// is raised: those are not the table's, and the caller's work is retried.
// *told: whether the read could tell which rows are there (false for a
// dropped table, whose *gone is 0).
bool gone_ids(const SoleTable *table, const int64 *ids, int n, Datum *gone, char **error,
              bool *told);

// Records a tombstone for each of the n ids that table has no row for any
// more: in cell_tombstone for a control table, in control_tombstone for a
// cell table; one already there is kept, and one of an id whose row is
// there again is removed.  When the read fails (gone_ids),
// the ids wait in outbox.tombstone_checks, with a WARNING, for
// retry_tombstone_checks(): a tombstone is never dropped.
void record_tombstones(const SoleTable *table, const int64 *ids, int n);

// Of ids (an int8[]), the tombstoned objects of table_key (a control table
// when control) whose row is still gone, as an int8[] (0 for none), when
// the table is registered here alone under its category (else ids as they
// are): the tombstones of rows that are back (the same id written again)
// are removed, and the cascade leaves the new row's children alone.  An
// ERROR when the read fails (gone_ids).
Datum tombstones_still_gone(const char *table_key, bool control, Datum ids);

// The tables (table_key and silo, allocated in context) that have ids in
// outbox.tombstone_checks.  Inside SPI.
int tables_with_checks(MemoryContext context, char ***table_keys, bool **control);

// Asks again for the ids of table_key waiting in outbox.tombstone_checks:
// those whose row is gone get their tombstone, those whose row is there are
// forgotten, and all stay when the read fails again (their error and attempts
// updated; the function returns false, with *error).  Ids of a table no
// longer registered alone under its category are forgotten with a WARNING.
bool retry_tombstone_checks(const char *table_key, bool control, char **error);

// Delivered messages (category, object, whether a control row) whose object
// no longer exists in the one table registered under their category leave
// tombstones (record_tombstones); those whose row is there, and had one,
// lose it.
void tombstones_of_delivered(int n, const int32 *categories, const int64 *objects,
                             const bool *control);

// The same for the delivered[m] messages of a batch.
void tombstones_of_messages(const DrainBatch *batch, const Message *messages, int nmessages,
                            const bool *delivered);

} // namespace pgoutbox
