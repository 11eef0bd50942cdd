#!/usr/bin/env bash
# The include graph between the folders of src/: prints each edge ("from ->
# to": a file of from, or of a folder inside it, includes a header of to) and fails when the edges
# form a cycle (tsort), so that the layers of README's architecture map
# stay layers.  CI runs it; `bash test/layers.sh [ROOT]` shows the edges.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root/src" || exit 1
folders=$(find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
edges=$(for from in $folders; do
    grep -rho --include='*.cpp' --include='*.hpp' '^#include "[a-z_]*/' "$from" 2>/dev/null |
        sed 's/^#include "//; s/\/$//' | sort -u | while read -r to; do
            [[ $to != "$from" && -d $to ]] && echo "$from $to"
        done
done)
echo "$edges" | sed 's/ / -> /'
echo "$(echo "$edges" | grep -c .) edges between $(echo "$folders" | wc -w) folders"
if ! order=$(echo "$edges" | tsort 2>/tmp/layers.$$); then
    echo "a cycle between src/ folders:" >&2
    grep -v 'input contains a loop' /tmp/layers.$$ | sed 's/^tsort: /  /' >&2
    rm -f /tmp/layers.$$
    exit 1
fi
rm -f /tmp/layers.$$
echo "no cycle; from the top: $(echo $order)"
