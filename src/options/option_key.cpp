#include "options/option_key.hpp"

namespace pgoutbox {

namespace {
constexpr std::string_view prefix = "outbox_replication.";
constexpr std::string_view version_suffix = ".replication_version";
constexpr std::string_view cells_suffix = ".backfill.target_cells";

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
} // namespace

bool valid_table_key(std::string_view key) {
    if (key.empty() || key.size() > 63)
        return false;
    for (size_t i = 0; i < key.size(); i++) {
        char c = key[i];
        bool ok = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

std::optional<OptionKey> parse_option_key(std::string_view key) {
    if (key.substr(0, prefix.size()) != prefix)
        return std::nullopt;
    std::string_view rest = key.substr(prefix.size());
    OptionKind kind;
    if (ends_with(rest, version_suffix)) {
        kind = OptionKind::ReplicationVersion;
        rest.remove_suffix(version_suffix.size());
    } else if (ends_with(rest, cells_suffix)) {
        kind = OptionKind::TargetCells;
        rest.remove_suffix(cells_suffix.size());
    } else {
        return std::nullopt;
    }
    if (!valid_table_key(rest))
        return std::nullopt;
    return OptionKey{kind, std::string(rest)};
}

const char *option_kind_name(OptionKind kind) {
    return kind == OptionKind::ReplicationVersion ? "replication_version" : "target_cells";
}

} // namespace pgoutbox
