// Claims as complete() and fail() take them back: each shard's advisory lock
// (waited for), then the claim's row deleted with a fresh snapshot and its
// lease checked.  A claim that replaced an expired one did so under the
// same lock, so a token whose lease passed can never delete rows that were
// handed to someone else.  The rows deleted are exactly those the claim
// handed out (by ctid, checked by id), never a row committed after the
// claim.  The claim's row goes, or stays released as the shard's turn
// (turns.hpp).  Plain C-style code: PostgreSQL errors unwind through it.
#pragma once

#include "delivery/delivery.hpp"

namespace pgoutbox {

// A claim as complete() and fail() take it: its row, deleted.
struct Claim {
    int64 token;
    ShardKey shard;
    int nrows;
    ItemPointerData *ctids;
    int64 *ids;
    int nmessages;
    int32 *ends; // message k's rows end at ends[k] (1-based counts)
    int32 *message_categories;
    int64 *objects;
    TimestampTz *added;
};

// Takes the claims of tokens (all distinct) for the rest of the transaction:
// their shards' advisory locks, then their rows deleted.  An ERROR when a
// token is not held (never made, completed or failed, or replaced after its
// lease passed), when its lease has passed, or when role may not consume
// one of its categories.  Inside SPI, as the extension's owner.
Claim *take_claims(const int64 *tokens, int n, Oid role);

// The rows of a claim's messages from first to last (0-based, last
// excluded).
ClaimedRows claimed_rows(const Claim *claim, int first, int last);

// Delivers the first k messages of a claim: their rows go, their counts and
// lag are recorded, and the rows whose object is gone leave tombstones.
void deliver_claimed(const Claim *claim, int k, TimestampTz now);

} // namespace pgoutbox
