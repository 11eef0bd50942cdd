// A claim's leases: outbox.claim() records one per shard it hands out, in
// outbox.consumer_claims, with the rows and messages it handed out, so that
// complete() and fail() (claims.hpp) end exactly those.  Plain C-style
// code: PostgreSQL errors unwind through it.
#pragma once

#include "delivery/delivery.hpp"

extern "C" {
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/tuplestore.h"
}

namespace pgoutbox {

// The categories a call works on, with their names.
struct Categories {
    int n;
    int32 *ids;
    char **names;
};

// The lease a call asks for (argument n), in microseconds: more than 0, at
// most a day and at most outbox.max_lease; an ERROR otherwise.
int64 lease_usecs_argument(FunctionCallInfo fcinfo, int n);

// Where a call writes its messages: rows of outbox.claimed_message
// (outbox.claim), or, when json is set, elements of one JSON array
// (outbox.claim_json), each an array of the same columns in the same order.
struct ClaimOutput {
    Tuplestorestate *rows;
    TupleDesc desc;
    StringInfo json;
};

// Records the leases of a leased batch's shards (one INSERT) and writes
// their messages to out; returns the messages written.  A shard whose live
// lease someone else recorded meanwhile is left out, and so is one whose
// turn has not come back to role (turn_before, turns.hpp).  Inside SPI, as
// the extension's owner.
int record_leases(const DrainBatch *batch, const LeasedBatch *leased, const Categories *categories,
                  Oid role, TimestampTz claimed_at, TimestampTz lease_until,
                  const TimestampTz *turn_before, const ClaimOutput *out);

} // namespace pgoutbox
