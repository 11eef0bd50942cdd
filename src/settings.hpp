// GUC-backed settings shared by the modules (defined in pg_outbox.cpp).
#pragma once

namespace pgoutbox {

enum SiloMode { SILO_MODE_MONOLITH = 0, SILO_MODE_CELL = 1, SILO_MODE_CONTROL = 2 };

extern int silo_mode; // outbox.silo_mode

const char *silo_mode_name(int mode);

} // namespace pgoutbox
