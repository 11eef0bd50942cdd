#!/usr/bin/env python3
"""bench/consumer/run.sh's clock: runs the statements that start a contender, then
polls outbox.stats (shared memory, nothing scanned) until the category's processed
count has grown by the rows given; prints the milliseconds in between, then the
CPU milliseconds that the server's processes and the process pid (with its
children) used meanwhile.  Exits 1 with a message after 300 s, or when the
process pid (0: none) has exited.

    clock.py CATEGORY ROWS PID STATEMENT...   (the PG* variables name the database)

A psql started every few milliseconds to count the outbox's rows, as before,
scanned the table's dead rows on a core the worker leaves idle and the
consumer does not: it slowed the consumer alone.

The CPU time is the figure to compare on a shared machine: a contender's
messages per second move with what else runs, its CPU per message much
less.  It counts every process of the server (the contender's backends,
the WAL writer, this clock's backend) and of the consumer; a process that
exits before the end leaves its time out (none does: the worker is
stopped after the clock)."""
import os
import sys
import time

import psycopg2

category, rows, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
conn = psycopg2.connect("")
conn.autocommit = True
cur = conn.cursor()


def processed():
    cur.execute("SELECT processed FROM outbox.stats WHERE category = %s", (category,))
    return cur.fetchone()[0]


def stat_fields(process):
    """The fields of /proc/PID/stat after the command name, or None."""
    try:
        with open("/proc/%d/stat" % process) as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def cpu_ticks(roots):
    """utime + stime of the processes in roots and of their children."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        # fields[1] is the parent's pid; [11] and [12] utime and stime.
        if fields is not None and (int(entry) in roots or int(fields[1]) in roots):
            ticks += int(fields[11]) + int(fields[12])
    return ticks


def exited():
    fields = stat_fields(pid)
    return fields is None or fields[0] == "Z"


cur.execute("SELECT pg_backend_pid()")
postmaster = int(stat_fields(cur.fetchone()[0])[1])
roots = {postmaster, pid} if pid else {postmaster}
target = processed() + rows
ticks = cpu_ticks(roots)
for statement in sys.argv[4:]:
    cur.execute(statement)
start = time.perf_counter()
while processed() < target:
    if time.perf_counter() - start > 300:
        sys.exit("%d of %d rows processed after 300 s" % (rows - target + processed(), rows))
    if pid and exited():
        sys.exit("the consumer exited early")
    time.sleep(0.005)
# At least 1: run.sh divides by it, and a smoke run on a fast machine may
# finish within the first poll.
elapsed = time.perf_counter() - start
print(max(1, round(elapsed * 1000)),
      round((cpu_ticks(roots) - ticks) * 1000 / os.sysconf("SC_CLK_TCK")))
