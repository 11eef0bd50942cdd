// outbox._ddl_attaches_partition(pg_ddl_command): whether a collected DDL
// command attaches a partition.  The DDL event trigger installs TRUNCATE
// capture on new partitions only for CREATE TABLE and ATTACH PARTITION, not
// for every ALTER TABLE: pg_restore replays the dumped TRUNCATE triggers
// itself, after other ALTER TABLE commands on the same tables.
#include "pg/guard.hpp"

extern "C" {
#include "tcop/deparse_utility.h"
}

OUTBOX_FUNCTION(ddl_attaches_partition) {
    auto *command = (CollectedCommand *)PG_GETARG_POINTER(0);
    if (command->type != SCT_AlterTable)
        PG_RETURN_BOOL(false);
    ListCell *lc;
    foreach (lc, command->d.alterTable.subcmds) {
        auto *sub = (CollectedATSubcmd *)lfirst(lc);
        if (IsA(sub->parsetree, AlterTableCmd) &&
            ((AlterTableCmd *)sub->parsetree)->subtype == AT_AttachPartition)
            PG_RETURN_BOOL(true);
    }
    PG_RETURN_BOOL(false);
}
