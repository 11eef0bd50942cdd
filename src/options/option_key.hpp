// Names of pg_outbox options and registry keys.  Pure C++, unit-tested
// without a server.
//
// An option key is also the name of the GUC that overrides it, so it has to
// be a valid custom GUC name; GUC names are case-insensitive, so table keys
// are lower case:
//   outbox_replication.<table_key>.replication_version
//   outbox_replication.<table_key>.backfill.target_cells
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pgoutbox {

enum class OptionKind { ReplicationVersion, TargetCells };

struct OptionKey {
    OptionKind kind;
    std::string table_key;
};

// [a-z_][a-z0-9_]*, at most 63 bytes (a PostgreSQL identifier's length).
bool valid_table_key(std::string_view key);

std::optional<OptionKey> parse_option_key(std::string_view key);

const char *option_kind_name(OptionKind kind);

} // namespace pgoutbox
