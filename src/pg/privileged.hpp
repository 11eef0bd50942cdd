// Running pg_outbox's own SQL on behalf of any role.
//
// Capture reads the registry and register_table writes it for roles that
// hold no privilege on pg_outbox's tables, so that SQL runs as the
// extension's owner with search_path pinned to pg_catalog (a caller's
// search_path cannot redirect a name or an operator).  A PostgreSQL error in
// between is fine: transaction and subtransaction abort restore both the user
// and the GUC nest level.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

struct PrivilegedScope {
    Oid saved_user;
    int saved_security_context;
    int guc_nest_level;
};

// Oid of pg_outbox's owner; ERROR when the extension is not installed here.
Oid extension_owner();

void privileged_begin(PrivilegedScope *scope);
void privileged_end(PrivilegedScope *scope);

} // namespace pgoutbox::pg
