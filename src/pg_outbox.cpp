// Module entry: magic block, GUCs.  Loaded by shared_preload_libraries or on
// first use; the GUCs exist either way.
#include "pg/postgres.hpp"

#include "settings.hpp"

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace pgoutbox {

int silo_mode = SILO_MODE_MONOLITH;

static const struct config_enum_entry silo_mode_options[] = {
    {"monolith", SILO_MODE_MONOLITH, false},
    {"cell", SILO_MODE_CELL, false},
    {"control", SILO_MODE_CONTROL, false},
    {nullptr, 0, false},
};

const char *silo_mode_name(int mode) {
    return silo_mode_options[mode].name;
}

} // namespace pgoutbox

void _PG_init(void) {
    DefineCustomEnumVariable(
        "outbox.silo_mode", "Silo this database runs as: monolith, cell or control.",
        "Writes to registered tables of the other silo are refused; monolith allows all.",
        &pgoutbox::silo_mode, pgoutbox::SILO_MODE_MONOLITH, pgoutbox::silo_mode_options, PGC_SIGHUP,
        0, nullptr, nullptr, nullptr);

    MarkGUCPrefixReserved("outbox");
}
