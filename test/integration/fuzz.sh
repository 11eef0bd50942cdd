#!/usr/bin/env bash
# Bad input from any role to every SQL function of pg_outbox gets an ERROR (or
# a WARNING), never a crash and never an internal error: a bounded, seeded,
# randomized run of test/fuzz/fuzz.py (every function of schema outbox, from
# pg_catalog, called from four roles with generated arguments while a mutator
# drops and recreates what the calls refer to).
#   FUZZ_CALLS (3000), FUZZ_SEED (2), FUZZ_DURATION (50 s cap),
#   FUZZ_DB (postgres: the database the worker serves, so it drains the
#   fuzzed outbox too), FUZZ_ARGS (more fuzz.py options).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
source "$root/test/harness/check.sh"
q() { psql -X -q -tA "$@" 2>&1; }

# Debian's python3 has psycopg2 (python3-psycopg2); a pyenv or venv python3
# first on PATH may not.
python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3)
export FUZZ_CALLS=${FUZZ_CALLS:-3000} FUZZ_SEED=${FUZZ_SEED:-2} FUZZ_DURATION=${FUZZ_DURATION:-50}
db=${FUZZ_DB:-postgres}

redis_start
cluster_start
[[ $db == postgres ]] || q -c "CREATE DATABASE $db" >/dev/null
q -d "$db" -c "CREATE EXTENSION pg_outbox" >/dev/null
start_before=$(q -c "SELECT pg_postmaster_start_time()")

# shellcheck disable=SC2086 # FUZZ_ARGS: several options
out=$(PGDATABASE=$db "$python" "$root/test/fuzz/fuzz.py" --server-log "$CLUSTER_DIR/server.log" \
    --redis-port "$REDIS_PORT" ${FUZZ_ARGS:-} 2>&1)
rc=$?
echo "$out"
result=$(grep '^fuzz-result ' <<<"$out" | tail -n 1)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$result"; }
calls=$(field calls) roles=$(field roles) crashes=$(field crashes) internal=$(field internal)
hangs=$(field hangs) restarts=$(field restarts)

check "fuzz.py ran to its summary (exit $rc)" [ -n "$result" ]
[[ ${crashes:-1} == 0 ]] && crash_note="" || crash_note=" (${crashes:-?} crashes, listed above)"
check "${calls:-0} calls from ${roles:-0} roles, no crash$crash_note" \
    bash -c "[ '${crashes:-1}' = 0 ] && [ '${calls:-0}' -ge $((FUZZ_CALLS / 2)) ] && [ '${roles:-0}' -ge 4 ]"
if [[ ${internal:-1} == 0 ]]; then
    check "no internal errors" true
else
    grep -A1 -E '^fuzz:   XX' <<<"$out" | sed 's/^/# /'
    check "no internal errors (${internal:-?} calls got SQLSTATE XX, listed above)" false
fi
check "no call outlived statement_timeout and a cancel (${hangs:-?} did)" [ "${hangs:-1}" = 0 ]
start_after=$(q -c "SELECT pg_postmaster_start_time()")
check "server still up / postmaster not restarted (crash-restarts: ${restarts:-?})" \
    bash -c "[ '$start_after' = '$start_before' ] && [ '${restarts:-1}' = 0 ] && pg_isready -q"
suspicious=$(field suspicious)
[[ ${suspicious:-0} == 0 ]] || echo "# note: ${suspicious} kinds of suspicious backfill results (reported, not checked): see 'suspicious results' above"
check "no PANIC in the server log" bash -c "! grep -qE 'PANIC:|TRAP:' '$CLUSTER_DIR/server.log'"
checks_done fuzz
