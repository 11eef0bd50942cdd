#!/usr/bin/env bash
# A real migration tool, run by an ordinary application role, in a database
# where pg_outbox is installed: Django's migrate (test/django, app "shop")
# creates, alters and finally drops the app's tables as the LOGIN role
# shop_app (no superuser, no CREATEDB, no CREATEROLE), while a superuser
# installs pg_outbox and registers shop_member.  The registration must
# survive the migrations, capture must still see rows written through the
# ORM, the DDL guard must still refuse shop_app's changes that would break
# capture, and migrating back to zero must drop the registration with the
# table.  Plain DDL by shop_app through psql must work too.
#
# Layout: a database "shop" owned by shop_app (so shop_app may create in its
# schema public, owned by pg_database_owner); the extension is created in it
# by the superuser.
#
# Needs Debian's python3-django (3.2) and python3-psycopg2, run with
# /usr/bin/python3 (not whatever python3 comes first on PATH).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
source "$root/test/harness/check.sh"

PY=/usr/bin/python3
DB=shop
APP=shop_app
export OUTBOX_DJANGO_DB=$DB OUTBOX_DJANGO_USER=$APP PYTHONDONTWRITEBYTECODE=1

# q: psql as the superuser in the app's database; val SQL: the first line of
# its answer (or of its error); app_sql: psql as shop_app.
q() { psql -X -q -tA -d "$DB" "$@" 2>&1; }
val() { q -c "$1" | head -n 1; }
app_sql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d "$DB" -U "$APP" "$@" 2>&1; }

# Show a failed command's output in the log as "#" lines (the harness shows
# the last 40 lines of a failing script): of Python's chained tracebacks only
# the last exception, and of a PostgreSQL error not the QUERY text.
show() {
    awk '/^Traceback /      { tb = 1; n = 0; next }
         tb && /^[^ ]/      { tb = 0 }
         tb || /^ *$/       { next }
         /^ *QUERY: /       { skip = 1; next }
         skip && /^ *(CONTEXT|HINT|DETAIL):/ { skip = 0 }
         skip               { next }
                            { line[++n] = $0 }
         END { for (i = 1; i <= n; i++) print "#   " line[i] }' <<<"$1" | tail -n 15
}

# django ARGS...: manage.py ARGS as shop_app; output in $out.
django() {
    out=$(cd "$root/test/django" && "$PY" manage.py "$@" 2>&1)
}
# migrate DESCRIPTION ARGS...: a checked manage.py migrate ARGS as shop_app.
# Like ddl below, a migration that failed is replayed as shop_app with the
# event triggers off (the superuser connects with session_replication_role =
# replica and role = shop_app), so that the following steps still test
# themselves rather than fail for want of the tables.
migrate() {
    local description=$1
    shift
    django migrate "$@" --no-input
    run_check "shop_app: $description" [ $? = 0 ] && return
    OUTBOX_DJANGO_USER=postgres PGOPTIONS="-c session_replication_role=replica -c role=$APP" \
        django migrate "$@" --no-input &&
        echo "#   (replayed without event triggers, for the next steps)" ||
        echo "#   (failed without event triggers too)"
}

# run_check DESCRIPTION COMMAND...: check that shows $out on failure (and
# then returns 1).
run_check() {
    check "$@" || { show "$out"; return 1; }
}

check "Django and psycopg2 importable by $PY" \
    "$PY" -c 'import django, psycopg2; assert django.VERSION[:2] >= (3, 2)'

redis_start
cluster_start

psql -X -q -v ON_ERROR_STOP=1 -d postgres >/dev/null <<SQL || { echo "not ok - setup"; exit 1; }
CREATE ROLE $APP LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
CREATE DATABASE $DB OWNER $APP;
SQL
out=$(q -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORG', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORG', 0);
SQL
)
run_check "superuser: CREATE EXTENSION pg_outbox, scope and category" [ $? = 0 ]
check "shop_app is neither superuser nor CREATEDB/CREATEROLE" \
    [ "$(val "SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles WHERE rolname = '$APP'")" = f ]

