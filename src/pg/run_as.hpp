// Who runs as whom.  pg_outbox runs three kinds of code on behalf of roles
// that hold no privilege on its objects:
//   * its own SQL (registry, options, cursors, shard errors): as the
//     extension's owner, so that an application role needs no grant;
//   * reads of a user's table that it starts itself (backfill batches, id
//     ranges for monitoring): as the table's owner, so that the owner's code
//     reached from them (index predicates and expressions, operators, casts,
//     policies) never runs with more privilege than the owner has;
//   * handlers: as the owner of the handler function (handlers/).
// Both scopes here add SECURITY_RESTRICTED_OPERATION and pin search_path to
// pg_catalog, pg_temp for their GUC nest level, as VACUUM, ANALYZE and CREATE
// INDEX do since CVE-2022-1552: a caller's search_path cannot redirect a name
// or an operator, and the code inside can neither SET ROLE nor create
// temporary objects that outlive it.  Whatever is set inside a scope, by
// pg_outbox or by the owner's code (SET, set_config(..., false)), is undone
// at its end (AtEOXact_GUC(false), as index.c and vacuum.c do); test builds
// (make SANITIZE=1) check that every setting is as the scope found it.
// An ERROR in between is fine:
// transaction and subtransaction abort restore the user, the security
// context and the GUC nest level.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

struct RunAs {
    Oid saved_user;
    int saved_security_context;
    int guc_nest_level;
    bool bounded;                  // under outbox.owner_code_timeout
    ErrorContextCallback deadline; // names the table when the deadline passes
    NameData table;
#ifdef OUTBOX_CHECK_SCOPES
    char *settings; // every setting as the scope found it
#endif
};

// Oid of pg_outbox's owner; ERROR when the extension is not installed here.
Oid extension_owner();

void run_as_extension_owner(RunAs *scope);
// Owner code that pg_outbox runs on its own initiative (backfill batches,
// cascade steps, tombstone checks, status reads): under a deadline armed in
// C, outbox.owner_code_timeout, that the owner's code cannot disarm (a
// set_config of statement_timeout would not reach it), and with lock_timeout
// = outbox.owner_lock_timeout for the locks it waits for.  When the deadline
// passes, the scope's statement fails with SQLSTATE 57014 and a message
// naming the table and the setting.  Nested scopes share the outermost's
// deadline; an ERROR disarms it (at the abort of the (sub)transaction that
// opened the scope).
void run_as_table_owner(RunAs *scope, Relation rel);
// The same without the deadline: owner code that runs for the caller's own
// statement (capture of an attached partition, an export), which that
// statement's statement_timeout bounds.
void run_as_table_owner_for_caller(RunAs *scope, Relation rel);
void run_as_end(RunAs *scope);

// Opens a user's table for pg_outbox's own work, waiting at most
// outbox.owner_lock_timeout for the lock (an application role may hold
// ACCESS EXCLUSIVE on its table for as long as it likes): an ERROR with
// SQLSTATE 55P03 naming the table after that, NULL when it does not exist.
Relation open_user_table(Oid relid, LOCKMODE mode);

// Whether error is one of those two bounds passing: a lock not had within
// outbox.owner_lock_timeout, or the deadline (not a cancel of the caller's).
bool owner_bound_passed(const ErrorData *error);

// The two bounds (GUCs, superuser only; milliseconds, 0: none).
extern int owner_code_timeout_ms;
extern int owner_lock_timeout_ms;

// rel's name, schema-qualified and quoted, for the SQL that reads it.
char *qualified_name(Relation rel);
// The same of a relation by OID, which must exist (an outbox partition).
char *qualified_name(Oid relid);

// ERROR when an SQL read of rel as its owner would go through row-level
// security (FORCE ROW LEVEL SECURITY): a policy would silently hide rows.
void refuse_forced_row_security(Relation rel);

} // namespace pgoutbox::pg
