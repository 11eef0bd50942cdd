#include "resync/id_chunks.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

using namespace pgoutbox;

namespace {

// Encodes ids into as many chunks as they take and decodes them back.
std::vector<int64_t> round_trip(const std::vector<int64_t> &ids, size_t *chunks) {
    std::vector<int64_t> back;
    uint8_t bytes[id_chunk_bytes];
    int64_t decoded[id_chunk_ids];
    *chunks = 0;
    for (size_t at = 0; at < ids.size();) {
        size_t taken = 0;
        size_t length = encode_id_chunk(ids.data() + at, ids.size() - at, bytes, &taken);
        EXPECT_GT(taken, 0u);
        EXPECT_LE(length, id_chunk_bytes);
        int count = decode_id_chunk(bytes, length, decoded);
        EXPECT_EQ(count, int(taken));
        back.insert(back.end(), decoded, decoded + (count > 0 ? count : 0));
        at += taken;
        ++*chunks;
    }
    return back;
}

} // namespace

TEST(IdChunks, GaplessIdsTakeAByteEach) {
    std::vector<int64_t> ids;
    for (int64_t i = 1; i <= 100000; i++)
        ids.push_back(i);
    size_t chunks;
    EXPECT_EQ(round_trip(ids, &chunks), ids);
    EXPECT_EQ(chunks, (ids.size() + id_chunk_ids - 1) / id_chunk_ids);
}

TEST(IdChunks, ExtremesAndAnyOrderRoundTrip) {
    std::vector<int64_t> ids = {INT64_MAX, INT64_MIN, 0, -1, 1, INT64_MIN, INT64_MAX, 42, -42};
    std::mt19937_64 random(7);
    for (int i = 0; i < 5000; i++)
        ids.push_back(int64_t(random()));
    size_t chunks;
    EXPECT_EQ(round_trip(ids, &chunks), ids);
}

TEST(IdChunks, AChunkStopsAtItsBytes) {
    // Each difference is 2^63: ten bytes.
    std::vector<int64_t> ids;
    for (int i = 0; i < 1000; i++)
        ids.push_back(i % 2 ? 0 : INT64_MIN);
    uint8_t bytes[id_chunk_bytes];
    size_t taken;
    size_t length = encode_id_chunk(ids.data(), ids.size(), bytes, &taken);
    EXPECT_EQ(taken, id_chunk_bytes / 10);
    EXPECT_EQ(length, taken * 10);
}

TEST(IdChunks, NothingToEncode) {
    uint8_t bytes[id_chunk_bytes];
    size_t taken = 99;
    EXPECT_EQ(encode_id_chunk(nullptr, 0, bytes, &taken), 0u);
    EXPECT_EQ(taken, 0u);
    int64_t out[id_chunk_ids];
    EXPECT_EQ(decode_id_chunk(bytes, 0, out), 0);
}

TEST(IdChunks, BytesThatAreNotAChunkAreRefused) {
    int64_t out[id_chunk_ids];
    const uint8_t cut[] = {0x02, 0x80};
    EXPECT_EQ(decode_id_chunk(cut, sizeof cut, out), -1);
    uint8_t too_long[11];
    for (auto &b : too_long)
        b = 0xff;
    too_long[10] = 0x01;
    EXPECT_EQ(decode_id_chunk(too_long, sizeof too_long, out), -1);
    const uint8_t top_overflows[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    EXPECT_EQ(decode_id_chunk(top_overflows, sizeof top_overflows, out), -1);
    std::vector<uint8_t> too_many(id_chunk_ids + 1, 0x02);
    EXPECT_EQ(decode_id_chunk(too_many.data(), too_many.size(), out), -1);
    std::vector<uint8_t> full(id_chunk_ids, 0x02);
    EXPECT_EQ(decode_id_chunk(full.data(), full.size(), out), id_chunk_ids);
    EXPECT_EQ(out[id_chunk_ids - 1], id_chunk_ids);
}
