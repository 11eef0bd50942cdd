// outbox.register_table, outbox.unregister_table,
// outbox.set_replication_version, outbox.register_foreign_key,
// outbox.unregister_foreign_key, outbox.set_relocation_scope and
// outbox.set_relocation_collision_hook pass through this gate.  It checks that the
// caller owns the table and, for the table's own registration and unless a
// superuser, holds REGISTER on its category (outbox.grant_category), then
// runs outbox._<same
// name>(<same arguments>), the SQL body, as pg_outbox's owner with
// search_path pinned.  A SECURITY DEFINER function could not do the checks:
// it no longer knows who called it.  The bodies are not executable by anyone
// else, so the checks cannot be skipped.
//
// Written without C++ objects that own resources: errors from SPI unwind
// through it freely.
#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "lib/stringinfo.h"
}

using namespace pgoutbox;

// Which category a caller that is not a superuser must hold REGISTER on.
enum class CategoryCheck {
    Named,      // the one the second argument names (register_table)
    Registered, // the table's own
    None,       // none: owning the table is enough (its cross-silo references)
};

// Runs outbox._<name>(the caller's arguments) as the extension's owner once
// the caller passed the checks.
static Datum table_owner_gate(FunctionCallInfo fcinfo, const char *name, CategoryCheck check) {
    Oid function = fcinfo->flinfo->fn_oid;
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("tbl must not be NULL"),
                        errdetail("outbox.%s needs the table to act on.", name)));
    Oid relid = PG_GETARG_OID(0);
    Oid caller = GetUserId();
    // Owner first, lock second (a caller may not lock others' tables), then
    // both again: a concurrent DROP or ALTER OWNER cannot slip in between
    // the checks and the body.
    for (int pass = 0; pass < 2; pass++) {
        if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                            errmsg("tbl: relation with OID %u does not exist", relid)));
        if (!pg::owns_table(relid, caller))
            ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                            errmsg("must be owner of table %s to call outbox.%s",
                                   get_rel_name(relid), name)));
        if (pass == 0)
            LockRelationOid(relid, ShareUpdateExclusiveLock);
    }

    Oid *argtypes;
    int nargs;
    (void)get_func_signature(function, &argtypes, &nargs);
    StringInfoData sql;
    initStringInfo(&sql);
    appendStringInfo(&sql, "SELECT outbox.%s(", quote_identifier(psprintf("_%s", name)));
    Datum *values = (Datum *)palloc(sizeof(Datum) * nargs);
    char *nulls = (char *)palloc(nargs + 1);
    for (int i = 0; i < nargs; i++) {
        appendStringInfo(&sql, "%s$%d", i > 0 ? ", " : "", i + 1);
        values[i] = PG_GETARG_DATUM(i);
        nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
    }
    nulls[nargs] = '\0';
    appendStringInfoChar(&sql, ')');

    if (!superuser_arg(caller) && check != CategoryCheck::None) {
        bool names_category = check == CategoryCheck::Named;
        Oid types[3] = {OIDOID, REGCLASSOID, TEXTOID};
        Datum args[3] = {ObjectIdGetDatum(caller), ObjectIdGetDatum(relid),
                         names_category ? values[1] : (Datum)0};
        char check_nulls[4] = {' ', ' ', names_category && nulls[1] == ' ' ? ' ' : 'n', '\0'};
        pg::spi_run_as(pg::extension_owner_role, "checking the category privilege",
                       "SELECT outbox._check_register_privilege($1, $2, $3)", 3, types, args,
                       check_nulls, false, 0, SPI_OK_SELECT);
    }
    pg::spi_run_as(pg::extension_owner_role, sql.data, sql.data, nargs, argtypes, values, nulls,
                   false, 0, SPI_OK_SELECT);
    PG_RETURN_VOID();
}

OUTBOX_FUNCTION(outbox_register_table) {
    return table_owner_gate(fcinfo, "register_table", CategoryCheck::Named);
}

OUTBOX_FUNCTION(outbox_unregister_table) {
    return table_owner_gate(fcinfo, "unregister_table", CategoryCheck::Registered);
}

OUTBOX_FUNCTION(outbox_set_replication_version) {
    return table_owner_gate(fcinfo, "set_replication_version", CategoryCheck::Registered);
}

OUTBOX_FUNCTION(outbox_register_foreign_key) {
    return table_owner_gate(fcinfo, "register_foreign_key", CategoryCheck::None);
}

OUTBOX_FUNCTION(outbox_unregister_foreign_key) {
    return table_owner_gate(fcinfo, "unregister_foreign_key", CategoryCheck::None);
}

OUTBOX_FUNCTION(outbox_set_relocation_scope) {
    return table_owner_gate(fcinfo, "set_relocation_scope", CategoryCheck::None);
}

OUTBOX_FUNCTION(outbox_set_relocation_collision_hook) {
    return table_owner_gate(fcinfo, "set_relocation_collision_hook", CategoryCheck::None);
}
