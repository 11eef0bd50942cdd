#include "pg/spi.hpp"

namespace pgoutbox::pg {

uint64 spi_run(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
               const char *nulls, bool read_only, long limit, int expected) {
    int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, limit);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    return SPI_processed;
}

} // namespace pgoutbox::pg
