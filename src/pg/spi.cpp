#include "pg/spi.hpp"

namespace pgoutbox::pg {

uint64 spi_run(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
               const char *nulls, bool read_only, long limit, int expected) {
    int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, limit);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    return SPI_processed;
}

SPIPlanPtr spi_prepare_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs,
                            Oid *types) {
    if (*plan == nullptr) {
        SPIPlanPtr prepared = SPI_prepare(sql, nargs, types);
        if (prepared == nullptr)
            elog(ERROR, "pg_outbox: preparing %s failed: %s", what,
                 SPI_result_code_string(SPI_result));
        (void)SPI_keepplan(prepared);
        *plan = prepared;
    }
    return *plan;
}

uint64 spi_run_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                    Datum *values, const char *nulls, bool read_only, int expected) {
    int rc = SPI_execute_plan(spi_prepare_kept(plan, what, sql, nargs, types), values, nulls,
                              read_only, 0);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    return SPI_processed;
}

} // namespace pgoutbox::pg
