// The SQL handler sink (handlers.cpp): delivers a batch's messages to the
// handler functions registered for their categories, in the caller's
// transaction, all under one savepoint.  A handler error (or
// outbox.handler_timeout) rolls the savepoint back; the messages before the
// failing one run again under a new savepoint, the failing one and the rest
// of its shard stay, and the other shards go on.  So a batch uses 1 + 2 x
// failures subtransactions, and stops taking new failures well before
// PostgreSQL's 64-entry subtransaction cache overflows.  Each handler runs
// as the owner of its function, in a GUC nest level of its own.
#pragma once

#include "delivery/delivery.hpp"

namespace pgoutbox {

// In the worker, the search_path its handlers run with: the one it started
// with (the database's and role's default), while its own SQL runs with
// pg_catalog, pg_temp.  NULL elsewhere: handlers get the caller's.
extern const char *handler_search_path;

// Delivers a batch (delivery.hpp, steps 1 to 5, step 4 by the handlers),
// in the caller's transaction, inside SPI; sets each segment's outcome.
// Works in a memory context of its own.
void drain_batch(DrainBatch *batch, DrainStats *stats);

} // namespace pgoutbox
