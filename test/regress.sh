#!/usr/bin/env bash
# Runs pg_regress tests by name (sql/NAME.sql against expected/NAME.out) against a
# throwaway cluster that preloads pg_outbox and a throwaway Redis, as
# test/run-tests.sh does for all of them: `bash test/regress.sh drain links`.
# Installs the tree's build first unless NO_INSTALL=1.  Results and diffs
# stay in the directory it prints.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
(($# > 0)) || { echo "usage: bash test/regress.sh TEST..." >&2; exit 2; }
[[ ${NO_INSTALL:-} == 1 ]] || install_extension "$root" || exit 1
redis_start || exit 1
cluster_start || exit 1
out=$(mktemp -d)
[[ $(id -u) == 0 ]] && chown postgres: "$out"
cd "$root"
"$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
    --inputdir="$root" --outputdir="$out" --host="$PGHOST" --port="$PGPORT" \
    --user=postgres --load-extension=pg_outbox --dbname=regression "$@"
rc=$?
echo "results in $out"
exit $rc
