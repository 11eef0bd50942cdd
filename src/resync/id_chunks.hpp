// How a re-sync job keeps its ids in outbox.resync_rows: a chunk is a
// bytea of varints, each id's difference from the one before (zigzag, so
// any order and any int64 round-trips; the first from 0).  Ids in the
// order a job sends them are sorted per table, so most differences take a
// byte or two: an organization's 100,000 ids were 417 rows of int8[]
// (800 KB, 13 ms to write) and are now about 60 rows (100 KB, 2 ms).
// Pure C++, unit-tested (test/unit/id_chunks_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgoutbox {

// A chunk's bytes at most: under TOAST's threshold with the row's other
// columns, so a chunk is stored as it is, never compressed or moved out of
// line.
constexpr size_t id_chunk_bytes = 1900;
// Ids a chunk holds at most (a byte each); a chunk of the job's ids from
// position p holds no position below p - id_chunk_ids + 1.
constexpr int id_chunk_ids = int(id_chunk_bytes);

// Encodes ids[0..n) from the first into out (id_chunk_bytes bytes) until
// the next would not fit; returns the bytes written and sets *taken to the
// ids they hold (at least one when n > 0).
size_t encode_id_chunk(const int64_t *ids, size_t n, uint8_t *out, size_t *taken);

// Decodes a chunk into out (room for id_chunk_ids); returns how many ids,
// or -1 when the bytes are not a chunk (a varint cut short or too long, or
// more ids than a chunk holds).
int decode_id_chunk(const uint8_t *bytes, size_t length, int64_t *out);

} // namespace pgoutbox