# 1. The initial migration, as shop_app.
migrate "manage.py migrate shop 0001" shop 0001
check "0001 created shop_organization and shop_member, owned by shop_app" [ "$(val "
    SELECT count(*) FROM pg_class
     WHERE relname IN ('shop_organization', 'shop_member')
       AND relowner = '$APP'::regrole")" = 2 ]

# 2. The superuser registers the member table.
out=$(q -v ON_ERROR_STOP=1 -c "SELECT outbox.register_table('shop_member', 'MEMBER_UPDATE', shard_column => 'organization_id')")
run_check "superuser: register_table('shop_member', shard_column => 'organization_id')" [ $? = 0 ]

# 3. The remaining migrations alter the registered table, as shop_app.
migrate "manage.py migrate shop (0002: add column with default, index, new model, alter max_length; 0003: rename and remove a column)" shop
django showmigrations shop
check "all three migrations applied" [ "$(grep -c '\[X\]' <<<"$out")" = 3 ]
got=$(val "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
             WHERE attrelid = to_regclass('shop_member') AND attnum > 0 AND NOT attisdropped")
check "shop_member has the 0003 columns ($got)" [ "$got" = "id,email,display_name,organization_id,is_active" ]
check "shop_team exists (0002)" [ "$(val "SELECT to_regclass('shop_team') IS NOT NULL")" = t ]
got=$(val "SELECT relation || ' ' || shard_column || ' ' || category FROM outbox.tables")
check "shop_member still registered ($got)" [ "$got" = "shop_member organization_id MEMBER_UPDATE" ]
check "outbox.tables has exactly one row" [ "$(val "SELECT count(*) FROM outbox.tables")" = 1 ]

# 4. A row written through the ORM is captured.
django shell -c "
from shop.models import Organization, Member
org = Organization.objects.create(slug='acme', name='Acme')
member = Member.objects.create(organization=org, email='ada@example.com', display_name='Ada')
print('ids', org.pk, member.pk)"
rc=$?
read -r _ org_id member_id <<<"$(grep '^ids ' <<<"$out")"
run_check "shop_app: Member.objects.create() through the ORM (org ${org_id:-?}, member ${member_id:-?})" \
    [ $rc = 0 -a -n "${member_id:-}" ]
got=$(val "SELECT count(*) FROM outbox.cell_outbox o JOIN outbox.categories c ON c.id = o.category
             WHERE c.name = 'MEMBER_UPDATE' AND o.object_identifier = ${member_id:-0}
               AND o.shard_identifier = ${org_id:-0}")
check "the ORM insert wrote one outbox row (member ${member_id:-?}, shard ${org_id:-?}): $got" [ "$got" = 1 ]
check "the unregistered shop_organization wrote none" \
    [ "$(val "SELECT count(*) FROM outbox.cell_outbox")" = 1 ]

# 5. The DDL guard still protects the registered table from its owner.
failed_with() { [ "$1" != 0 ] && grep -q -- "$2" <<<"$out"; } # failed_with RC PATTERN
refused() { # refused DESCRIPTION ERROR-PATTERN SQL
    out=$(app_sql -c "$3")
    run_check "shop_app: $1 is refused" failed_with $? "$2"
}
triggers="SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass('shop_member')
                                             AND tgname LIKE 'outbox\_capture\_%' AND tgenabled = 'A'"
triggers_before=$(val "$triggers")
refused "ALTER TABLE shop_member DROP COLUMN organization_id" "would break capture of registered table" \
    "ALTER TABLE shop_member DROP COLUMN organization_id"
refused "ALTER TABLE shop_member DISABLE TRIGGER USER" "capture trigger .* on .*shop_member must stay enabled ALWAYS" \
    "ALTER TABLE shop_member DISABLE TRIGGER USER"
capture_trigger=$(val "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('shop_member')
                                                    AND tgname LIKE 'outbox\_capture\_%' LIMIT 1")
refused "DROP TRIGGER ${capture_trigger:-?} ON shop_member" "is pg_outbox's capture trigger" \
    "DROP TRIGGER \"${capture_trigger:-outbox_capture_}\" ON shop_member"
got=$(val "$triggers")
check "shop_member's capture triggers are all still there and enabled ($triggers_before before, $got after)" \
    [ "$got" = "$triggers_before" -a "$triggers_before" != 0 ]

# 6. Plain DDL as shop_app, one command per psql session and one check per
# command.  So that a failure does not make the following commands fail for
# want of the object, a command that failed is replayed as shop_app with the
# event triggers off (session_replication_role = replica, which only a
# superuser can set); the following commands still run with them on.
ddl() { # ddl DESCRIPTION SQL
    out=$(app_sql -c "$2")
    run_check "shop_app: $1" [ $? = 0 ] && return
    q -v ON_ERROR_STOP=1 -c "SET session_replication_role = replica" -c "SET ROLE $APP" \
        -c "$2" >/dev/null && echo "#   (replayed without event triggers, for the next commands)" ||
        echo "#   (failed without event triggers too)"
}
ddl "CREATE TABLE" "CREATE TABLE note (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text)"
ddl "CREATE TEMP TABLE (and use it)" \
    "CREATE TEMP TABLE scratch (id int); INSERT INTO scratch VALUES (1); ALTER TABLE scratch ADD COLUMN x int"
ddl "ALTER TABLE ADD COLUMN on its own table" "ALTER TABLE note ADD COLUMN author text NOT NULL DEFAULT 'x'"
ddl "ALTER TABLE ALTER COLUMN TYPE" "ALTER TABLE note ALTER COLUMN author TYPE varchar(80)"
ddl "ALTER TABLE RENAME COLUMN" "ALTER TABLE note RENAME COLUMN body TO text"
ddl "CREATE INDEX" "CREATE INDEX note_author ON note (author)"
ddl "INSERT into its table" "INSERT INTO note (text) VALUES ('hello')"
ddl "CREATE TABLE ... PARTITION BY RANGE" "CREATE TABLE event (id bigint NOT NULL, at date NOT NULL) PARTITION BY RANGE (at)"
ddl "CREATE TABLE ... PARTITION OF (first)" \
    "CREATE TABLE event_2024 PARTITION OF event FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')"
ddl "CREATE TABLE ... PARTITION OF (second)" \
    "CREATE TABLE event_2025 PARTITION OF event FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')"
ddl "ALTER TABLE DETACH PARTITION" "ALTER TABLE event DETACH PARTITION event_2025"
ddl "ALTER TABLE ATTACH PARTITION" \
    "ALTER TABLE event ATTACH PARTITION event_2025 FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')"
ddl "CREATE INDEX on the partitioned table" "CREATE INDEX event_at ON event (at)"
ddl "CREATE VIEW" "CREATE VIEW note_v AS SELECT id, author FROM note"
ddl "DROP VIEW" "DROP VIEW note_v"
ddl "CREATE FUNCTION" "CREATE FUNCTION note_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM note'"
ddl "DROP FUNCTION" "DROP FUNCTION note_count()"
ddl "DROP INDEX" "DROP INDEX note_author"
ddl "DROP TABLE (partitioned, with its partitions)" "DROP TABLE event"
ddl "DROP TABLE" "DROP TABLE note"

# 7. Back to zero: the tables, and with them the registration, are dropped.
shop_tables="SELECT count(*) FROM pg_class WHERE relname LIKE 'shop\_%' AND relkind = 'r'"
tables_before=$(val "$shop_tables") registered_before=$(val "SELECT count(*) FROM outbox.tables")
django migrate shop zero --no-input
run_check "shop_app: manage.py migrate shop zero" [ $? = 0 ]
got=$(val "$shop_tables")
check "migrate zero dropped the shop tables ($tables_before before, $got after)" \
    [ "$tables_before" = 3 -a "$got" = 0 ]
got=$(val "SELECT count(*) FROM outbox.tables")
check "dropping shop_member dropped its registration ($registered_before before, $got after)" \
    [ "$registered_before" = 1 -a "$got" = 0 ]

checks_done django_migrate
