#include "options/option_key.hpp"

#include <gtest/gtest.h>

using pgoutbox::OptionKind;
using pgoutbox::parse_option_key;
using pgoutbox::valid_table_key;

TEST(TableKey, AcceptsLowerCaseIdentifiers) {
    EXPECT_TRUE(valid_table_key("sentry_organizationmember"));
    EXPECT_TRUE(valid_table_key("_t1"));
    EXPECT_TRUE(valid_table_key(std::string(63, 'a')));
}

TEST(TableKey, RejectsWhatIsNotAGucNamePart) {
    EXPECT_FALSE(valid_table_key(""));
    EXPECT_FALSE(valid_table_key("1abc"));
    EXPECT_FALSE(valid_table_key("Upper"));
    EXPECT_FALSE(valid_table_key("a.b"));
    EXPECT_FALSE(valid_table_key("a;drop table x"));
    EXPECT_FALSE(valid_table_key("a'b"));
    EXPECT_FALSE(valid_table_key("a b"));
    EXPECT_FALSE(valid_table_key(std::string(64, 'a')));
}

TEST(OptionKey, ParsesReplicationVersion) {
    auto key = parse_option_key("outbox_replication.sentry_apitoken.replication_version");
    ASSERT_TRUE(key.has_value());
    EXPECT_EQ(key->kind, OptionKind::ReplicationVersion);
    EXPECT_EQ(key->table_key, "sentry_apitoken");
}

TEST(OptionKey, ParsesTargetCells) {
    auto key = parse_option_key("outbox_replication.sentry_apitoken.backfill.target_cells");
    ASSERT_TRUE(key.has_value());
    EXPECT_EQ(key->kind, OptionKind::TargetCells);
    EXPECT_EQ(key->table_key, "sentry_apitoken");
}

TEST(OptionKey, RejectsOtherKeys) {
    EXPECT_FALSE(parse_option_key(""));
    EXPECT_FALSE(parse_option_key("outbox_replication..replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.t.replication_versionx"));
    EXPECT_FALSE(parse_option_key("Outbox_replication.t.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.T.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.a.b.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.t;x.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox.t.replication_version"));
    EXPECT_FALSE(parse_option_key("outbox_replication.t.target_cells"));
}
