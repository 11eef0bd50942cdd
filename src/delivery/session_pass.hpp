// The pass a session's calls walk one after another (outbox.drain(),
// outbox.claim()): a call goes on where the last one stopped, so a backlog
// costs one read of the outbox per pass, not one per call.  Each caller
// keeps its own SessionPass (a drain and a claim in one session do not
// share one).
#pragma once

#include "delivery/drain_pass.hpp"

namespace pgoutbox {

struct SessionPass {
    DrainPass *pass; // NULL: none
};

// The pass *held holds, when it was begun for the same arguments and its
// partition was read less than 10 s ago (after that its rows are likely
// delivered by the worker, and new rows wait for it); else NULL, and the
// pass it held is ended.
DrainPass *session_pass_resume(SessionPass *held, bool cell, bool control, const int32 *categories,
                               int ncategories, const char *cell_name);

// A new pass for these arguments (drain_pass_begin), held in *held.
DrainPass *session_pass_begin(SessionPass *held, bool cell, bool control, const int32 *categories,
                              int ncategories, const char *cell_name);

void session_pass_end(SessionPass *held);

} // namespace pgoutbox
