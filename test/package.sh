#!/usr/bin/env bash
# The Debian package (debian/, docs/packaging.md): builds it with
# dpkg-buildpackage from a copy of the tree, installs it, and runs the demo,
# the pg_regress tests and the Python consumer against the packaged files;
# also checks META.json.  As root or with sudo.  The packages stay installed:
# they hold the files make install writes, at the same paths.  Prints "ok -" /
# "not ok -" lines, ends with "N passed, M failed", exits non-zero on failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/test/harness/check.sh"
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi; }

work=$(mktemp -d /tmp/pg_outbox_package.XXXXXX)
src=$work/src
consumer_pid=
cleanup() {
    [[ -n $consumer_pid ]] && kill "$consumer_pid" 2>/dev/null
    cluster_stop
    rm -rf "$work" /tmp/pg_outbox_relocation_import_"${PGPORT:-none}"*
}
trap cleanup EXIT
passed=0
pcheck() { check "$@" && passed=$((passed + 1)); }
finish() {
    echo "$passed passed, $failures failed"
    exit $((failures > 0 || passed == 0))
}
started=$SECONDS

# META.json: the keys PGXN's meta spec 1.0.0 requires, and the version the
# control file and debian/changelog name.
pcheck "META.json is well-formed JSON" python3 -m json.tool "$root/META.json" "$work/META.json"
ext_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$root/extension/pg_outbox.control")
deb_version=$(sed -n '1s/^pg-outbox (\([^-]*\)-.*/\1/p' "$root/debian/changelog")
meta_ok() {
    python3 - "$root/META.json" "$ext_version" <<'PY'
import json, sys
meta, version = json.load(open(sys.argv[1])), sys.argv[2]
missing = {"name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"} - meta.keys()
provided = meta.get("provides", {}).get("pg_outbox", {})
problems = [f"missing {k}" for k in sorted(missing)]
problems += [f"{k} is {meta.get(k)!r}" for k, want in
             (("name", "pg_outbox"), ("version", version)) if meta.get(k) != want]
if meta.get("meta-spec", {}).get("version") != "1.0.0":
    problems.append("meta-spec is not 1.0.0")
if provided.get("version") != version or provided.get("file") != f"extension/pg_outbox--{version}.sql":
    problems.append(f"provides.pg_outbox is {provided!r}")
if "PostgreSQL" not in meta.get("prereqs", {}).get("runtime", {}).get("requires", {}):
    problems.append("no runtime prerequisite PostgreSQL")
if problems:
    sys.exit("\n".join(problems))
PY
}
pcheck "META.json has the required keys and version $ext_version" meta_ok
pcheck "debian/changelog's upstream version ($deb_version) is the control file's ($ext_version)" \
    test "$deb_version" == "$ext_version"

# The tracked and new files, without what a build of the tree left behind
# (.gitignore: *.o, *.so, build/, results/, the generated SQL).
# Without git (test/debian13.sh's copy, which is that already): all of it.
mkdir "$src"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$root" ls-files -z --cached --others --exclude-standard |
        (cd "$root" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$src"
else
    cp -a "$root/." "$src"
fi
pcheck "the copy of the tree holds debian/ and no build output" \
    bash -c '[[ -f $1/debian/rules && -z $(find "$1" -name "*.o" -o -name "*.so") ]]' _ "$src"

# debian/control names the package of each version of debian/pgversions that
# this system supports (postgresql-15-pg-outbox on Debian 12, -17- on 13).
(cd "$src" && pg_buildext updatecontrol)
build_start=$SECONDS
(cd "$src" && timeout 1200 dpkg-buildpackage -us -uc -b -j"$(nproc)") >"$work/build.log" 2>&1
build_rc=$?
pcheck "dpkg-buildpackage -us -uc -b builds the packages ($((SECONDS - build_start)) s)" test "$build_rc" == 0 ||
    tail -n 40 "$work/build.log"
deb=$(ls "$work"/postgresql-$PG_MAJOR-pg-outbox_*.deb 2>/dev/null)
pydeb=$(ls "$work"/python3-pg-outbox-consumer_*_all.deb 2>/dev/null)
[[ -n $deb && -n $pydeb ]] || { echo "no package built"; finish; }
# The package build ends with make clean: what the tests below load can come
# from the installed package only.
pcheck "the copy holds no build after the package build" \
    bash -c '[[ -z $(find "$1" -path "$1/debian" -prune -o \( -name "*.o" -o -name "*.so" \) -print) &&
             ! -e $1/extension/pg_outbox--$2.sql ]]' _ "$src" "$ext_version"

