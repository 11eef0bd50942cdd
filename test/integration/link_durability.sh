#!/usr/bin/env bash
# A link acknowledges a batch (and the other side forgets it) only once
# this side's deletion of the batch's rows is durable.  The worker commits
# with synchronous_commit = off; here the WAL writer waits 10 s, so its
# commits sit in the WAL buffers, and control is then stopped as in a crash
# (immediate): whatever the worker deleted after a batch went out comes
# back at restart.  Every batch the cells forgot on control's word must
# have its deletion on disk, so nothing goes out again: each user is applied
# once in each cell.  (Seen in CI's sanitizer run of cells.sh part 5, where
# a SIGKILLed worker's lost commits sent 3,000 users twice; here it is made
# to happen every time.)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cells.sh"
trap cells_stop EXIT
source "$root/test/harness/check.sh"
cells_start "wal_writer_delay = 10000" "outbox.link_batch_size = 10" || exit 1
cells_setup || { echo "setup failed"; exit 1; }
applied() { on "$1" -c "SELECT count(*) || ' ' || count(DISTINCT object) FROM applied WHERE category = 1 AND object BETWEEN 1001 AND 1400"; }

# 400 users: rounds of four batches of ten rows, one round a cycle, each
# acknowledging the last round's batches.
on control -c "INSERT INTO auth_user SELECT g, 'user ' || g FROM generate_series(1001, 1400) g"
check "us gets the 400 users" wait_on us 60 \
    "SELECT count(DISTINCT object) FROM applied WHERE category = 1 AND object BETWEEN 1001 AND 1400" 400
check "eu too" wait_on eu 60 \
    "SELECT count(DISTINCT object) FROM applied WHERE category = 1 AND object BETWEEN 1001 AND 1400" 400
check "control's outbox is empty" wait_on control 30 "SELECT count(*) FROM outbox.control_outbox" 0
# A crash before the WAL writer has written the worker's last commits.
cell_stop control
cell_start control || exit 1
sleep 5 # the worker's first cycles: what came back goes out now
check "after the crash, control's outbox drains again" wait_on control 60 \
    "SELECT count(*) FROM outbox.control_outbox" 0
sleep 2
echo "  applied in us: $(applied us), in eu: $(applied eu) (count, distinct)"
check "none applied twice in us" [ "$(applied us)" = "400 400" ]
check "none applied twice in eu" [ "$(applied eu)" = "400 400" ]

checks_done link_durability.sh
