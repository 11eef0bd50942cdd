#include "pg/ids.hpp"

#include "pg/spi.hpp"

#include <algorithm>

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

void sort_ids(int64 *ids, long count) {
    if (!std::is_sorted(ids, ids + count))
        std::sort(ids, ids + count);
}

void ids_condition(const char *column, const int64 *ids, int n, IdsCondition *out) {
    // Sorted: the difference as unsigned is exact, where as signed it can
    // overflow (ids from -2^63 to 2^63 - 1).
    bool gapless = (uint64)ids[n - 1] - (uint64)ids[0] == (uint64)(n - 1);
    out->sql = psprintf("%s OPERATOR(pg_catalog.>=) $2 AND %s OPERATOR(pg_catalog.<=) $3%s%s%s",
                        column, column, gapless ? "" : " AND ", gapless ? "" : column,
                        gapless ? "" : " OPERATOR(pg_catalog.=) ANY ($1)");
    out->types[0] = INT8ARRAYOID;
    out->types[1] = out->types[2] = INT8OID;
    // Without a gap the condition does not read $1.
    out->args[0] = gapless ? PointerGetDatum(construct_empty_array(INT8OID)) : int8_array(ids, n);
    out->args[1] = Int64GetDatum(ids[0]);
    out->args[2] = Int64GetDatum(ids[n - 1]);
}

} // namespace pgoutbox::pg
