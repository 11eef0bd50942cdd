#!/usr/bin/env bash
# The benchmarks that have a smoke size (SMOKE=1: seconds, bench/smoke.sh)
# run at it, so that a broken benchmark shows in CI: each must exit 0, and
# leave no process running that it started (each run carries a tag in its
# environment, which its servers inherit: other scripts' servers, running
# beside it, do not count).  Then a benchmark whose contender fails (its Python consumer
# exiting at once) must fail with a message, a non-zero status, and
# its servers stopped all the same.  The figures of a smoke run mean
# nothing and are not looked at.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/check.sh"
# The build the suite installed: a benchmark that built and installed it
# again would race the other scripts running beside this one.
export OUTBOX_NO_INSTALL=1
tag=bench_smoke_$$_$RANDOM
left_over() { # the processes that still carry the tag: in their environment, or
    # in the title of a Redis (test/harness/cluster.sh)
    { grep -lsx -z "OUTBOX_SMOKE_TAG=$tag" /proc/[0-9]*/environ; pgrep -f "redis-server .* $tag\$"; } | grep -c .
}
for script in $(grep -l 'source "$root/bench/smoke.sh"' "$root"/bench/*/*.sh | sort); do
    name=${script#"$root"/}
    started=$SECONDS
    OUTBOX_SMOKE_TAG=$tag SMOKE=1 bash "$script" >/tmp/bench_smoke.$$ 2>&1
    rc=$?
    check "$name at its smoke size exits 0 ($((SECONDS - started)) s)" [ "$rc" = 0 ] ||
        tail -20 /tmp/bench_smoke.$$
    check "$name leaves no process running" [ "$(left_over)" = 0 ]
done
# The consumer fails; the benchmark's clock, Python as well, does not.
failing=$(mktemp)
printf '#!/bin/sh\ncase "$1" in *consume.py) exit 1 ;; esac\nexec /usr/bin/python3 "$@"\n' >"$failing"
chmod 755 "$failing"
OUTBOX_SMOKE_TAG=$tag SMOKE=1 PYTHON=$failing bash "$root/bench/consumer/run.sh" >/tmp/bench_smoke.$$ 2>&1
rc=$?
rm -f "$failing"
check "bench/consumer/run.sh with a consumer that fails exits non-zero" [ "$rc" != 0 ]
check "... saying so: $(grep 'bench/consumer/run.sh:' /tmp/bench_smoke.$$ | head -1)" \
    grep -q 'bench/consumer/run.sh: the consumer' /tmp/bench_smoke.$$
check "... and stops its servers" [ "$(left_over)" = 0 ]
rm -f /tmp/bench_smoke.$$
checks_done bench_smoke
