#include "relocation/import/table_statements.hpp"

#include <gtest/gtest.h>
#include <string>

using namespace pgoutbox::relocation;

namespace {

TableStatementRequest on_event(TableStatement kind, std::vector<std::string> columns = {}) {
    TableStatementRequest r;
    r.kind = kind;
    r.table = "public.event";
    r.pk = "id";
    r.columns = std::move(columns);
    return r;
}

const std::string keys_of_id =
    "t.id = ANY (SELECT (j OPERATOR(pg_catalog.#>>) '{}')::bigint FROM pg_catalog.unnest($1) j)";

} // namespace

TEST(TableStatements, NamesEveryKindAndNothingElse) {
    const char *names[] = {"insert_rows",  "insert_new_rows", "upsert_rows", "update_rows",
                           "clear_keys",   "delete_keys",     "count_keys",  "keys_where",
                           "rows_of_keys", "values_of_keys",  "call_hook"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        TableStatement kind;
        ASSERT_TRUE(parse_table_statement(names[i], &kind)) << names[i];
        EXPECT_EQ(static_cast<size_t>(kind), i);
    }
    TableStatement kind;
    for (const char *bad : {"", "INSERT_ROWS", "insert rows", "drop_table"})
        EXPECT_FALSE(parse_table_statement(bad, &kind)) << bad;
    EXPECT_FALSE(parse_table_statement(nullptr, &kind));
}

TEST(TableStatements, InsertsTheColumnsThenTheKeyAndReturnsTheKeys) {
    EXPECT_EQ(table_statement(on_event(TableStatement::InsertRows, {"project_id", "\"Message\""})),
              "WITH w AS (INSERT INTO public.event AS t (project_id, \"Message\", id) OVERRIDING "
              "SYSTEM VALUE SELECT r.project_id, r.\"Message\", r.id FROM pg_catalog.unnest($1) j, "
              "pg_catalog.jsonb_populate_record(NULL::public.event, j) r RETURNING t.id) SELECT "
              "pg_catalog.to_jsonb(w.id) FROM w");
    EXPECT_EQ(table_statement(on_event(TableStatement::InsertNewRows, {"message"})),
              "WITH w AS (INSERT INTO public.event AS t (message, id) OVERRIDING SYSTEM VALUE "
              "SELECT r.message, r.id FROM pg_catalog.unnest($1) j, "
              "pg_catalog.jsonb_populate_record(NULL::public.event, j) r ON CONFLICT DO NOTHING "
              "RETURNING t.id) SELECT pg_catalog.to_jsonb(w.id) FROM w");
    // A table of its key alone.
    EXPECT_EQ(table_statement(on_event(TableStatement::InsertRows)),
              "WITH w AS (INSERT INTO public.event AS t (id) OVERRIDING SYSTEM VALUE SELECT r.id "
              "FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::public.event, "
              "j) r RETURNING t.id) SELECT pg_catalog.to_jsonb(w.id) FROM w");
}

TEST(TableStatements, UpsertsUpdateTheColumnsOrDoNothingWithoutAny) {
    EXPECT_EQ(table_statement(on_event(TableStatement::UpsertRows, {"a", "b"})),
              "WITH w AS (INSERT INTO public.event AS t (a, b, id) OVERRIDING SYSTEM VALUE SELECT "
              "r.a, r.b, r.id FROM pg_catalog.unnest($1) j, "
              "pg_catalog.jsonb_populate_record(NULL::public.event, j) r ON CONFLICT (id) DO "
              "UPDATE SET (a, b) = ROW(excluded.a, excluded.b) RETURNING t.id) SELECT "
              "pg_catalog.to_jsonb(w.id) FROM w");
    EXPECT_NE(table_statement(on_event(TableStatement::UpsertRows))
                  .find("ON CONFLICT (id) DO NOTHING RETURNING"),
              std::string::npos);
}

TEST(TableStatements, UpdatesTheColumnsOfTheRowsByKey) {
    EXPECT_EQ(table_statement(on_event(TableStatement::UpdateRows, {"parent_id"})),
              "WITH w AS (UPDATE public.event AS t SET (parent_id) = ROW(r.parent_id) FROM "
              "pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::public.event, j) r "
              "WHERE t.id OPERATOR(pg_catalog.=) r.id RETURNING t.id) SELECT "
              "pg_catalog.to_jsonb(w.id) FROM w");
    EXPECT_EQ(table_statement(on_event(TableStatement::UpdateRows)), "");
}

TEST(TableStatements, ClearsOnlyRowsWithAColumnSet) {
    EXPECT_EQ(table_statement(on_event(TableStatement::ClearKeys, {"a", "b"})),
              "WITH w AS (UPDATE public.event AS t SET (a, b) = ROW(NULL, NULL) WHERE " +
                  keys_of_id +
                  " AND (t.a IS NOT NULL OR t.b IS NOT NULL) RETURNING 1) SELECT "
                  "pg_catalog.to_jsonb(pg_catalog.count(*)) FROM w");
    EXPECT_EQ(table_statement(on_event(TableStatement::ClearKeys)), "");
}

TEST(TableStatements, DeletesCountsAndReadsByKey) {
    EXPECT_EQ(table_statement(on_event(TableStatement::DeleteKeys)),
              "WITH w AS (DELETE FROM public.event AS t WHERE " + keys_of_id +
                  " RETURNING 1) SELECT pg_catalog.to_jsonb(pg_catalog.count(*)) FROM w");
    EXPECT_EQ(table_statement(on_event(TableStatement::CountKeys)),
              "SELECT pg_catalog.jsonb_build_array(pg_catalog.count(*), "
              "pg_catalog.min(t.id::bigint)) FROM public.event AS t WHERE " +
                  keys_of_id);
    EXPECT_EQ(table_statement(on_event(TableStatement::RowsOfKeys)),
              "SELECT pg_catalog.to_jsonb(t) FROM public.event AS t WHERE " + keys_of_id);
    TableStatementRequest r = on_event(TableStatement::KeysWhere);
    EXPECT_EQ(table_statement(r), "");
    r.key_column = "project_id";
    EXPECT_EQ(table_statement(r),
              "SELECT pg_catalog.to_jsonb(t.id) FROM public.event AS t WHERE t.project_id = ANY "
              "(SELECT (j OPERATOR(pg_catalog.#>>) '{}')::bigint FROM pg_catalog.unnest($1) j)");
}

TEST(TableStatements, ReadsTheValuesOfAColumnThatAreSet) {
    TableStatementRequest r = on_event(TableStatement::ValuesOfKeys);
    EXPECT_EQ(table_statement(r), "");
    r.key_column = "owner_id";
    EXPECT_EQ(table_statement(r),
              "SELECT pg_catalog.to_jsonb(t.owner_id) FROM public.event AS t WHERE t.owner_id IS "
              "NOT NULL AND " +
                  keys_of_id);
}

TEST(TableStatements, CallsTheHookWithTheRelocationAndTheRowOfEachElement) {
    TableStatementRequest r = on_event(TableStatement::CallHook);
    EXPECT_EQ(table_statement(r), "");
    r.hook = "\"Hooks\".\"fix slug\"";
    EXPECT_EQ(table_statement(r),
              "SELECT \"Hooks\".\"fix slug\"((j OPERATOR(pg_catalog.->>) "
              "'relocation')::pg_catalog.uuid, j OPERATOR(pg_catalog.->) 'row') FROM "
              "pg_catalog.unnest($1) j");
}
