#!/usr/bin/env bash
# Runs a command against PostgreSQL 17, in a Debian 13 ("trixie") root made
# by debootstrap beside this Debian 12 (issue 48; docs/testing.md), as root:
#
#   bash test/debian13.sh bash test/run-tests.sh
#   bash test/debian13.sh env SOAK_MINUTES=1 bash test/run-tests.sh
#
# The root (DEBIAN13_ROOT, /var/cache/pg_outbox/debian13 by default) is made
# once and kept: .ci/run's steps share it.  Each call installs what
# test/install-deps.sh names for PG_MAJOR=17 when that script changed,
# copies the tree (tracked and new files, no build output) to /src in the
# root, mounts /proc, /sys and /dev there for the call's time, and runs
# the command in /src with PG_MAJOR=17 and a clean environment.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${DEBIAN13_ROOT:-/var/cache/pg_outbox/debian13}
MIRROR=${DEBIAN13_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) == 0 ]] || { echo "test/debian13.sh: run as root (chroot, mount)" >&2; exit 1; }
(($# > 0)) || { echo "usage: bash test/debian13.sh COMMAND..." >&2; exit 2; }

# What a killed call left mounted in the root: unmounted before anything is
# removed there (rm would go down into the host's /dev, /proc and /sys).
unmount_all() {
    local m
    for m in $(awk -v r="$ROOT/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
        umount -l "$m"
    done
}
if [[ ! -e $ROOT/etc/pg_outbox_root ]]; then
    command -v debootstrap >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    unmount_all
    rm -rf --one-file-system "$ROOT"
    mkdir -p "$(dirname "$ROOT")"
    debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >/tmp/pg_outbox_debootstrap.log 2>&1 || {
        tail -n 20 /tmp/pg_outbox_debootstrap.log; exit 1; }
    touch "$ROOT/etc/pg_outbox_root"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev dev/pts dev/shm; do
    mkdir -p "$ROOT/$m"
    if ! mountpoint -q "$ROOT/$m"; then
        mount --bind "/$m" "$ROOT/$m"
        mounted+=("$ROOT/$m")
    fi
done

# The tree as test/package.sh copies it: tracked and new files.
rm -rf --one-file-system "$ROOT/src"
mkdir "$ROOT/src"
git -C "$root" ls-files -z --cached --others --exclude-standard |
    (cd "$root" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$ROOT/src"

in_root() {
    chroot "$ROOT" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 TERM=dumb PG_MAJOR=17 bash -c 'cd /src && "$@"' _ "$@"
}
if ! cmp -s "$root/test/install-deps.sh" "$ROOT/etc/pg_outbox_deps"; then
    in_root bash test/install-deps.sh
    cp "$root/test/install-deps.sh" "$ROOT/etc/pg_outbox_deps"
fi
in_root "$@"
