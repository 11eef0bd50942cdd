// The change log and the fence of the moves a cell takes part in
// (move_trigger.cpp): the triggers are SQL-callable functions; this is the
// part that is not a trigger.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::relocation {

// Installs, once per backend (_PG_init), the executor check that gives a
// stale client's UPDATE or DELETE naming an organization this cell gave
// away OBM01 rather than "0 rows".
void install_stale_statement_check();

} // namespace pgoutbox::relocation
