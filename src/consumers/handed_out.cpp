#include "consumers/handed_out.hpp"

#include "encoding/varint.hpp"

namespace pgoutbox {

namespace {

// Differences from the number before: each column of the rows and of the
// messages has its own.
struct Previous {
    uint64_t block = 0, id = 0, category = 0, object = 0, added = 0;
};

void put_difference(uint64_t value, uint64_t *previous, uint8_t *out, size_t *used) {
    put_varint(zigzag(value - *previous), out, used);
    *previous = value;
}

bool get_difference(const uint8_t *bytes, size_t length, size_t *at, uint64_t *previous) {
    uint64_t value;
    if (!get_varint(bytes, length, at, &value))
        return false;
    *previous += unzigzag(value);
    return true;
}

} // namespace

size_t handed_out_max_bytes(size_t nrows, size_t nmessages) {
    // A varint of 64 bits takes 10 bytes; an offset, 3.
    constexpr size_t varint = 10, counts = 2 * varint, row = varint + 3 + varint,
                     message = 4 * varint;
    return counts + nrows * row + nmessages * message;
}

size_t encode_handed_out(const HandedOutRow *rows, size_t nrows, const HandedOutMessage *messages,
                         size_t nmessages, uint8_t *out) {
    size_t used = 0;
    if (nrows == 0 && nmessages == 0)
        return 0;
    put_varint(nrows, out, &used);
    put_varint(nmessages, out, &used);
    Previous previous;
    for (size_t r = 0; r < nrows; r++) {
        put_difference(rows[r].block, &previous.block, out, &used);
        put_varint(rows[r].offset, out, &used);
        put_difference(uint64_t(rows[r].id), &previous.id, out, &used);
    }
    for (size_t m = 0; m < nmessages; m++) {
        put_varint(uint32_t(messages[m].nrows), out, &used);
        put_difference(uint64_t(int64_t(messages[m].category)), &previous.category, out, &used);
        put_difference(uint64_t(messages[m].object), &previous.object, out, &used);
        put_difference(uint64_t(messages[m].added), &previous.added, out, &used);
    }
    return used;
}

bool handed_out_counts(const uint8_t *bytes, size_t length, size_t *nrows, size_t *nmessages) {
    *nrows = *nmessages = 0;
    if (length == 0)
        return true;
    size_t at = 0;
    uint64_t rows, messages;
    // A row takes three bytes at least, a message four.
    if (!get_varint(bytes, length, &at, &rows) || !get_varint(bytes, length, &at, &messages) ||
        rows > length / 3 || messages > length / 4)
        return false;
    *nrows = rows;
    *nmessages = messages;
    return true;
}

bool decode_handed_out(const uint8_t *bytes, size_t length, HandedOutRow *rows,
                       HandedOutMessage *messages) {
    size_t nrows, nmessages;
    if (!handed_out_counts(bytes, length, &nrows, &nmessages))
        return false;
    if (length == 0)
        return true;
    size_t at = 0;
    uint64_t count;
    (void)get_varint(bytes, length, &at, &count);
    (void)get_varint(bytes, length, &at, &count);
    Previous previous;
    for (size_t r = 0; r < nrows; r++) {
        uint64_t offset;
        if (!get_difference(bytes, length, &at, &previous.block) || previous.block > UINT32_MAX ||
            !get_varint(bytes, length, &at, &offset) || offset > UINT16_MAX ||
            !get_difference(bytes, length, &at, &previous.id))
            return false;
        rows[r] = HandedOutRow{uint32_t(previous.block), uint16_t(offset), int64_t(previous.id)};
    }
    size_t covered = 0;
    for (size_t m = 0; m < nmessages; m++) {
        uint64_t message_rows;
        if (!get_varint(bytes, length, &at, &message_rows) || message_rows == 0 ||
            message_rows > nrows - covered ||
            !get_difference(bytes, length, &at, &previous.category) ||
            int64_t(previous.category) < INT32_MIN || int64_t(previous.category) > INT32_MAX ||
            !get_difference(bytes, length, &at, &previous.object) ||
            !get_difference(bytes, length, &at, &previous.added))
            return false;
        covered += message_rows;
        messages[m] = HandedOutMessage{int32_t(message_rows), int32_t(int64_t(previous.category)),
                                       int64_t(previous.object), int64_t(previous.added)};
    }
    return at == length && covered == nrows;
}

} // namespace pgoutbox
