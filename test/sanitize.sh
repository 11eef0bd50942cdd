#!/usr/bin/env bash
# Every test against a pg_outbox built with AddressSanitizer and
# UndefinedBehaviorSanitizer (make SANITIZE=1), in servers that preload
# libasan (the server itself is not instrumented; leak detection is off,
# since PostgreSQL frees memory by contexts, not one allocation at a time).
# Ends with the number of sanitizer reports, which must be zero, and leaves
# the ordinary build installed again.
#   bash test/sanitize.sh [log directory]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
logs=${1:-$(mktemp -d /tmp/pg_outbox_sanitize.XXXXXX)}
mkdir -p "$logs"
[[ $(id -u) == 0 ]] && chown postgres: "$logs"
chmod 777 "$logs"
libasan=$(gcc -print-file-name=libasan.so)
export OUTBOX_SANITIZE=1
export OUTBOX_SERVER_ENV="LD_PRELOAD=$libasan ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:log_path=$logs/asan UBSAN_OPTIONS=print_stacktrace=1:log_path=$logs/ubsan"
make -C "$root" -s clean >/dev/null
bash "$root/test/run-tests.sh"
status=$?
reports=$(ls "$logs" | grep -cE '^(asan|ubsan)\.')
for report in "$logs"/asan.* "$logs"/ubsan.*; do
    [[ -e $report ]] && head -n 40 "$report"
done
make -C "$root" -s clean >/dev/null
unset OUTBOX_SANITIZE OUTBOX_SERVER_ENV
source "$root/test/cluster.sh"
install_extension "$root"
echo "sanitizer reports: $reports (in $logs)"
if ((reports > 0)); then
    echo "0 passed, 1 failed"
    exit 1
fi
exit $status
