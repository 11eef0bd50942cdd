// The drop hook of the DDL guard (ddl_guard.cpp), installed by _PG_init.
#pragma once

namespace pgoutbox {

void install_drop_hook();

} // namespace pgoutbox
