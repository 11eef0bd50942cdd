// The statement rows_statement() builds, against the text that
// outbox._relocation_rows_sql's PL/pgSQL built before it moved here (taken
// from 0.9.0's function on a server, one case a line below): the import,
// the compare and a move's catch-up run the same statements as before.
#include "relocation/import/rows_statement.hpp"

#include <gtest/gtest.h>

using namespace pgoutbox::relocation;

namespace {

const char *relocation = "11111111-1111-1111-1111-111111111111";

RowsStatementRequest project(bool deferred_null) {
    RowsStatementRequest r;
    r.relocation = relocation;
    r.users_relocation = "22222222-2222-2222-2222-222222222222";
    r.model = "public.project";
    r.pk = "id";
    r.references = {{"organization_id", "public.organization", false, false},
                    {"parent_id", "public.project", false, true},
                    {"owner_id", "public.user", true, false}};
    r.deferred_null = deferred_null;
    return r;
}

} // namespace

TEST(RowsStatement, QuotesLiteralsAsQuoteLiteralDoes) {
    EXPECT_EQ(sql_literal("plain"), "'plain'");
    EXPECT_EQ(sql_literal("it's"), "'it''s'");
    EXPECT_EQ(sql_literal("a\\b"), "E'a\\\\b'");
    EXPECT_EQ(sql_literal(""), "''");
}

TEST(RowsStatement, WritesTextArraysAsArrayOutDoes) {
    EXPECT_EQ(text_array_text({"id"}), "{id}");
    EXPECT_EQ(text_array_text({"a", "b c", "", "NULL", "nuLL", "x,y", "q\"r", "s\\t", "{z}"}),
              "{a,\"b c\",\"\",\"NULL\",\"nuLL\",\"x,y\",\"q\\\"r\",\"s\\\\t\",\"{z}\"}");
    EXPECT_EQ(text_array_text({"nul", "nulls"}), "{nul,nulls}");
}

TEST(RowsStatement, TableWithoutReferences) {
    RowsStatementRequest r;
    r.relocation = relocation;
    r.model = "public.team";
    r.pk = "id";
    r.deferred_null = true;
    EXPECT_EQ(
        rows_statement(r),
        R"SQL(SELECT y.ordinal, y.old, y.new, (y.fields || pg_catalog.jsonb_build_object('id', y.new)) || coalesce(y.replaced - '{id}'::text[], '{}') AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, $3[s.ordinal - $1 + 1] AS new, NULL::jsonb AS replaced FROM outbox.relocation_rows s WHERE s.relocation = '11111111-1111-1111-1111-111111111111' AND s.model = 'public.team' AND s.ordinal BETWEEN $1 AND $2 OFFSET 0) y)SQL");
}

TEST(RowsStatement, InsertStepNullsDeferredColumnsAndMapsUsers) {
    EXPECT_EQ(
        rows_statement(project(true)),
        R"SQL(SELECT y.ordinal, y.old, y.new, CASE WHEN y.fields->>'organization_id' IS NOT NULL AND y.m1 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'organization_id', 'public.organization', y.fields) WHEN y.fields->>'owner_id' IS NOT NULL AND y.m3 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'owner_id', 'public.user', y.fields) ELSE (y.fields || pg_catalog.jsonb_build_object('id', y.new) || pg_catalog.jsonb_build_object('organization_id', y.m1) || pg_catalog.jsonb_build_object('parent_id', NULL::bigint) || pg_catalog.jsonb_build_object('owner_id', y.m3)) || coalesce(y.replaced - '{organization_id,parent_id,owner_id,id}'::text[], '{}') END AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, $3[s.ordinal - $1 + 1] AS new, NULL::jsonb AS replaced, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '11111111-1111-1111-1111-111111111111' AND m.table_key = 'public.organization' AND m.old = (s.fields->>'organization_id')::bigint) AS m1, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '22222222-2222-2222-2222-222222222222' AND m.table_key = 'public.user' AND m.old = (s.fields->>'owner_id')::bigint) AS m3 FROM outbox.relocation_rows s WHERE s.relocation = '11111111-1111-1111-1111-111111111111' AND s.model = 'public.project' AND s.ordinal BETWEEN $1 AND $2 OFFSET 0) y)SQL");
}

