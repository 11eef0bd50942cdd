# Sourced by the benchmarks under bench/.  SMOKE=1 runs a benchmark at a
# size of seconds, to check its plumbing (servers up and down, contenders
# that finish, its checks), never its figures: test/integration/
# bench_smoke.sh runs every benchmark that sources this file that way in CI
# (issue 47: every script under bench/ does).
BENCH_NAME=bench/$(basename "$(dirname "$0")")/$(basename "$0")

# bench_fail MESSAGE: a contender failed or a wait passed its bound.
bench_fail() {
    echo "$BENCH_NAME: $*" >&2
    exit 1
}

# bench_results FILE: where the results go: FILE, or under SMOKE a scratch
# file (a smoke run's figures mean nothing).
bench_results() {
    if [[ -n ${SMOKE:-} ]]; then mktemp /tmp/pg_outbox_smoke.XXXXXX; else echo "$1"; fi
}

# bench_results_dir DIR: the same for a benchmark that writes several files
# (its results, their data, their picture) into DIR: DIR, or under SMOKE a
# scratch directory.
bench_results_dir() {
    if [[ -n ${SMOKE:-} ]]; then mktemp -d /tmp/pg_outbox_smoke.XXXXXX; else echo "$1"; fi
}
