// Links between clusters (SPEC section 11; docs/clusters.md).
//
// A link hands the messages of one destination from this database's outbox
// to the other database's, where that database's worker delivers them to
// its handlers.  The worker runs it, in rounds of a few batches, one
// transaction each, as a drain whose handler is the other database:
//   1. a drain pass over the destination's due rows (every category) gives
//      a batch: its shards claimed (the drain's advisory locks), its rows
//      found as they are now, coalesced (delivery/delivery.hpp);
//   2. outbox.receive() on the other side, through libpq, with the
//      connection details of a foreign server and the user mapping of the
//      worker's role (postgres_fdw's objects), which logs in there as
//      this side's link role (the other side knows who is speaking by it):
//      it takes each message into its outbox once (outbox.inbox), with the
//      tombstones of the rows gone here and this side's receipt for the
//      batch, in one transaction for each batch;
//   3. the round's rows deleted here, and this transaction commits.  When 2
//      fails for a batch, nothing is deleted and the link backs off (1 s,
//      2 s, ... a minute); outbox.link_status shows it, and the next
//      connection deletes the rows of the batches the other side took.
// A crash after 2 committed and before 3 did: the next connection asks
// outbox.received() what the other side took and deletes those rows here
// instead of sending them again, once their receipts prove this side sent
// them there.  A destination that is down, or answers wrongly, holds back
// its own messages only.  Plain C-style code: PostgreSQL errors unwind through
// it.
#pragma once

#include "delivery/drain_pass.hpp"

namespace pgoutbox {

// The link protocol: the arguments of outbox.receive() and outbox.received()
// and what they mean.  Both sides speak the same one (the receiving side
// refuses another, and the link waits, visibly, until they do).
constexpr int link_protocol = 1;

struct LinkTarget {
    const char *destination; // a cell's name, or "control"
    const char *server;
    const char *sender;    // this database, as the other side knows it: "control", or its cell
    bool control_silo;     // control rows of the cell destination; else cell rows
    const char **keywords; // libpq connection options, NULL-terminated
    const char **values;
    const char *conninfo; // all of them in one string: a change redials
    int ncategories;      // every category, and its name (the other side knows names)
    int32 *categories;
    const char **category_names;
    int nscopes; // every scope, and its name
    int32 *scopes;
    const char **scope_names;
    const uint8 *secret; // the key of this side's receipts (outbox.link_secret)
    int secret_len;
    const uint8 *previous; // the key before a rotation, while it counts (or NULL)
    int previous_len;
    // The operator gave up on a batch of outbox.link_unrecognised: each
    // round asks outbox.received() again until the destination forgot it.
    bool give_up_pending;
};

// The links of this database whose destination is not backing off, and
// whether this database receives cell rows (a cell is linked: control side)
// and control rows (control is linked: cell side).  Inside a transaction,
// with SPI; allocates in context.
int link_targets(MemoryContext context, LinkTarget **targets, bool *receives_cell,
                 bool *receives_control);

// Ids and names of a registry table (categories, scopes), in context; with
// SPI.  The other side of a link knows them by name.
int link_read_names(MemoryContext context, SPIPlanPtr *plan, const char *table, int32 **ids,
                    const char ***names);

// A pass over the target's due rows (it outlives transactions: end it with
// drain_pass_end).
DrainPass *link_pass_begin(const LinkTarget *target);

// A round hands the destination's next batches over in one transaction
// here, each batch in one there: link_round_send takes the pass's next batch
// (at most outbox.link_batch_size rows) and sends it without waiting
// (libpq's pipeline mode, a sync point after each), so that the other side
// takes it while this side claims the next one, and every destination
// works at once; link_round_finish waits for the answers and deletes the
// round's rows here, in the current transaction, which must commit for the
// deletions to hold.  It returns the messages handed over, or -1 when the
// other side could not be reached or refused a batch (error says why):
// nothing is deleted here, the link backs off, and the next connection's
// recovery deletes the rows of the batches the other side did take.
// Inside a transaction, with SPI; a round lives in the current memory
// context.
struct LinkRound;
enum class LinkSend {
    Sent,      // a batch (or the send failed: link_round_finish says so)
    RoundFull, // a round holds this many batches or shards
    PassOver,
};
LinkRound *link_round_begin(const LinkTarget *target);
LinkSend link_round_send(LinkRound *round, DrainPass *pass);
int link_round_finish(LinkRound *round, char *error, size_t error_size);
// After the transaction of the rounds ended: once it committed, the other
// side may forget the batches this side deleted; when it did not, this side
// asks what the other side took before it sends again.
void link_rounds_ended(bool committed);

// Forgets what other clusters handed over longer than
// outbox.inbox_retention ago, at most 10,000 entries a call; returns how
// many.  Inside a transaction, with SPI.
int64 link_prune_inbox();

} // namespace pgoutbox
