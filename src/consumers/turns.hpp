// The turns of consumers' claims (docs/consumers.md, "Turns").  A claim
// holds its whole shard, every category in it; so that a role cannot keep
// a shard by claiming it again and again, a shard whose claim by a role
// ended (completed, failed, given back, or its lease passed) is the role's
// again only once the others had it:
//   - other roles' claims may take it at once;
//   - the worker's handlers have had it once the worker read its partition
//     in a transaction that began after the claim ended, leaving nothing
//     behind (the end of a completion wakes the worker for it), or when
//     the worker wants nothing hidden there (worker_state.hpp,
//     worker_offered_at);
//   - without a worker that drains this database, a naptime after it
//     ended;
//   - with nobody else to deliver anything, at once;
//   - and in any case outbox.max_lease after it ended.
// The row of an ended claim stays in outbox.consumer_claims as the shard's
// turn while the worker may want it.  Plain C-style code: PostgreSQL
// errors unwind through it.
#pragma once

#include "delivery/delivery.hpp"

namespace pgoutbox {

// What a claim call knows of the turns.
struct Turns {
    Oid role;
    bool others;      // a handler, or another role with CONSUME
    bool handlers;    // a handler: the worker's turn
    bool worker_here; // the worker drains this database
    TimestampTz now;
};

// At the start of a claim by role.  Inside SPI, as the extension's owner.
Turns turns_begin(Oid role);

// Leaves (SegmentAction::Leave) the segments of the batch whose shard's
// turn has not come back to the role, as far as this session knows (the
// claims it made), before their locks are taken: the worker then finds
// them free.  Returns, per segment, the time before which the shard's
// last claim by the role must have ended: the claim's statement checks it
// again, under the shard's lock, against every session's claims.
TimestampTz *turns_leave(const Turns *turns, DrainBatch *batch);

// This session claimed the shard for the role until lease_until.
void turns_claimed(const ShardKey *shard, Oid role, TimestampTz lease_until);

// A claim of the shard by claimer ends now (complete, fail): whether its
// row stays as the shard's turn.  If so, the worker is asked to read the
// shard's partition once this transaction commits.
bool turns_claim_ended(const ShardKey *shard, Oid claimer);

// Forgets the claims that ended more than outbox.max_lease ago (lapsed or
// released): no turn lasts longer, and such a token completes nothing
// either way.  Without it, outbox.consumer_claims kept a row for every
// shard ever claimed, which every partition read looks through for live
// leases.  The worker's, each cycle; inside SPI.  Returns the rows deleted.
int64 turns_forget_ended();

} // namespace pgoutbox
