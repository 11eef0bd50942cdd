#include "delivery/session_pass.hpp"

namespace pgoutbox {

namespace {

constexpr long stale_pass_ms = 10000;

} // namespace

DrainPass *session_pass_resume(SessionPass *held, bool cell, bool control, const int32 *categories,
                               int ncategories, const char *cell_name) {
    if (held->pass == nullptr)
        return nullptr;
    if (drain_pass_reads(held->pass, cell, control, categories, ncategories, cell_name) &&
        !TimestampDifferenceExceeds(drain_pass_read_at(held->pass), GetCurrentTimestamp(),
                                    stale_pass_ms))
        return held->pass;
    session_pass_end(held);
    return nullptr;
}

DrainPass *session_pass_begin(SessionPass *held, bool cell, bool control, const int32 *categories,
                              int ncategories, const char *cell_name) {
    session_pass_end(held);
    held->pass = drain_pass_begin(cell, control, categories, ncategories, cell_name);
    return held->pass;
}

void session_pass_end(SessionPass *held) {
    if (held->pass != nullptr)
        drain_pass_end(held->pass);
    held->pass = nullptr;
}

} // namespace pgoutbox
