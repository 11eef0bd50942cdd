// outbox.check_models(): what Sentry checks when a model class is defined
// (a scope, no Excluded in a set) and what its relocation tests find
// (dangling models), over the tables of this database.  One row per
// finding; the finding names are stable (metrics() counts them, alert
// rules name them):
//   no_scope                 a table without a relocation scope
//   excluded_in_set          Excluded in a set of scopes
//   set_without_function     a set whose scope_function is missing
//   no_root                  tables of User or Organization but no root
//   dangling                 it does not reach its scope's root
//   nullable_path_only       it reaches the root only through nullable
//                            columns: its rows may belong to no root (not
//                            said of a set of scopes: its function decides)
//   unbreakable_cycle        a cycle of NOT NULL references
//   bad_primary_key          an exported table without a primary key of
//                            one integer column
//   forced_row_security      an exported table forcing row security on
//                            its owner (the export reads as the owner)
//   unregistered_cross_silo  integer *_id columns that are neither a
//                            foreign key nor a registered cross-silo
//                            reference (nor named in plain_columns)
//
// Written without C++ objects that own resources: errors unwind through it
// freely.
#include "pg/guard.hpp"
#include "relocation/model/models.hpp"

extern "C" {
#include "utils/tuplestore.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

void finding(ReturnSetInfo *rsinfo, const Model *table, const char *kind, const char *detail) {
    Datum values[3] = {table ? ObjectIdGetDatum(table->relid) : (Datum)0, CStringGetTextDatum(kind),
                       CStringGetTextDatum(detail)};
    bool nulls[3] = {table == nullptr, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

} // namespace

OUTBOX_FUNCTION(outbox_check_models) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    Models *models = load_models(true);
    int n = models->count;
    bool *member = (bool *)palloc0(sizeof(bool) * (n + 1));
    bool *reaches[2], *reaches_not_null[2];
    const int scopes[2] = {Organization, User};
    for (int s = 0; s < 2; s++) {
        reaches[s] = (bool *)palloc0(sizeof(bool) * (n + 1));
        reaches_not_null[s] = (bool *)palloc0(sizeof(bool) * (n + 1));
        bool any = false;
        for (int i = 0; i < n; i++)
            any |= (member[i] = (models->tables[i].scopes & scopes[s]) != 0);
        int root = root_of(models, scopes[s]);
        if (any && root < 0)
            finding(rsinfo, nullptr, "no_root",
                    psprintf("tables are in scope %s but it has no root: "
                             "SELECT outbox.set_relocation_root('%s', <table>)",
                             scope_name(scopes[s]), scope_name(scopes[s])));
        reach_root(n, models->edges, models->edge_count, member, root, reaches[s],
                   reaches_not_null[s]);
    }
    for (int i = 0; i < n; i++)
        member[i] = (models->tables[i].scopes & exported_scopes) != 0;
    bool *in_cycle = (bool *)palloc0(sizeof(bool) * (n + 1));
    not_null_cycles(n, models->edges, models->edge_count, member, in_cycle);

    for (int i = 0; i < n; i++) {
        const Model *t = &models->tables[i];
        if (t->scopes == 0) {
            finding(rsinfo, t, "no_scope",
                    psprintf("%s declares no relocation scope: "
                             "SELECT outbox.set_relocation_scope('%s', '{Organization}') "
                             "(or Excluded, User, Config, Global)",
                             t->key, t->qualified));
            continue;
        }
        if (t->scope_count > 1 && (t->scopes & Excluded))
            finding(rsinfo, t, "excluded_in_set",
                    "Excluded is in a set of scopes; it can only be a table's one scope");
        if (t->scope_count > 1 && t->function == nullptr)
            finding(rsinfo, t, "set_without_function",
                    t->has_function
                        ? "its scope_function no longer exists"
                        : "a set of scopes without a scope_function to decide each row's");
        if (!(t->scopes & exported_scopes))
            continue;
        for (int s = 0; s < 2; s++) {
            int root = root_of(models, scopes[s]);
            if (!(t->scopes & scopes[s]) || root < 0)
                continue;
            const char *root_key = models->tables[root].key;
            if (!reaches[s][i])
                finding(rsinfo, t, "dangling",
                        psprintf("in scope %s, it does not reach %s through foreign keys or "
                                 "registered cross-silo references of %s-scoped tables",
                                 scope_name(scopes[s]), root_key, scope_name(scopes[s])));
            else if (!reaches_not_null[s][i] && t->scope_count == 1)
                finding(rsinfo, t, "nullable_path_only",
                        psprintf("every path from it to %s goes through a nullable column: a row "
                                 "with NULL there belongs to no %s and is not exported",
                                 root_key, scope_name(scopes[s])));
        }
        if (in_cycle[i])
            finding(rsinfo, t, "unbreakable_cycle",
                    "it is on a cycle of NOT NULL references: no order of inserts satisfies "
                    "them and no column can be set later");
        if (t->pk == nullptr)
            finding(rsinfo, t, "bad_primary_key",
                    "an exported table needs a primary key of one integer column");
        if (t->forced_row_security)
            finding(rsinfo, t, "forced_row_security",
                    "it forces row-level security on its owner, as whom the export reads it: "
                    "a policy would hide rows (ALTER TABLE ... NO FORCE ROW LEVEL SECURITY)");
        if (t->suspects != nullptr)
            finding(rsinfo, t, "unregistered_cross_silo",
                    psprintf("%s: integer columns named *_id that are neither a foreign key nor a "
                             "registered cross-silo reference (outbox.register_foreign_key), nor "
                             "named in set_relocation_scope's plain_columns",
                             t->suspects));
    }
    return (Datum)0;
}
