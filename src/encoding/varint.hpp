// Varints of zigzagged differences, as the compact bytea columns keep
// numbers (resync/id_chunks.hpp, consumers/handed_out.hpp): a difference
// taken modulo 2^64 is exact for any two int64 values, and small ones of
// either sign take a byte or two.  Pure C++.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgoutbox {

inline uint64_t zigzag(uint64_t difference) {
    return (difference << 1) ^ uint64_t(int64_t(difference) >> 63);
}

inline uint64_t unzigzag(uint64_t value) {
    return (value >> 1) ^ (~(value & 1) + 1);
}

inline size_t varint_size(uint64_t value) {
    size_t size = 1;
    for (; value >= 0x80; value >>= 7)
        size++;
    return size;
}

// Writes value at out[*used], advancing *used (room for varint_size).
inline void put_varint(uint64_t value, uint8_t *out, size_t *used) {
    for (; value >= 0x80; value >>= 7)
        out[(*used)++] = uint8_t(value | 0x80);
    out[(*used)++] = uint8_t(value);
}

// Reads a varint at bytes[*at], advancing *at; false when it is cut short
// or longer than 64 bits.
inline bool get_varint(const uint8_t *bytes, size_t length, size_t *at, uint64_t *value) {
    *value = 0;
    for (int shift = 0;; shift += 7) {
        // A tenth byte holds the top bit alone.
        if (*at == length || (shift == 63 && bytes[*at] > 1))
            return false;
        uint8_t byte = bytes[(*at)++];
        *value |= uint64_t(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0)
            return true;
    }
}

} // namespace pgoutbox
