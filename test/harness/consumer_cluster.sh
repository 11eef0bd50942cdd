# A throwaway cluster and Redis for the scripts that run consumers as
# processes (consumers.sh, consumer_hold.sh, consumer_fairness.sh).  Source
# it with the cluster's extra postgresql.conf lines as arguments; it starts
# both, stops them and every process in pids on exit, and gives q (psql on
# the cluster), dsn ROLE, PYTHON, a logs folder and consumer NAME
# [VAR=value ...] (test/harness/consumer_process.py as the role consumer,
# on CONSUMER_CATEGORIES, its pid in $! and in pids).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; cluster_stop' EXIT
redis_start
cluster_start "$@"

q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
PYTHON=/usr/bin/python3 # Debian's, with python3-psycopg2
dsn() { echo "host=$PGHOST port=$PGPORT dbname=postgres user=$1"; }
logs=$(mktemp -d)
chmod 777 "$logs"
consumer() { # NAME [VAR=value ...]
    local name=$1
    shift
    env NAME="$name" OUTBOX_DSN="$(dsn consumer)" RECORD_DSN="$(dsn postgres)" \
        CATEGORIES="${CONSUMER_CATEGORIES:-}" "$@" \
        "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/consumer_process.py" \
        >"$logs/$name.out" 2>"$logs/$name.err" &
    pids+=($!)
}
