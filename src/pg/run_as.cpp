#include "pg/run_as.hpp"

extern "C" {
#include "access/skey.h"
#include "access/stratnum.h"
#include "catalog/indexing.h"
#include "catalog/pg_authid.h"
#include "lib/stringinfo.h"
#include "storage/latch.h"
#include "utils/timeout.h"
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

#ifdef OUTBOX_CHECK_SCOPES
// Test builds (make SANITIZE=1): every setting, as the scope found it, one
// "name=value" line each, so that its end can prove it left them so.
static char *all_settings() {
    StringInfoData text;
    initStringInfo(&text);
    int n = GetNumConfigOptions();
    for (int i = 0; i < n; i++) {
        const char *values[32];
        bool noshow;
        GetConfigOptionByNum(i, values, &noshow);
        const char *value = GetConfigOption(values[0], true, false);
        appendStringInfo(&text, "%s=%s\n", values[0], value ? value : "");
    }
    return text.data;
}

static void check_settings_restored(const char *found) {
    for (const char *line = found; *line != '\0';) {
        const char *eq = strchr(line, '=');
        const char *end = strchr(eq, '\n');
        char *name = pnstrdup(line, eq - line);
        char *was = pnstrdup(eq + 1, end - eq - 1);
        const char *now = GetConfigOption(name, true, false);
        if (strcmp(was, now ? now : "") != 0)
            elog(
                ERROR,
                "pg_outbox: setting %s was \"%s\" before an owner-run scope and is \"%s\" after it",
                name, was, now ? now : "");
        line = end + 1;
    }
}
#endif

int owner_code_timeout_ms = 5000;
int owner_lock_timeout_ms = 1000;

namespace {

// The deadline of the outermost bounded scope open, if any.
TimeoutId deadline_id = MAX_TIMEOUTS;
volatile sig_atomic_t deadline_passed = false;
bool armed = false;
int bounded_depth = 0;      // bounded scopes open
int bounded_xact_level = 0; // the (sub)transaction the outermost opened in
bool callbacks_registered = false;

void on_deadline() {
    deadline_passed = true;
    InterruptPending = true;
    QueryCancelPending = true;
    SetLatch(MyLatch);
}

void disarm() {
    if (armed)
        disable_timeout(deadline_id, false);
    armed = false;
    bounded_depth = 0;
}

// An ERROR ends the scopes of the (sub)transaction it aborts without
// run_as_end: their deadline must not fire in whatever runs next.
void on_xact(XactEvent event, void *) {
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
        disarm();
}

void on_subxact(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
    if (event != SUBXACT_EVENT_ABORT_SUB || bounded_depth == 0)
        return;
    if (GetCurrentTransactionNestLevel() <= bounded_xact_level)
        disarm();
    else if (armed && deadline_passed) {
        // The owner's code caught the cancel (an exception block WHEN
        // query_canceled): it is cancelled again at its next interrupt check.
        InterruptPending = true;
        QueryCancelPending = true;
    }
}

// The cancel the deadline caused reads as what it is.  An error context
// callback can still set the message of the error being raised: the cancel
// is raised by ProcessInterrupts, where no one else can name the table.
void name_deadline(void *arg) {
    auto *scope = (RunAs *)arg;
    if (deadline_passed && geterrcode() == ERRCODE_QUERY_CANCELED)
        errmsg("owner code of table %s ran longer than outbox.owner_code_timeout (%d ms)",
               NameStr(scope->table), owner_code_timeout_ms);
    else if (geterrcode() == ERRCODE_LOCK_NOT_AVAILABLE)
        errcontext("owner code of table %s, under outbox.owner_lock_timeout (%d ms)",
                   NameStr(scope->table), owner_lock_timeout_ms);
}

// The same for pg_outbox's own wait for a table's lock (open_user_table).
void name_lock_wait(void *arg) {
    if (geterrcode() == ERRCODE_LOCK_NOT_AVAILABLE)
        errmsg("could not lock table %s within outbox.owner_lock_timeout (%d ms)",
               NameStr(*(NameData *)arg), owner_lock_timeout_ms);
}

char *milliseconds(int ms) {
    return psprintf("%d", ms);
}

} // namespace

static void begin(RunAs *scope, Oid user) {
#ifdef OUTBOX_CHECK_SCOPES
    scope->settings = all_settings();
#endif
    scope->bounded = false;
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

void run_as_table_owner_for_caller(RunAs *scope, Relation rel) {
    begin(scope, rel->rd_rel->relowner);
}

void run_as_table_owner(RunAs *scope, Relation rel) {
    begin(scope, rel->rd_rel->relowner);
    scope->bounded = true;
    namestrcpy(&scope->table, RelationGetRelationName(rel));
    (void)set_config_option("lock_timeout", milliseconds(owner_lock_timeout_ms), PGC_SUSET,
                            PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    scope->deadline.callback = name_deadline;
    scope->deadline.arg = scope;
    scope->deadline.previous = error_context_stack;
    error_context_stack = &scope->deadline;
    if (bounded_depth++ > 0 || owner_code_timeout_ms <= 0)
        return;
    armed = true;
    if (!callbacks_registered) {
        RegisterXactCallback(on_xact, nullptr);
        RegisterSubXactCallback(on_subxact, nullptr);
        callbacks_registered = true;
    }
    if (deadline_id == MAX_TIMEOUTS)
        deadline_id = RegisterTimeout(USER_TIMEOUT, on_deadline);
    deadline_passed = false;
    bounded_xact_level = GetCurrentTransactionNestLevel();
    enable_timeout_after(deadline_id, owner_code_timeout_ms);
}

bool owner_bound_passed(const ErrorData *error) {
    return error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
           (error->sqlerrcode == ERRCODE_QUERY_CANCELED && deadline_passed);
}

Relation open_user_table(Oid relid, LOCKMODE mode) {
    int level = NewGUCNestLevel();
    (void)set_config_option("lock_timeout", milliseconds(owner_lock_timeout_ms), PGC_SUSET,
                            PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    ErrorContextCallback context;
    NameData table;
    char *name = get_rel_name(relid);
    namestrcpy(&table, name ? name : "(dropped)");
    context.callback = name_lock_wait;
    context.arg = &table;
    context.previous = error_context_stack;
    error_context_stack = &context;
    Relation rel = try_relation_open(relid, mode);
    error_context_stack = context.previous;
    AtEOXact_GUC(false, level);
    return rel;
}

char *qualified_name(Relation rel) {
    return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
                                      RelationGetRelationName(rel));
}

char *qualified_name(Oid relid) {
    return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
                                      get_rel_name(relid));
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
    if (scope->bounded) {
        error_context_stack = scope->deadline.previous;
        if (--bounded_depth == 0 && armed) {
            armed = false;
            disable_timeout(deadline_id, false);
            // Passed after the owner's last statement: not yet acted on.
            if (deadline_passed) {
                QueryCancelPending = false;
                ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED),
                                errmsg("owner code of table %s ran longer than "
                                       "outbox.owner_code_timeout (%d ms)",
                                       NameStr(scope->table), owner_code_timeout_ms)));
            }
        }
    }
    // false: whatever was set inside the scope is undone, a plain SET or
    // set_config(..., false) by the owner's code included (true would keep
    // those for whoever runs next, as 0.9.0 did).
    AtEOXact_GUC(false, scope->guc_nest_level);
    SetUserIdAndSecContext(scope->saved_user, scope->saved_security_context);
#ifdef OUTBOX_CHECK_SCOPES
    check_settings_restored(scope->settings);
#endif
}

} // namespace pgoutbox::pg
