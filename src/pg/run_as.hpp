// Who runs as whom.  pg_outbox runs three kinds of code on behalf of roles
// that hold no privilege on its objects:
//   * its own SQL (registry, options, cursors, shard errors): as the
//     extension's owner, so that an application role needs no grant;
//   * reads of a user's table that it starts itself (backfill batches, id
//     ranges for monitoring): as the table's owner, so that the owner's code
//     reached from them (index predicates and expressions, operators, casts,
//     policies) never runs with more privilege than the owner has;
//   * handlers: as the owner of the handler function (drain/).
// Both scopes here add SECURITY_RESTRICTED_OPERATION and pin search_path to
// pg_catalog, pg_temp for their GUC nest level, as VACUUM, ANALYZE and CREATE
// INDEX do since CVE-2022-1552: a caller's search_path cannot redirect a name
// or an operator, and the code inside can neither SET ROLE nor create
// temporary objects that outlive it.  An ERROR in between is fine:
// transaction and subtransaction abort restore the user, the security
// context and the GUC nest level.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

struct RunAs {
    Oid saved_user;
    int saved_security_context;
    int guc_nest_level;
};

// Oid of pg_outbox's owner; ERROR when the extension is not installed here.
Oid extension_owner();

void run_as_extension_owner(RunAs *scope);
void run_as_table_owner(RunAs *scope, Relation rel);
void run_as_end(RunAs *scope);

// rel's name, schema-qualified and quoted, for the SQL that reads it.
char *qualified_name(Relation rel);

// ERROR when an SQL read of rel as its owner would go through row-level
// security (FORCE ROW LEVEL SECURITY): a policy would silently hide rows.
void refuse_forced_row_security(Relation rel);

} // namespace pgoutbox::pg
