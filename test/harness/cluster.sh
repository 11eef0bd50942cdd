# Throwaway PostgreSQL cluster and Redis server for tests, the demo and the
# benchmarks.  Source it, then: redis_start; cluster_start [extra
# postgresql.conf lines] (it points outbox.redis_port at that Redis); ... ;
# cluster_stop (also run from the EXIT trap).
#
# Works as root (the cluster then runs as the unprivileged OS user
# "postgres") or as a normal user.  Exports PGHOST, PGPORT, PGUSER,
# PGDATABASE for psql and friends, and REDIS_PORT.  OUTBOX_SERVER_ENV, when
# set, is passed to the server's environment (VAR=value ...).

# PG_MAJOR=17: PostgreSQL 17's server and pg_config (15 by default).
export PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/$PG_MAJOR/bin 2>/dev/null || dirname "$(command -v pg_ctl)")}
PG_CONFIG=${PG_CONFIG:-$PG_BIN/pg_config}

_free_port() {
    python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

_as_db_user() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_start() {
    CLUSTER_DIR=$(mktemp -d /tmp/pg_outbox.XXXXXX)
    [[ $(id -u) == 0 ]] && chown postgres: "$CLUSTER_DIR"
    export PGPORT=$(_free_port) PGHOST=$CLUSTER_DIR PGUSER=postgres PGDATABASE=postgres
    _as_db_user "$PG_BIN/initdb" -D "$CLUSTER_DIR/data" -U postgres --no-sync -A trust \
        -E UTF8 --locale=C.UTF-8 >"$CLUSTER_DIR/initdb.log" 2>&1 || {
        cat "$CLUSTER_DIR/initdb.log"; return 1; }
    cat >>"$CLUSTER_DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$CLUSTER_DIR'
shared_preload_libraries = 'pg_outbox'
fsync = off
max_connections = 40
log_min_messages = warning
${REDIS_PORT:+outbox.redis_port = $REDIS_PORT}
$(printf '%s\n' "$@")
CONF
    _as_db_user env ${OUTBOX_SERVER_ENV:-} "$PG_BIN/pg_ctl" -D "$CLUSTER_DIR/data" \
        -l "$CLUSTER_DIR/server.log" ${OUTBOX_CORE_FILES:+-c} -w start >/dev/null || { cat "$CLUSTER_DIR/server.log"; return 1; }
}

redis_start() {
    export REDIS_PORT=$(_free_port)
    REDIS_LOG=$(mktemp /tmp/pg_outbox_redis.XXXXXX)
    # OUTBOX_SMOKE_TAG (test/integration/bench_smoke.sh) in its title:
    # Redis writes its title over its environment, where the tag was.
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        ${OUTBOX_SMOKE_TAG:+--proc-title-template "{title} {listen-addr} $OUTBOX_SMOKE_TAG"} \
        --daemonize no >"$REDIS_LOG" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 50); do
        redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "redis-server did not start" >&2
    return 1
}

# Says "not ok" for a server process that died of a signal other than
# SIGKILL (which tests send on purpose) in the server log given: a crashed
# backend fails its script whatever the script's own checks said.
report_crashes() { # SERVER_LOG
    local crash
    crash=$(grep -m1 -E 'terminated by signal ([0-8]|[1-9][0-9])' "$1" 2>/dev/null) || return 0
    echo "not ok - no server process crashed: ${crash#*LOG:  }"
}

cluster_stop() {
    if [[ -n ${REDIS_PID:-} ]]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        REDIS_PID=
        rm -f "$REDIS_LOG"
    fi
    if [[ -n ${CLUSTER_DIR:-} && -d $CLUSTER_DIR ]]; then
        _as_db_user "$PG_BIN/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate stop >/dev/null 2>&1 || true
        report_crashes "$CLUSTER_DIR/server.log"
        # test/sanitize.sh: keep what the sanitizers reported.
        if [[ -n ${OUTBOX_SANITIZER_LOG:-} ]]; then
            grep -h -A 30 -E 'runtime error:|ERROR: AddressSanitizer' "$CLUSTER_DIR/server.log" \
                >>"$OUTBOX_SANITIZER_LOG" 2>/dev/null || true
        fi
        [[ -n ${KEEP_CLUSTER:-} ]] || rm -rf "$CLUSTER_DIR"
        CLUSTER_DIR=
    fi
}

# make install, as root or through sudo.  With OUTBOX_SANITIZE=1 (set by
# test/sanitize.sh) the library is built with the sanitizers, and every
# server this file starts gets the sanitizers' options (OUTBOX_SERVER_ENV)
# and leaves their reports in OUTBOX_SANITIZER_LOG when stopped.
# OUTBOX_NO_INSTALL=1: neither, the installed build is used (a benchmark run
# beside a build in progress).
install_extension() {
    local root=$1
    [[ -n ${OUTBOX_NO_INSTALL:-} ]] && return 0
    local flags=(-C "$root" -s PG_CONFIG="$PG_CONFIG" ${OUTBOX_SANITIZE:+SANITIZE=1})
    make "${flags[@]}" -j"$(nproc)" >/dev/null
    if [[ -w $("$PG_CONFIG" --pkglibdir) ]]; then
        make "${flags[@]}" install >/dev/null
    else
        sudo make "${flags[@]}" install >/dev/null
    fi
}