TEST(RowsStatement, LaterStepRewritesEveryReference) {
    EXPECT_EQ(
        rows_statement(project(false)),
        R"SQL(SELECT y.ordinal, y.old, y.new, CASE WHEN y.fields->>'organization_id' IS NOT NULL AND y.m1 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'organization_id', 'public.organization', y.fields) WHEN y.fields->>'parent_id' IS NOT NULL AND y.m2 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'parent_id', 'public.project', y.fields) WHEN y.fields->>'owner_id' IS NOT NULL AND y.m3 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'owner_id', 'public.user', y.fields) ELSE (y.fields || pg_catalog.jsonb_build_object('id', y.new) || pg_catalog.jsonb_build_object('organization_id', y.m1) || pg_catalog.jsonb_build_object('parent_id', y.m2) || pg_catalog.jsonb_build_object('owner_id', y.m3)) || coalesce(y.replaced - '{organization_id,parent_id,owner_id,id}'::text[], '{}') END AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, (SELECT k.new FROM outbox.relocation_pk_map k WHERE k.relocation = s.relocation AND k.table_key = s.model AND k.old = s.pk) AS new, (SELECT k.replaced FROM outbox.relocation_pk_map k WHERE k.relocation = s.relocation AND k.table_key = s.model AND k.old = s.pk) AS replaced, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '11111111-1111-1111-1111-111111111111' AND m.table_key = 'public.organization' AND m.old = (s.fields->>'organization_id')::bigint) AS m1, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '11111111-1111-1111-1111-111111111111' AND m.table_key = 'public.project' AND m.old = (s.fields->>'parent_id')::bigint) AS m2, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '22222222-2222-2222-2222-222222222222' AND m.table_key = 'public.user' AND m.old = (s.fields->>'owner_id')::bigint) AS m3 FROM outbox.relocation_rows s WHERE s.relocation = '11111111-1111-1111-1111-111111111111' AND s.model = 'public.project' AND s.ordinal BETWEEN $1 AND $2 OFFSET 0) y)SQL");
}

TEST(RowsStatement, CompareJoinsAndKeepsUsersWithoutTheirMap) {
    RowsStatementRequest r = project(false);
    r.users_relocation.clear();
    r.ordinals = "= ANY ($1)";
    r.joined = true;
    EXPECT_EQ(
        rows_statement(r),
        R"SQL(SELECT y.ordinal, y.old, y.new, CASE WHEN y.fields->>'organization_id' IS NOT NULL AND y.m1 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'organization_id', 'public.organization', y.fields) WHEN y.fields->>'parent_id' IS NOT NULL AND y.m2 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', 'public.project', y.old, 'parent_id', 'public.project', y.fields) ELSE (y.fields || pg_catalog.jsonb_build_object('id', y.new) || pg_catalog.jsonb_build_object('organization_id', y.m1) || pg_catalog.jsonb_build_object('parent_id', y.m2)) || coalesce(y.replaced - '{organization_id,parent_id,owner_id,id}'::text[], '{}') END AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, k.new, k.replaced, m1.new AS m1, m2.new AS m2 FROM outbox.relocation_rows s LEFT JOIN outbox.relocation_pk_map k ON k.relocation = s.relocation AND k.table_key = s.model AND k.old = s.pk LEFT JOIN outbox.relocation_pk_map m1 ON m1.relocation = '11111111-1111-1111-1111-111111111111' AND m1.table_key = 'public.organization' AND m1.old = (s.fields->>'organization_id')::bigint LEFT JOIN outbox.relocation_pk_map m2 ON m2.relocation = '11111111-1111-1111-1111-111111111111' AND m2.table_key = 'public.project' AND m2.old = (s.fields->>'parent_id')::bigint WHERE s.relocation = '11111111-1111-1111-1111-111111111111' AND s.model = 'public.project' AND s.ordinal = ANY ($1) OFFSET 0) y)SQL");
}