if command -v lintian >/dev/null; then
    lintian --fail-on error "$work"/*.changes >"$work/lintian.log" 2>&1
    pcheck "lintian finds no error" test $? == 0 || cat "$work/lintian.log"
else
    echo "# lintian is not installed: not run"
fi

# --reinstall: the same version may be installed already, from an earlier run.
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall \
    -o DPkg::Lock::Timeout=300 "$deb" "$pydeb" >"$work/apt.log" 2>&1
apt_rc=$?
pcheck "apt-get installs $(basename "$deb") and $(basename "$pydeb")" test "$apt_rc" == 0 ||
    tail -n 20 "$work/apt.log"

pkglibdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)
listed() { dpkg -L "$1" | grep -qxF "$2"; }
pcheck "the package holds the library" listed postgresql-$PG_MAJOR-pg-outbox "$pkglibdir/pg_outbox.so"
pcheck "the package holds the control file" \
    listed postgresql-$PG_MAJOR-pg-outbox "$sharedir/extension/pg_outbox.control"
pcheck "the package holds the $ext_version script" \
    listed postgresql-$PG_MAJOR-pg-outbox "$sharedir/extension/pg_outbox--$ext_version.sql"
# What make install would install, from its own commands (make -n prints them
# and builds nothing), against what the package holds in the same folders.
(cd "$src" && make -n install PG_CONFIG="$PG_CONFIG" 2>/dev/null) |
    grep -E "^/usr/bin/install|^install " | grep -oE "(extension/[^ ']+\.(sql|control)|pg_outbox\.so)" |
    xargs -n1 basename | sort -u >"$work/make_install"
dpkg -L postgresql-$PG_MAJOR-pg-outbox | grep -E "^($pkglibdir|$sharedir/extension)/." |
    xargs -n1 basename | sort -u >"$work/package"
pcheck "the package holds exactly the $(wc -l <"$work/make_install") files make install installs" \
    bash -c '[[ $(wc -l <"$1") -gt 2 ]] && diff "$1" "$2"' _ "$work/make_install" "$work/package"
pcheck "the installed files are the package's (dpkg -V)" \
    bash -c '[[ -z $(dpkg -V postgresql-$PG_MAJOR-pg-outbox python3-pg-outbox-consumer) ]]'
# Debian's python3, which the package is for (python3 on PATH may be another).
pcheck "the consumer module imports from the package" \
    bash -c 'cd / && [[ $(/usr/bin/python3 -c "import outbox_consumer; print(outbox_consumer.__file__)") == /usr/lib/python3/dist-packages/outbox_consumer.py ]]'

# The newcomer's demo, with its build and make install skipped.
NO_INSTALL=1 timeout 300 bash "$src/test/demo.sh" >"$work/demo.log" 2>&1
demo_rc=$?
pcheck "the demo runs against the package" test "$demo_rc" == 0 || tail -n 30 "$work/demo.log"
pcheck "the demo built nothing" test ! -e "$src/pg_outbox.so"
pcheck "the demo's worker replicated 5 rows, then backfilled 5 more with the cursor in Redis" \
    bash -c 'grep -A2 replica_rows_while_gate_closed "$1" | grep -qx " *5" &&
             grep -A2 replica_rows_after_backfill "$1" | grep -qx " *10" &&
             grep -qF "the cursor in Redis: [0, 3]" "$1"' _ "$work/demo.log"

redis_start || finish
cluster_start || finish
q() { psql -X -q -tA -v ON_ERROR_STOP=1 -d pkg "$@"; }
psql -X -q -c "CREATE DATABASE pkg"
pcheck "CREATE EXTENSION pg_outbox installs $ext_version" \
    test "$(q -c "CREATE EXTENSION pg_outbox" -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")" == "$ext_version"
# The library the postmaster mapped is the file on disk now (no make install
# replaced it since), and that file is the package's.
runs_package() {
    local pid inode
    pid=$(head -n 1 "$CLUSTER_DIR/data/postmaster.pid")
    inode=$(awk -v f="$pkglibdir/pg_outbox.so" '$6 == f && NF == 6 { print $5; exit }' "/proc/$pid/maps")
    [[ -n $inode && $inode == $(stat -c %i "$pkglibdir/pg_outbox.so") &&
        -z $(dpkg -V postgresql-$PG_MAJOR-pg-outbox) ]]
}
pcheck "the server preloads the packaged library" runs_package

# The packaged consumer, run as Debian installs it, against a role that may
# only consume: three rows written, three messages printed and completed.
q >/dev/null <<'SQL'
CREATE ROLE app_consumer LOGIN;
SELECT outbox.register_scope('ORGANIZATION_SCOPE');
SELECT outbox.register_category('ORGANIZATION_MEMBER_UPDATE', 'ORGANIZATION_SCOPE');
CREATE TABLE organization_member (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, email text NOT NULL);
SELECT outbox.register_table('organization_member', 'ORGANIZATION_MEMBER_UPDATE',
                             shard_column => 'organization_id', payload_columns => '{email}');
SELECT outbox.grant_category('ORGANIZATION_MEMBER_UPDATE', 'app_consumer', 'CONSUME');
INSERT INTO organization_member (organization_id, email)
SELECT g, 'user' || g || '@example.com' FROM generate_series(1, 3) g;
SQL
# From / so that python3 -m finds no outbox_consumer.py in its folder.  No
# timeout(1): it sends SIGTERM twice, the second one at times into the
# interpreter's exit, where it kills.  No ( ) subshell: one that gets SIGTERM
# before its exec runs this script's EXIT trap.
OUTBOX_DSN="host=$PGHOST port=$PGPORT dbname=pkg user=app_consumer" \
    env --chdir=/ /usr/bin/python3 -m outbox_consumer ORGANIZATION_MEMBER_UPDATE \
    >"$work/consumer.out" 2>"$work/consumer.err" &
consumer_pid=$!
for _ in $(seq 100); do
    [[ $(grep -c '"object_identifier": ' "$work/consumer.out") -ge 3 ]] && break
    sleep 0.2
done
kill -TERM "$consumer_pid" 2>/dev/null
for _ in $(seq 50); do
    kill -0 "$consumer_pid" 2>/dev/null || break
    sleep 0.2
done
kill -KILL "$consumer_pid" 2>/dev/null
wait "$consumer_pid"
consumer_rc=$?
consumer_pid=
pcheck "/usr/bin/python3 -m outbox_consumer printed the three messages" \
    test "$(grep -oE '"object_identifier": [0-9]+' "$work/consumer.out" | sort | tr '\n' ' ')" == \
    '"object_identifier": 1 "object_identifier": 2 "object_identifier": 3 ' ||
    cat "$work/consumer.out" "$work/consumer.err"
pcheck "the consumer stopped on SIGTERM, and completed what it handled" \
    test "$consumer_rc:$(q -c "SELECT count(*) FROM outbox.cell_outbox")" == "0:0" ||
    echo "  exit code $consumer_rc, $(q -c "SELECT count(*) FROM outbox.cell_outbox") rows left"

# make installcheck as test/run-tests.sh runs it, from the copy: sql/ and
# expected/ there, everything else from the package.
regress_start=$SECONDS
(cd "$src" && timeout 900 make -s installcheck PG_CONFIG="$PG_CONFIG") >"$work/regress.log" 2>&1
regress_rc=$?
for test_sql in "$src"/sql/*.sql; do
    name=$(basename "$test_sql" .sql)
    pcheck "pg_regress $name against the package" \
        grep -qE "^(test +$name +\.\.\. +ok|ok [0-9]+ +- +$name +[0-9]+ ms)" "$work/regress.log"
done
pcheck "make installcheck exits 0 ($((SECONDS - regress_start)) s)" test "$regress_rc" == 0 ||
    { tail -n 20 "$work/regress.log"; head -n 100 "$src/regression.diffs" 2>/dev/null; }

echo "# took $((SECONDS - started)) s"
finish
