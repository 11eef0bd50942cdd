#!/usr/bin/env bash
# Writes SELECT outbox.metrics() to a .prom file for the node exporter's
# textfile collector (docs/operating.md, "Scraping with Prometheus"); the
# systemd timer pg-outbox-metrics.timer runs it every 15 s.
#
# The connection is libpq's: PGHOST, PGPORT, PGDATABASE, PGUSER (a member of
# pg_monitor) and the rest come from the environment.  OUTBOX_TEXTFILE_DIR
# is the collector's directory, OUTBOX_TEXTFILE_NAME the file's name in it.
# On any failure the previous file stays as it was and the script exits
# non-zero: node_textfile_mtime_seconds then stops moving, which the alert
# PgOutboxMetricsStale watches.
set -euo pipefail
dir=${OUTBOX_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
name=${OUTBOX_TEXTFILE_NAME:-pg_outbox.prom}
# A server that hangs must not hold the timer's runs back for long.
export PGCONNECT_TIMEOUT=${PGCONNECT_TIMEOUT:-5}
export PGOPTIONS=${PGOPTIONS:--c statement_timeout=10s}
export PGAPPNAME=${PGAPPNAME:-pg-outbox-metrics}

# The collector reads *.prom only, and a rename within one directory is
# atomic: it never sees a half-written file.
tmp=$(mktemp "$dir/.$name.XXXXXX")
trap 'rm -f "$tmp"' EXIT
psql -X -q -tA -v ON_ERROR_STOP=1 -c 'SELECT outbox.metrics()' >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$dir/$name"
