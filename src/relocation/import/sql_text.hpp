// Text of SQL statements put together from parts, without temporaries
// (rows_statement.cpp, table_statements.cpp).  Pure C++.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace pgoutbox::relocation {

// out with parts appended (one allocation at most).
inline void add(std::string &out, std::initializer_list<std::string_view> parts) {
    size_t size = out.size();
    for (std::string_view part : parts)
        size += part.size();
    out.reserve(size);
    for (std::string_view part : parts)
        out.append(part);
}

inline std::string joined(std::initializer_list<std::string_view> parts) {
    std::string out;
    add(out, parts);
    return out;
}

} // namespace pgoutbox::relocation
