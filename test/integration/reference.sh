#!/usr/bin/env bash
# docs/reference.md names everything a user calls, reads or sets: every
# function of schema outbox whose name does not start with an underscore,
# every view, every outbox.* setting and every metric family of
# outbox.metrics() (outbox._metric_families()), as the catalog has them
# after CREATE EXTENSION.  A new
# one that the reference does not name fails here.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
redis_start
cluster_start "outbox.worker_enabled = off"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
reference=$root/docs/reference.md
q -c "CREATE EXTENSION pg_outbox" >/dev/null
# missing KIND PATTERN NAMES...: the names whose pattern (NAME replaced)
# docs/reference.md does not hold.
missing() {
    local kind=$1 pattern=$2 name out=""
    shift 2
    for name in "$@"; do
        grep -Fq -- "${pattern//NAME/$name}" "$reference" || out+=" $name"
    done
    [[ -z $out ]] || echo "  $kind not in docs/reference.md:$out" >&2
    [[ -z $out ]]
}
functions=$(q -c "SELECT DISTINCT p.proname FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname !~ '^_' ORDER BY 1")
views=$(q -c "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'v' AND c.relname !~ '^_' ORDER BY 1")
settings=$(q -c "SELECT name FROM pg_settings WHERE name LIKE 'outbox.%' ORDER BY 1")
metrics=$(q -c "SELECT DISTINCT family FROM outbox._metric_families() ORDER BY 1")
check "the catalog has functions, views, settings and metrics" \
    [ -n "$functions" -a -n "$views" -a -n "$settings" -a -n "$metrics" ]
check "every public function ($(echo $functions | wc -w))" missing functions '`outbox.NAME(' $functions
check "every view ($(echo $views | wc -w))" missing views '`outbox.NAME`' $views
check "every setting ($(echo $settings | wc -w))" missing settings '`NAME`' $settings
check "every metric family ($(echo $metrics | wc -w))" missing metrics '`NAME`' $metrics

checks_done reference.sh
