#!/usr/bin/env bash
# The benchmarks that have a smoke size (SMOKE=1: seconds, bench/smoke.sh)
# run at it, so that a broken benchmark shows in CI: each must exit 0, and
# leave no server running (a postmaster or a Redis that was not there
# before).  Then a benchmark whose contender fails (its Python consumer
# replaced by /bin/false) must fail with a message, a non-zero status, and
# its servers stopped all the same.  The figures of a smoke run mean
# nothing and are not looked at.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/check.sh"
servers() { pgrep -f 'postgres -D /tmp/pg_outbox\.|redis-server 127\.0\.0\.1' | sort; }
left_over() { # before: the servers that were not there before
    comm -13 <(echo "$1") <(servers) | grep -c .
}
for script in $(grep -l 'source "$root/bench/smoke.sh"' "$root"/bench/*/*.sh | sort); do
    name=${script#"$root"/}
    before=$(servers)
    started=$SECONDS
    SMOKE=1 bash "$script" >/tmp/bench_smoke.$$ 2>&1
    rc=$?
    check "$name at its smoke size exits 0 ($((SECONDS - started)) s)" [ "$rc" = 0 ] ||
        tail -20 /tmp/bench_smoke.$$
    check "$name leaves no server running" [ "$(left_over "$before")" = 0 ]
done
before=$(servers)
SMOKE=1 PYTHON=/bin/false bash "$root/bench/consumer/run.sh" >/tmp/bench_smoke.$$ 2>&1
rc=$?
check "bench/consumer/run.sh with a consumer that fails exits non-zero" [ "$rc" != 0 ]
check "... saying so: $(grep 'bench/consumer/run.sh:' /tmp/bench_smoke.$$ | head -1)" \
    grep -q 'bench/consumer/run.sh: the consumer' /tmp/bench_smoke.$$
check "... and stops its servers" [ "$(left_over "$before")" = 0 ]
rm -f /tmp/bench_smoke.$$
checks_done bench_smoke
