// The step machine of the moves control drives (docs/relocation.md,
// "Moving an organization between cells"): the worker asks for the next
// step here, so that its dependence on relocation is an include that
// test/layers.sh sees.  The machine itself is still
// extension/functions/69_relocation/50_move_control.sql (_move_step, _move_advance),
// which issue 45 brings into this folder.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::relocation {

// The next step of one move on control, in the caller's transaction (with
// SPI), which may call the cells; whether a move has more to do at once.
// False, and nothing done, for an extension older than moves.
bool move_step();

} // namespace pgoutbox::relocation
