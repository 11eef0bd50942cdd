#include "pg/run_as.hpp"

extern "C" {
#include "access/skey.h"
#include "access/stratnum.h"
#include "catalog/indexing.h"
#include "catalog/pg_authid.h"
}

namespace pgoutbox::pg {

Oid extension_owner() {
    Oid extension = get_extension_oid("pg_outbox", true);
    if (!OidIsValid(extension))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("extension pg_outbox is not installed in this database"),
                        errhint("Run CREATE EXTENSION pg_outbox.")));

    Relation rel = table_open(ExtensionRelationId, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
                ObjectIdGetDatum(extension));
    SysScanDesc scan = systable_beginscan(rel, ExtensionOidIndexId, true, nullptr, 1, &key);
    HeapTuple tuple = systable_getnext(scan);
    Oid owner = HeapTupleIsValid(tuple) ? ((Form_pg_extension)GETSTRUCT(tuple))->extowner
                                        : BOOTSTRAP_SUPERUSERID;
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
    return owner;
}

static void begin(RunAs *scope, Oid user) {
    GetUserIdAndSecContext(&scope->saved_user, &scope->saved_security_context);
    SetUserIdAndSecContext(user, scope->saved_security_context | SECURITY_LOCAL_USERID_CHANGE |
                                     SECURITY_RESTRICTED_OPERATION);
    scope->guc_nest_level = NewGUCNestLevel();
    (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
}

void run_as_extension_owner(RunAs *scope) {
    begin(scope, extension_owner());
}

void run_as_table_owner(RunAs *scope, Relation rel) {
    begin(scope, rel->rd_rel->relowner);
}

char *qualified_name(Relation rel) {
    return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
                                      RelationGetRelationName(rel));
}

void refuse_forced_row_security(Relation rel) {
    if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity)
        ereport(
            ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("table %s forces row-level security on its owner",
                    RelationGetRelationName(rel)),
             errdetail("pg_outbox reads a registered table as its owner; a policy would hide "
                       "rows from that read and they would never be replicated."),
             errhint("ALTER TABLE %s NO FORCE ROW LEVEL SECURITY.", RelationGetRelationName(rel))));
}

void run_as_end(RunAs *scope) {
    AtEOXact_GUC(true, scope->guc_nest_level);
    SetUserIdAndSecContext(scope->saved_user, scope->saved_security_context);
}

} // namespace pgoutbox::pg
