#include "resync/id_chunks.hpp"

#include "encoding/varint.hpp"

namespace pgoutbox {

size_t encode_id_chunk(const int64_t *ids, size_t n, uint8_t *out, size_t *taken) {
    size_t used = 0;
    uint64_t previous = 0;
    size_t i = 0;
    for (; i < n && i < size_t(id_chunk_ids); i++) {
        uint64_t value = zigzag(uint64_t(ids[i]) - previous);
        if (used + varint_size(value) > id_chunk_bytes)
            break;
        put_varint(value, out, &used);
        previous = uint64_t(ids[i]);
    }
    *taken = i;
    return used;
}

int decode_id_chunk(const uint8_t *bytes, size_t length, int64_t *out) {
    int count = 0;
    uint64_t previous = 0;
    for (size_t at = 0; at < length;) {
        uint64_t value;
        if (!get_varint(bytes, length, &at, &value))
            return -1;
        if (count == id_chunk_ids)
            return -1;
        previous += unzigzag(value);
        out[count++] = int64_t(previous);
    }
    return count;
}

} // namespace pgoutbox
