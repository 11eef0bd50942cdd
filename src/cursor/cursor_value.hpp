// The backfill cursor and its stored form.  Pure C++, unit-tested.
//
// Sentry keeps the cursor in Redis as json.dumps((lower_bound, version)),
// i.e. "[12, 3]"; pg_outbox writes exactly that and reads any JSON array of
// two integers (whitespace as JSON allows), so both can share a key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pgoutbox {

struct Cursor {
    int64_t lower_bound;
    int32_t version;
    bool operator==(const Cursor &other) const {
        return lower_bound == other.lower_bound && version == other.version;
    }
};

// The state of a key nobody wrote yet.
constexpr Cursor initial_cursor{0, 1};

std::string format_cursor(const Cursor &cursor);

// nullopt unless text is a JSON array of exactly two integers, the first an
// int64 and the second an int32.
std::optional<Cursor> parse_cursor(std::string_view text);

// A watermark of the cross-silo cascade, as Sentry keeps it in Redis:
// json.dumps((low, transaction_id)), i.e. [12, "5f0c..."].  Every advance
// stores sha1 of the previous transaction id (hex); a missing key starts at
// a random one.
struct Watermark {
    int64_t low;
    std::string transaction_id;
    bool operator==(const Watermark &other) const {
        return low == other.low && transaction_id == other.transaction_id;
    }
};

std::string format_watermark(const Watermark &watermark);

// nullopt unless text is a JSON array of an int64 and a string of printable
// ASCII without escapes (what Sentry and pg_outbox write: hex digits).
std::optional<Watermark> parse_watermark(std::string_view text);

} // namespace pgoutbox
