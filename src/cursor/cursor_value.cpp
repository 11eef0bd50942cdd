#include "cursor/cursor_value.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>

namespace pgoutbox {

std::string format_cursor(const Cursor &cursor) {
    return "[" + std::to_string(cursor.lower_bound) + ", " + std::to_string(cursor.version) + "]";
}

namespace {

bool is_json_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void skip_space(std::string_view text, size_t &pos) {
    while (pos < text.size() && is_json_space(text[pos]))
        pos++;
}

// A JSON integer: -?(0|[1-9][0-9]*), no fraction, no exponent.
std::optional<int64_t> parse_integer(std::string_view text, size_t &pos) {
    size_t start = pos;
    if (pos < text.size() && text[pos] == '-')
        pos++;
    size_t digits = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        pos++;
    size_t ndigits = pos - digits;
    if (ndigits == 0 || (ndigits > 1 && text[digits] == '0') || ndigits > 19)
        return std::nullopt;
    std::string number(text.substr(start, pos - start));
    errno = 0;
    long long value = std::strtoll(number.c_str(), nullptr, 10);
    if (errno == ERANGE)
        return std::nullopt;
    return static_cast<int64_t>(value);
}

// A JSON string of printable ASCII other than " and \, without escapes.
std::optional<std::string> parse_plain_string(std::string_view text, size_t &pos) {
    if (pos >= text.size() || text[pos++] != '"')
        return std::nullopt;
    size_t start = pos;
    while (pos < text.size() && text[pos] != '"') {
        char c = text[pos];
        if (c < 0x20 || c > 0x7e || c == '\\')
            return std::nullopt;
        pos++;
    }
    if (pos >= text.size())
        return std::nullopt;
    return std::string(text.substr(start, pos++ - start));
}

} // namespace

std::string format_watermark(const Watermark &watermark) {
    return "[" + std::to_string(watermark.low) + ", \"" + watermark.transaction_id + "\"]";
}

std::optional<Watermark> parse_watermark(std::string_view text) {
    size_t pos = 0;
    skip_space(text, pos);
    if (pos >= text.size() || text[pos++] != '[')
        return std::nullopt;
    skip_space(text, pos);
    auto low = parse_integer(text, pos);
    skip_space(text, pos);
    if (!low || pos >= text.size() || text[pos++] != ',')
        return std::nullopt;
    skip_space(text, pos);
    auto id = parse_plain_string(text, pos);
    skip_space(text, pos);
    if (!id || pos >= text.size() || text[pos++] != ']')
        return std::nullopt;
    skip_space(text, pos);
    if (pos != text.size())
        return std::nullopt;
    return Watermark{*low, *id};
}

std::optional<Cursor> parse_cursor(std::string_view text) {
    size_t pos = 0;
    skip_space(text, pos);
    if (pos >= text.size() || text[pos++] != '[')
        return std::nullopt;
    skip_space(text, pos);
    auto lower = parse_integer(text, pos);
    skip_space(text, pos);
    if (!lower || pos >= text.size() || text[pos++] != ',')
        return std::nullopt;
    skip_space(text, pos);
    auto version = parse_integer(text, pos);
    skip_space(text, pos);
    if (!version || pos >= text.size() || text[pos++] != ']')
        return std::nullopt;
    skip_space(text, pos);
    if (pos != text.size() || *version < INT32_MIN || *version > INT32_MAX)
        return std::nullopt;
    return Cursor{*lower, static_cast<int32_t>(*version)};
}

} // namespace pgoutbox
