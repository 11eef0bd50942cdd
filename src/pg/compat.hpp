// What differs between the PostgreSQL versions pg_outbox builds for (15 and
// 17), bridged here and nowhere else (docs/development.md lists each).
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "pgstat.h"
#include "storage/proc.h"
}

namespace pgoutbox::pg {

// Whether role owns the table: pg_class_ownercheck before 16.
inline bool owns_table(Oid relid, Oid role) {
#if PG_VERSION_NUM >= 160000
    return object_ownercheck(RelationRelationId, relid, role);
#else
    return pg_class_ownercheck(relid, role);
#endif
}

// This backend's local transaction id: MyProc->vxid.lxid from 17.
inline LocalTransactionId local_xid() {
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

// The table's file number (changed by a rewrite): rd_locator from 16.
inline Oid file_number(Relation rel) {
#if PG_VERSION_NUM >= 160000
    return rel->rd_locator.relNumber;
#else
    return rel->rd_node.relNode;
#endif
}

// Live rows in the table's statistics: live_tuples from 16.
inline int64 live_rows(const PgStat_StatTabEntry *stats) {
#if PG_VERSION_NUM >= 160000
    return stats->live_tuples;
#else
    return stats->n_live_tuples;
#endif
}

// A lexer of json (len bytes) in the database's encoding, with escapes
// de-escaped; 17 takes the context to fill, nullptr for a new one.
inline JsonLexContext *json_lexer(char *json, int len) {
#if PG_VERSION_NUM >= 170000
    return makeJsonLexContextCstringLen(nullptr, json, len, GetDatabaseEncoding(), true);
#else
    return makeJsonLexContextCstringLen(json, len, GetDatabaseEncoding(), true);
#endif
}

} // namespace pgoutbox::pg
