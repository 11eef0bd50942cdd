#include "pg/guard.hpp"

namespace pgoutbox::pg {

void raise_copied_error(int sqlstate, const char *message, const char *hint) {
    ereport(ERROR,
            (errcode(sqlstate), errmsg("%s", message), hint[0] != '\0' ? errhint("%s", hint) : 0));
    pg_unreachable();
}

} // namespace pgoutbox::pg
