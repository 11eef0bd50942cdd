#!/usr/bin/env bash
# The alert rules shipped in monitoring/: promtool finds them valid, their
# unit tests (each alert fired by one series, not by another, nor before its
# condition and for: hold) pass, and docs/operating.md's table "What to
# alert on" names exactly the file's alerts, so the two cannot drift apart.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/check.sh"
rules=$root/monitoring/pg_outbox.rules.yml

out=$(promtool check rules --lint=all --lint-fatal "$rules" 2>&1)
check "promtool check rules: valid, no lint finding" [ $? = 0 ] || echo "$out" >&2
check "the rule file has every alert (19)" [ "$(grep -c '^ *- alert: ' "$rules")" = 19 ]
out=$(cd "$root/monitoring" && promtool test rules pg_outbox.rules.test.yml 2>&1)
check "promtool test rules: every alert fires where it should and nowhere else" [ $? = 0 ] ||
    echo "$out" >&2
# Each alert has a test that expects it to fire, and one that expects nothing.
tests=$root/monitoring/pg_outbox.rules.test.yml
untested=$(for a in $(sed -n 's/^ *- alert: //p' "$rules"); do
    fires=$(grep -A2 "alertname: $a\$" "$tests" | grep -c 'exp_alerts:$')
    quiet=$(grep -A1 "alertname: $a\$" "$tests" | grep -c 'exp_alerts: \[\]')
    ((fires > 0 && quiet > 0)) || echo "$a"
done)
check "each alert tested firing and quiet${untested:+ (not: $untested)}" [ -z "$untested" ]

# The table's first column holds the alert names, in backquotes.
in_file=$(sed -n 's/^ *- alert: //p' "$rules" | sort)
in_doc=$(awk '/^## What to alert on/ {s = 1; next} s && /^## / {exit} s && /^\| `PgOutbox/' \
    "$root/docs/operating.md" | cut -d'|' -f2 | grep -o 'PgOutbox[A-Za-z]*' | sort)
check "docs/operating.md names the file's alerts, no more, no fewer" [ "$in_doc" = "$in_file" ] ||
    diff <(echo "$in_doc") <(echo "$in_file") >&2
checks_done alert_rules.sh
