// What the worker's drain passes know of each outbox partition between
// passes, so that a pass reads only the partitions that may hold something
// to deliver: rows nobody can take (a category without a handler, waiting
// for one or for a consumer) are then not read again and again.
//
// The outbox has no index (capture's cost, extension/tables/20_outbox.sql):
// a pass finds what is due by reading a partition whole.  A partition is
// read again when
//   - a committed transaction wrote rows into it that a handler takes
//     (capture and backfill say so at commit, worker_state.hpp,
//     drain_at_commit; SQL that writes the outbox, registers a handler or
//     resumes a paused shard, through outbox._drain_soon(), a statement
//     trigger);
//   - its last read left something behind (a shard claimed elsewhere, a
//     handler failed, a read or batch that did not commit): by the next
//     passes, a few times, then at the worker's next cycle;
//   - its last read was made while a consumer held a lease or a link took
//     the silo's rows: at the worker's next cycle;
//   - a shard in it that waits for a backoff is due;
//   - the handlers are not the ones it was read for;
//   - a minute has passed since its last read: the net for rows written
//     behind pg_outbox's back (an INSERT into a partition itself).
// Worker-local: other sessions' passes (outbox.drain(), consumers, links)
// read every partition.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

enum class PassScope {
    Unwatched, // every partition, and nothing learnt (not the worker's)
    All,       // every partition (a cycle asked for by outbox.wake_worker())
    Due,       // the worker's cycle: those read again for any reason above
    Woken,     // between cycles: those that commits wrote rows into
};

// Before the read of a partition by a watched pass, in its transaction:
// whether to read it.  Takes the partition's written bit (into taken, the
// pass's: two partitions share a bit past the 64th).  Forgets every
// partition when the registry's handlers are not those of the last call.
bool partition_watch_wants(PassScope scope, const Registry *registry, int silo, int remainder,
                           Oid relid, TimestampTz now, uint64 taken[2]);

// After the pass delivered what it read of the partition: when it is to be
// read again (0: at the worker's next cycle), and whether its batches left
// something behind.  What they left is read again by the next passes woken
// (a few times: a shard is often claimed by the very transaction whose
// commit woke the worker, until its locks go, just after), then at cycles.
void partition_watch_read(int silo, int remainder, Oid relid, TimestampTz read_again_at,
                          bool left_behind);

// Whether a commit changed the handlers since the last call: the registry
// may not know yet (its invalidation comes after the commit's wake-up).
bool partition_watch_handlers_changed();

// Whether commits wrote rows into a partition of these silos since the
// worker last read it.
bool partition_watch_written(bool cell, bool control);

// How long a partition read with nothing left is trusted.
constexpr long partition_trusted_ms = 60000;

} // namespace pgoutbox
