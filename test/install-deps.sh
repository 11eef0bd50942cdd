#!/usr/bin/env bash
# Installs what pg_outbox needs to build, test and benchmark on Debian 12
# (as root, or through sudo): also what builds its Debian package
# (test/package.sh), the PgBouncer, node exporter and Prometheus its tests
# run (test/integration/pgbouncer.sh, prometheus.sh, alert_rules.sh:
# promtool; systemd-analyze checks the feeder's units) and matplotlib for
# the benchmarks' pictures.  No service is started: the tests start their
# own, on 127.0.0.1.
set -euo pipefail
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi; }
# PG_MAJOR=17: PostgreSQL 17's packages (Debian 13; .ci/run's second root).
v=${PG_MAJOR:-15}
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config python3 libgtest-dev clang-format clang-tidy \
    postgresql-$v postgresql-server-dev-$v postgresql-$v-pgtap \
    libtap-parser-sourcehandler-pgtap-perl postgresql-$v-pgq3 \
    libhiredis-dev redis-server redis-tools python3-prometheus-client \
    python3-psycopg2 python3-django \
    debhelper postgresql-server-dev-all pgbouncer prometheus prometheus-node-exporter systemd \
    python3-matplotlib >/dev/null
