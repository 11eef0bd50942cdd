// What a claim handed out of one shard, as outbox.consumer_claims keeps it
// (its handed_out column): the rows (where the claim found them, and their
// ids) and the messages (their row counts, categories, objects and oldest
// rows' times), as one bytea of varints.  Counts first, then each row's
// block, offset and id, then each message, every number but the counts and
// offsets as its zigzagged difference from the one before.  A shard's rows
// come in id order and its messages' objects and times are close, so most
// numbers take a byte or two: the lease of 200 one-row messages went from
// 7.6 KB of six arrays (a page per lease, a new page at each claim) to
// about 1.6 KB, and claims of workload B spend that much less writing
// their leases (bench/consumer).  Pure C++, unit-tested
// (test/unit/handed_out_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgoutbox {

struct HandedOutRow {
    uint32_t block;
    uint16_t offset;
    int64_t id;
};

struct HandedOutMessage {
    int32_t nrows; // its rows, the next nrows of the rows, at least one
    int32_t category;
    int64_t object;
    int64_t added; // its oldest row's date_added, in PostgreSQL's microseconds
};

// The bytes encode_handed_out writes at most.
size_t handed_out_max_bytes(size_t nrows, size_t nmessages);

// Writes the rows and messages to out (handed_out_max_bytes); returns the
// bytes written.  Nothing (no row, no message) is no byte at all.
size_t encode_handed_out(const HandedOutRow *rows, size_t nrows, const HandedOutMessage *messages,
                         size_t nmessages, uint8_t *out);

// The counts of an encoding, for the caller to make room; false when the
// bytes cannot hold them.
bool handed_out_counts(const uint8_t *bytes, size_t length, size_t *nrows, size_t *nmessages);

// Decodes into rows and messages (room for handed_out_counts's counts);
// false when the bytes are not an encoding: cut short, left over, a number
// out of its type's range, or messages whose rows are not the rows.
bool decode_handed_out(const uint8_t *bytes, size_t length, HandedOutRow *rows,
                       HandedOutMessage *messages);

} // namespace pgoutbox
