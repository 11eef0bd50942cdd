#!/usr/bin/env python3
"""bench/consumer/run.sh's clock: runs the statements that start a contender, then
polls outbox.stats (shared memory, nothing scanned) until the category's processed
count has grown by the rows given; prints the milliseconds in between.  Exits 1
with a message after 300 s, or when the process pid (0: none) has exited.

    clock.py CATEGORY ROWS PID STATEMENT...   (the PG* variables name the database)

A psql started every few milliseconds to count the outbox's rows, as before,
scanned the table's dead rows on a core the worker leaves idle and the
consumer does not: it slowed the consumer alone."""
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


def exited():
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


target = processed() + rows
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
print(max(1, round((time.perf_counter() - start) * 1000)))