TEST(RowsStatement, OddNamesStayLiterals) {
    RowsStatementRequest r;
    r.relocation = relocation;
    r.model = "we'ird\\schema.t";
    r.pk = "Key Id";
    r.references = {{"it's, {odd}", "a\\b", false, false},
                    {"null", "p\"q", false, false},
                    {"", "x", false, true}};
    r.deferred_null = true;
    EXPECT_EQ(
        rows_statement(r),
        R"SQL(SELECT y.ordinal, y.old, y.new, CASE WHEN y.fields->>'it''s, {odd}' IS NOT NULL AND y.m1 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', E'we''ird\\schema.t', y.old, 'it''s, {odd}', E'a\\b', y.fields) WHEN y.fields->>'null' IS NOT NULL AND y.m2 IS NULL THEN outbox._relocation_unresolved('11111111-1111-1111-1111-111111111111', E'we''ird\\schema.t', y.old, 'null', 'p"q', y.fields) ELSE (y.fields || pg_catalog.jsonb_build_object('Key Id', y.new) || pg_catalog.jsonb_build_object('it''s, {odd}', y.m1) || pg_catalog.jsonb_build_object('null', y.m2) || pg_catalog.jsonb_build_object('', NULL::bigint)) || coalesce(y.replaced - '{"it''s, {odd}","null","","Key Id"}'::text[], '{}') END AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, $3[s.ordinal - $1 + 1] AS new, NULL::jsonb AS replaced, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '11111111-1111-1111-1111-111111111111' AND m.table_key = E'a\\b' AND m.old = (s.fields->>'it''s, {odd}')::bigint) AS m1, (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = '11111111-1111-1111-1111-111111111111' AND m.table_key = 'p"q' AND m.old = (s.fields->>'null')::bigint) AS m2 FROM outbox.relocation_rows s WHERE s.relocation = '11111111-1111-1111-1111-111111111111' AND s.model = E'we''ird\\schema.t' AND s.ordinal BETWEEN $1 AND $2 OFFSET 0) y)SQL");
}

TEST(RowsStatement, EachPurposeAroundItsRows) {
    RowsStatementRequest r = project(false);
    RowsPurpose purpose;
    ASSERT_TRUE(parse_rows_purpose("insert", &purpose));
    // The insert step: its rows as before (deferred columns NULL), in one array.
    EXPECT_EQ(rows_purpose_statement(r, purpose),
              "SELECT pg_catalog.array_agg(x.row ORDER BY x.ordinal) FROM (" +
                  rows_statement(project(true)) + ") x");
    ASSERT_TRUE(parse_rows_purpose("deferred", &purpose));
    EXPECT_EQ(
        rows_purpose_statement(project(true), purpose),
        "SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object('id', x.new) || (SELECT "
        "pg_catalog.jsonb_object_agg(e.key, e.value) FROM pg_catalog.jsonb_each(x.row) e WHERE "
        "e.key = ANY ('{parent_id}'::text[])) ORDER BY x.ordinal) FILTER (WHERE x.row ?| "
        "'{parent_id}'::text[] AND EXISTS (SELECT FROM pg_catalog.jsonb_each(x.row) e WHERE e.key "
        "= ANY ('{parent_id}'::text[]) AND e.value <> 'null'::jsonb)) FROM (" +
            rows_statement(project(false)) + ") x");
    ASSERT_TRUE(parse_rows_purpose("compare", &purpose));
    RowsStatementRequest compared = project(false);
    compared.joined = true;
    compared.ordinals = "IS NOT NULL";
    EXPECT_EQ(rows_purpose_statement(r, purpose),
              "SELECT 'public.project' AS model, x.new AS pk, x.row - 'id' AS fields FROM (" +
                  rows_statement(compared) + ") x");
    EXPECT_FALSE(parse_rows_purpose("Insert", &purpose));
    EXPECT_FALSE(parse_rows_purpose("", &purpose));
}
