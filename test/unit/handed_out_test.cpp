#include "consumers/handed_out.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

using namespace pgoutbox;

namespace {

struct Lease {
    std::vector<HandedOutRow> rows;
    std::vector<HandedOutMessage> messages;
};

std::vector<uint8_t> encode(const Lease &lease) {
    std::vector<uint8_t> bytes(handed_out_max_bytes(lease.rows.size(), lease.messages.size()));
    size_t length = encode_handed_out(lease.rows.data(), lease.rows.size(), lease.messages.data(),
                                      lease.messages.size(), bytes.data());
    EXPECT_LE(length, bytes.size());
    bytes.resize(length);
    return bytes;
}

bool decode(const std::vector<uint8_t> &bytes, Lease *lease) {
    size_t nrows, nmessages;
    if (!handed_out_counts(bytes.data(), bytes.size(), &nrows, &nmessages))
        return false;
    lease->rows.resize(nrows);
    lease->messages.resize(nmessages);
    return decode_handed_out(bytes.data(), bytes.size(), lease->rows.data(),
                             lease->messages.data());
}

void expect_equal(const Lease &a, const Lease &b) {
    ASSERT_EQ(a.rows.size(), b.rows.size());
    ASSERT_EQ(a.messages.size(), b.messages.size());
    for (size_t r = 0; r < a.rows.size(); r++) {
        EXPECT_EQ(a.rows[r].block, b.rows[r].block) << r;
        EXPECT_EQ(a.rows[r].offset, b.rows[r].offset) << r;
        EXPECT_EQ(a.rows[r].id, b.rows[r].id) << r;
    }
    for (size_t m = 0; m < a.messages.size(); m++) {
        EXPECT_EQ(a.messages[m].nrows, b.messages[m].nrows) << m;
        EXPECT_EQ(a.messages[m].category, b.messages[m].category) << m;
        EXPECT_EQ(a.messages[m].object, b.messages[m].object) << m;
        EXPECT_EQ(a.messages[m].added, b.messages[m].added) << m;
    }
}

// A shard of bench/consumer's workload B: 200 one-row messages, its rows a
// thousand ids apart on pages a few apart, one category, objects of the
// shard, written in the same transaction.
Lease workload_b() {
    Lease lease;
    for (int r = 0; r < 200; r++) {
        lease.rows.push_back(
            HandedOutRow{uint32_t(17 + 16 * r), uint16_t(1 + r % 61), int64_t(42 + 1000 * r)});
        lease.messages.push_back(
            HandedOutMessage{1, 2, int64_t(4200000 + r), int64_t(849000000000000)});
    }
    return lease;
}

} // namespace

TEST(HandedOut, RoundTripsAShardOfWorkloadBInAQuarterOfItsArrays) {
    Lease lease = workload_b(), back;
    std::vector<uint8_t> bytes = encode(lease);
    ASSERT_TRUE(decode(bytes, &back));
    expect_equal(lease, back);
    // The six arrays took 200 x (6 + 8 + 4 + 4 + 8 + 8) bytes.
    EXPECT_LT(bytes.size(), 200u * 38 / 4);
}

TEST(HandedOut, RoundTripsTheExtremesOfEveryType) {
    Lease lease;
    lease.rows = {
        {UINT32_MAX, UINT16_MAX, INT64_MAX}, {0, 1, INT64_MIN}, {UINT32_MAX, 0, -1}, {0, 291, 0}};
    lease.messages = {{3, INT32_MIN, INT64_MIN, INT64_MAX}, {1, INT32_MAX, INT64_MAX, INT64_MIN}};
    Lease back;
    ASSERT_TRUE(decode(encode(lease), &back));
    expect_equal(lease, back);
}

TEST(HandedOut, RoundTripsRandomLeases) {
    std::mt19937_64 random(7);
    for (int trial = 0; trial < 200; trial++) {
        Lease lease;
        int nmessages = int(random() % 50) + 1;
        for (int m = 0; m < nmessages; m++) {
            int nrows = int(random() % 4) + 1;
            lease.messages.push_back(
                HandedOutMessage{nrows, int32_t(random()), int64_t(random()), int64_t(random())});
            for (int r = 0; r < nrows; r++)
                lease.rows.push_back(
                    HandedOutRow{uint32_t(random()), uint16_t(random()), int64_t(random())});
        }
        Lease back;
        ASSERT_TRUE(decode(encode(lease), &back)) << trial;
        expect_equal(lease, back);
    }
}

TEST(HandedOut, NothingIsNoByte) {
    Lease nothing, back;
    std::vector<uint8_t> bytes = encode(nothing);
    EXPECT_TRUE(bytes.empty());
    ASSERT_TRUE(decode(bytes, &back));
    EXPECT_TRUE(back.rows.empty());
    EXPECT_TRUE(back.messages.empty());
}

TEST(HandedOut, RefusesEveryCutAndAByteLeftOver) {
    std::vector<uint8_t> bytes = encode(workload_b());
    Lease back;
    for (size_t length = 1; length < bytes.size(); length++)
        EXPECT_FALSE(decode(std::vector<uint8_t>(bytes.begin(), bytes.begin() + length), &back))
            << length;
    bytes.push_back(0);
    EXPECT_FALSE(decode(bytes, &back));
}

TEST(HandedOut, RefusesMessagesThatAreNotTheRows) {
    Lease lease = workload_b(), back;
    lease.messages[0].nrows = 2; // 201 rows' messages over 200 rows
    EXPECT_FALSE(decode(encode(lease), &back));
    lease = workload_b();
    lease.messages[5].nrows = 0;
    EXPECT_FALSE(decode(encode(lease), &back));
    lease = workload_b();
    lease.messages.pop_back(); // a row no message holds
    EXPECT_FALSE(decode(encode(lease), &back));
}

TEST(HandedOut, RefusesCountsTheBytesCannotHold) {
    // 100 rows and a message claimed in four bytes.
    std::vector<uint8_t> bytes = {100, 1, 0, 0};
    Lease back;
    EXPECT_FALSE(decode(bytes, &back));
    // A block past 32 bits: the difference 2^32 from 0, zigzagged.
    bytes = {1, 1, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 0, 1, 0, 0, 0};
    EXPECT_FALSE(decode(bytes, &back));
}
