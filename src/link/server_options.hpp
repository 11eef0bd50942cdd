// The libpq options of a link's foreign server and of the worker's user
// mapping for it (postgres_fdw's objects; any wrapper's options that are not
// libpq's are left out), and the checks that keep a link from handing the
// worker's credentials to a server its owner could point elsewhere.
#pragma once

#include "link/link.hpp"

namespace pgoutbox {

// Fills target's keywords, values and conninfo from its foreign server and
// the worker's user mapping for it (libpq's options only); NULL, or why the
// link cannot use the server: checked, not raised, so that one link's bad
// server stops that link only.
const char *connection_options(LinkTarget *target);

} // namespace pgoutbox
