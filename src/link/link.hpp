// Links between clusters (SPEC section 11; README, "Separate clusters").
//
// A link hands the messages of one destination from this database's outbox
// to the other database's, where that database's worker delivers them to
// its handlers.  The worker runs it, in three steps per batch:
//   1. claim (a transaction): outbox.claim() of the destination's due
//      messages under a lease, as any consumer, with the tombstones of the
//      rows they stand for that are gone here;
//   2. send (no transaction): outbox.receive() on the other side through
//      libpq, with the connection details of a foreign server and the user
//      mapping of the worker's role (postgres_fdw's objects); it takes each
//      message into its outbox once (outbox.inbox), in one transaction;
//   3. settle (a transaction): outbox.complete() of the batch; or, when the
//      send failed, the claims are given back and the link backs off (1 s,
//      2 s, ... a minute), recorded in outbox.link_status.
// A crash between 2 and 3 sends the batch again once the lease ends: the
// inbox takes nothing twice.  A destination that is down holds back its own
// messages only.  Plain C-style code: PostgreSQL errors unwind through it.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

struct LinkTarget {
    const char *destination; // a cell's name, or "control"
    const char *server;
    const char *origin;    // this database, as the other side knows it
    bool control_silo;     // control rows of the cell destination; else cell rows
    const char **keywords; // libpq connection options, NULL-terminated
    const char **values;
};

struct LinkBatch {
    int n; // messages
    // Arrays in their text form, for outbox.receive() and outbox.complete().
    const char *claims, *scopes, *identifiers, *cells, *categories, *objects, *payloads, *last_ids,
        *tombstone_tables, *tombstone_objects;
};

// The links of this database whose destination is not backing off, and
// whether this database receives cell rows (a cell is linked: control side)
// and control rows (control is linked: cell side).  Inside a transaction,
// with SPI; allocates in context.
int link_targets(MemoryContext context, LinkTarget **targets, bool *receives_cell,
                 bool *receives_control);

// Claims a batch for target; false when nothing of it is due.  Inside a
// transaction, with SPI; the batch is allocated in context.
bool link_claim(const LinkTarget *target, LinkBatch *batch, MemoryContext context);

// Hands the batch to the other side, which says how many messages it took
// (the rest it had taken before); false with the reason in error.  Out of
// any transaction; waits on the worker's latch, so it can be interrupted.
bool link_send(const LinkTarget *target, const LinkBatch *batch, int *taken, char *error,
               size_t error_size);

// Completes the batch, or gives it back and backs the link off.  Inside a
// transaction, with SPI.
void link_settle(const LinkTarget *target, const LinkBatch *batch, bool sent, int taken,
                 const char *error);

} // namespace pgoutbox
