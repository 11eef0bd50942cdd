// The step of the moves control drives (docs/relocation.md, "Moving an
// organization between cells"): the worker asks for the next step here, so
// that its dependence on relocation is an include that test/layers.sh
// sees.  Each step's calls to the cells are
// extension/functions/69_relocation/50_move_control.sql's (_move_step,
// _move_advance); where the move goes after the cells' answers is the
// step machine's (move_machine.hpp).
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::relocation {

// The next step of one move on control, in the caller's transaction (with
// SPI), which may call the cells; whether a move has more to do at once.
// False, and nothing done, for an extension older than moves.
bool move_step();

} // namespace pgoutbox::relocation
