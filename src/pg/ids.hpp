// Random tokens and sorted int64 ids, for the sinks that name what they
// hand out (a consumer's claims, a link's batches and sessions) and look
// ids up in sorted arrays.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

// A random positive int64 from pg_strong_random: a claim's, a batch's or a
// connection's name; an ERROR when no random bytes can be had.
int64 random_token();

// qsort and bsearch order of int64 values.
int compare_int64(const void *a, const void *b);

} // namespace pgoutbox::pg
