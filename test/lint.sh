#!/usr/bin/env bash
# The habits CI enforces, before the tests: the sources as clang-format
# writes them (.clang-format), no clang-tidy warning (.clang-tidy; a
# suppression names its check and says why, where it stands), and no cycle
# between the folders of src/ (test/layers.sh), no file of
# extension/functions/ over 500 lines (issue 45: split by subject), and no
# PL/pgSQL function there over 80 lines of body.  Exits non-zero on any.
# `make format` fixes the first.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
failed=0
sources=$(make -s print-sources)
headers=$(ls src/*.hpp src/*/*.hpp src/*/*/*.hpp 2>/dev/null)
if format=$(clang-format --dry-run --Werror $sources $headers test/unit/*.cpp 2>&1); then
    echo "ok - clang-format"
else
    echo "$format" | head -n 20 >&2
    echo "not ok - clang-format: run make format" >&2
    failed=1
fi
cmake_log=$(mktemp)
cmake -S . -B build >"$cmake_log" 2>&1 || { cat "$cmake_log" >&2; exit 1; }
rm -f "$cmake_log"
# Two at a time (CI's machine has two cores): half the step's time.
if tidy=$(printf '%s\n' $sources | xargs -P 2 -n 8 clang-tidy -p build --quiet \
              --warnings-as-errors='*' 2>&1); then
    echo "ok - clang-tidy ($(echo $sources | wc -w) files)"
else
    echo "$tidy" | grep -E 'warning:|error:' | head -n 40 >&2
    echo "not ok - clang-tidy" >&2
    failed=1
fi
if layers=$(bash test/layers.sh 2>&1); then
    echo "ok - $(echo "$layers" | tail -n 1)"
else
    echo "$layers" | tail -n 20 >&2
    echo "not ok - a cycle between src/ folders" >&2
    failed=1
fi
long=$(find extension/functions -name '*.sql' -exec awk 'END { if (NR > 500) print FILENAME " (" NR " lines)" }' {} \;)
if [[ -z $long ]]; then
    echo "ok - no file of extension/functions/ over 500 lines"
else
    echo "$long" >&2
    echo "not ok - a file of extension/functions/ over 500 lines: split it by subject" >&2
    failed=1
fi
# A function's body: the lines between "AS $$" and "$$;" of a CREATE
# FUNCTION whose header says LANGUAGE plpgsql.
long=$(find extension/functions -name '*.sql' -exec awk '
    /^CREATE OR REPLACE FUNCTION/ { name = $5; sub(/\(.*/, "", name); plpgsql = 0; body = -1 }
    /LANGUAGE plpgsql/ && body < 0 { plpgsql = 1 }
    /^AS \$\$/ && plpgsql { body = 0; next }
    /^\$\$;/ && body >= 0 { if (body > 80) print FILENAME ": " name " (" body " lines)"; body = -1; plpgsql = 0 }
    body >= 0 { body++ }' {} \;)
if [[ -z $long ]]; then
    echo "ok - no PL/pgSQL function of extension/functions/ over 80 lines"
else
    echo "$long" >&2
    echo "not ok - a PL/pgSQL function over 80 lines: split it" >&2
    failed=1
fi
exit $failed
