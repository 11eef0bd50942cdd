// outbox.register_table, outbox.unregister_table and
// outbox.set_replication_version are this one C function.  It checks that the
// caller owns the table (a SECURITY DEFINER function could not: it no longer
// knows who called it), then runs outbox._<same name>(<same arguments>), the
// SQL body, as pg_outbox's owner with search_path pinned.  The bodies are not
// executable by anyone else, so the ownership check cannot be skipped.
//
// Written without C++ objects that own resources: errors from SPI unwind
// through it freely.
#include "pg/guard.hpp"
#include "pg/privileged.hpp"

extern "C" {
#include "lib/stringinfo.h"
}

OUTBOX_FUNCTION(table_owner_gate) {
    Oid function = fcinfo->flinfo->fn_oid;
    const char *name = get_func_name(function);
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("tbl must not be NULL"),
                        errdetail("outbox.%s needs the table to act on.", name)));
    Oid relid = PG_GETARG_OID(0);
    if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));
    if (!pg_class_ownercheck(relid, GetUserId()))
        ereport(ERROR,
                (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                 errmsg("must be owner of table %s to call outbox.%s", get_rel_name(relid), name)));

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

    pgoutbox::pg::PrivilegedScope scope;
    pgoutbox::pg::privileged_begin(&scope);
    SPI_connect();
    int rc = SPI_execute_with_args(sql.data, nargs, argtypes, values, nulls, false, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "pg_outbox: %s failed: %s", sql.data, SPI_result_code_string(rc));
    SPI_finish();
    pgoutbox::pg::privileged_end(&scope);
    PG_RETURN_VOID();
}

// outbox._invalidate_cache(): every backend drops its cached registry at the
// end of this transaction (this backend: at the next command).
OUTBOX_FUNCTION(invalidate_cache) {
    Oid registry = get_relname_relid("registered_tables", get_namespace_oid("outbox", false));
    CacheInvalidateRelcacheByRelid(registry);
    PG_RETURN_VOID();
}
