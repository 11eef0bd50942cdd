// Plain C-style code: PostgreSQL errors unwind through it.
#include "relocation/move/move_step.hpp"

#include "pg/spi.hpp"

namespace pgoutbox::relocation {

bool move_step() {
    static SPIPlanPtr plan = nullptr;
    pg::spi_run_kept(&plan, "moving organizations",
                     "SELECT pg_catalog.to_regprocedure('outbox._move_step()') IS NOT NULL", 0,
                     nullptr, nullptr, nullptr, true, SPI_OK_SELECT);
    bool isnull;
    if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
        return false;
    pg::spi_run("moving organizations", "SELECT outbox._move_step()", 0, nullptr, nullptr, nullptr,
                false, 0, SPI_OK_SELECT);
    return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

} // namespace pgoutbox::relocation
