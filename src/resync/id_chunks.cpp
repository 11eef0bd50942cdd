#include "resync/id_chunks.hpp"

namespace pgoutbox {

namespace {

// Differences are taken modulo 2^64: exact for any two int64 values.
uint64_t zigzag(uint64_t difference) {
    return (difference << 1) ^ uint64_t(int64_t(difference) >> 63);
}

uint64_t unzigzag(uint64_t value) {
    return (value >> 1) ^ (~(value & 1) + 1);
}

size_t varint_size(uint64_t value) {
    size_t size = 1;
    for (; value >= 0x80; value >>= 7)
        size++;
    return size;
}

} // namespace

size_t encode_id_chunk(const int64_t *ids, size_t n, uint8_t *out, size_t *taken) {
    size_t used = 0;
    uint64_t previous = 0;
    size_t i = 0;
    for (; i < n && i < size_t(id_chunk_ids); i++) {
        uint64_t value = zigzag(uint64_t(ids[i]) - previous);
        if (used + varint_size(value) > id_chunk_bytes)
            break;
        for (; value >= 0x80; value >>= 7)
            out[used++] = uint8_t(value | 0x80);
        out[used++] = uint8_t(value);
        previous = uint64_t(ids[i]);
    }
    *taken = i;
    return used;
}

int decode_id_chunk(const uint8_t *bytes, size_t length, int64_t *out) {
    int count = 0;
    uint64_t previous = 0;
    for (size_t at = 0; at < length;) {
        uint64_t value = 0;
        for (int shift = 0;; shift += 7) {
            // A tenth byte holds the top bit alone.
            if (at == length || (shift == 63 && bytes[at] > 1))
                return -1;
            uint8_t byte = bytes[at++];
            value |= uint64_t(byte & 0x7f) << shift;
            if ((byte & 0x80) == 0)
                break;
        }
        if (count == id_chunk_ids)
            return -1;
        previous += unzigzag(value);
        out[count++] = int64_t(previous);
    }
    return count;
}

} // namespace pgoutbox
