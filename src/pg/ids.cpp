#include "pg/ids.hpp"

namespace pgoutbox::pg {

int64 random_token() {
    uint64 token;
    if (!pg_strong_random(&token, sizeof token))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("pg_outbox: could not generate a random token")));
    return (int64)(token >> 1) + 1; // 1 to 2^63 - 1
}

int compare_int64(const void *a, const void *b) {
    int64 x = *(const int64 *)a, y = *(const int64 *)b;
    return (x > y) - (x < y);
}

} // namespace pgoutbox::pg
