#!/usr/bin/env bash
# Every test against a pg_outbox built with AddressSanitizer and
# UndefinedBehaviorSanitizer (make SANITIZE=1).  Ends with the suite's count
# plus one check: zero sanitizer reports in the logs of every server the
# tests started.  Leaves the ordinary build installed again.
#   bash test/sanitize.sh
#
# The sanitizer runtime is not preloaded: preloading libasan (GCC's or
# clang's) into Debian 12's postgres deadlocks before main(), in p11-kit's
# locale setup (linked through libldap and gnutls; a futex on glibc's
# __libc_setlocale_lock).  It is loaded with the library instead, at
# postmaster start (shared_preload_libraries, before shared memory exists),
# with verify_asan_link_order=0.  pg_outbox's own code is instrumented in
# full (every access it makes, stack and globals, and UBSan's checks); heap
# memory comes from PostgreSQL's palloc and libc's malloc, which ASan does
# not see in this mode.  Leak detection is off: PostgreSQL frees memory by
# contexts.  Reports go to each server's log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export OUTBOX_SANITIZE=1
export OUTBOX_SANITIZER_LOG=$(mktemp /tmp/pg_outbox_sanitizer.XXXXXX)
export OUTBOX_SERVER_ENV="ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1"
make -C "$root" -s clean >/dev/null
run_log=$(mktemp /tmp/pg_outbox_sanitize_run.XXXXXX)
bash "$root/test/run-tests.sh" | tee "$run_log"
reports=$(grep -cE 'runtime error:|ERROR: AddressSanitizer' "$OUTBOX_SANITIZER_LOG")
head -n 80 "$OUTBOX_SANITIZER_LOG"
make -C "$root" -s clean >/dev/null
unset OUTBOX_SANITIZE OUTBOX_SERVER_ENV
source "$root/test/harness/cluster.sh"
install_extension "$root"
# The suite's own count, and one more check: no sanitizer report.
read -r passed failed < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$run_log" | tail -n 1)
passed=${passed:-0} failed=${failed:-1}
echo "sanitizer reports: $reports (kept in $OUTBOX_SANITIZER_LOG)"
if ((reports == 0)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
rm -f "$run_log"
echo
echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
