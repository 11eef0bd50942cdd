#!/usr/bin/env python3
"""A client of organizations that may move between cells, as
test/integration/relocation_move*.sh and bench/relocation/move.sh run it:
RATE writes a second to each organization of ORGS (comma-separated
organization:project pairs), each routed to the cell that control's
outbox.organization_cell() names (asked again after an error), until the
file STOP exists.  A write is one transaction: it inserts an event into the
organization's project; every tenth also renames that project, every
twentieth deletes the event written before it.  A write the cell refuses
with OBM01 (the organization is moving or has moved) is tried again where
control says, after a short pause.  A write whose connection broke (a
cluster crashed or was stopped) is looked for in every cell once one
answers again: found, it is acknowledged; else it is tried again, so that
none is written twice.  Writes acknowledged are appended to LOG as
"<org>\t<op>\t<event or project id>\t<message or slug>\t<cell>"; refusals
as "<org>\trefused\t<seconds until the retry succeeded>".  Configured by the
environment: CONTROL_DSN, CELL_DSN_<cell> (for each cell), ORGS, RATE, LOG,
STOP; with LATENCY set, each write's wait (from its first try to its
commit, refusals and retries included) is appended there as
"<org>\t<seconds>\t<unix time of the commit>"."""
import os
import sys
import time

import psycopg2

env = os.environ
cell_names = [k[len("CELL_DSN_"):] for k in env if k.startswith("CELL_DSN_")]
connections = {}
orgs = [tuple(int(x) for x in o.split(":")) for o in env["ORGS"].split(",")]
rate = float(env.get("RATE", "100"))
log = open(env["LOG"], "a", buffering=1)
latency = open(env["LATENCY"], "a", buffering=1) if env.get("LATENCY") else None
stop = env["STOP"]
BROKEN = (psycopg2.OperationalError, psycopg2.InterfaceError)


def broken(e):
    """The connection went (a crash, a stop), whatever class libpq gave it."""
    return isinstance(e, BROKEN) or e.pgcode is None


def connection(name):
    if name not in connections:
        dsn = env["CONTROL_DSN"] if name == "control" else env["CELL_DSN_" + name]
        conn = psycopg2.connect(dsn)
        conn.autocommit = name == "control"
        connections[name] = conn
    return connections[name]


def drop(name):
    conn = connections.pop(name, None)
    if conn is not None:
        try:
            conn.close()
        except psycopg2.Error:
            pass


def until_answered(fn):
    """fn() once its clusters answer (a broken connection is made again)."""
    while True:
        try:
            return fn()
        except psycopg2.Error as e:
            if not broken(e):
                raise
            for name in list(connections):
                drop(name)
            time.sleep(0.2)


def cell_of(org):
    def ask():
        with connection("control").cursor() as c:
            c.execute("SELECT outbox.organization_cell(%s)", (org,))
            return c.fetchone()[0]
    return until_answered(ask)


def written(message):
    """(cell, event id) of the event with this message, if any cell has it."""
    def look():
        for name in cell_names:
            conn = connection(name)
            with conn.cursor() as c:
                c.execute("SELECT id FROM event WHERE message = %s", (message,))
                row = c.fetchone()
            conn.rollback()
            if row is not None:
                return name, row[0]
        return None
    return until_answered(look)


n = {org: 0 for org, _ in orgs}
last_event = {}
interval = 1.0 / rate
next_at = time.monotonic()
while not os.path.exists(stop):
    for org, project in orgs:
        n[org] += 1
        k = n[org]
        message = "w%d-%d" % (org, k)
        refused_at = None
        began = time.monotonic()
        while True:
            cell = cell_of(org)
            ops = []
            try:
                conn = connection(cell)
                with conn.cursor() as c:
                    c.execute("INSERT INTO event (project_id, message) VALUES (%s, %s) RETURNING id",
                              (project, message))
                    event = c.fetchone()[0]
                    ops.append(("insert", event, message))
                    if k % 10 == 0:
                        c.execute("UPDATE project SET slug = %s WHERE id = %s",
                                  ("renamed-%d" % k, project))
                        ops.append(("rename", project, "renamed-%d" % k))
                    if k % 20 == 0 and org in last_event:
                        c.execute("DELETE FROM event WHERE id = %s", (last_event[org],))
                        ops.append(("delete", last_event[org], ""))
                conn.commit()  # one transaction: acknowledged whole, or not at all
                break
            except psycopg2.Error as e:
                if not broken(e):
                    conn.rollback()
                    if e.pgcode != "OBM01":
                        raise
                    if refused_at is None:
                        refused_at = time.monotonic()
                    time.sleep(0.02)
                    continue
                drop(cell)
                found = written(message)
                if found is None:
                    continue  # not written: try again
                cell, event = found  # committed: all that the transaction did
                ops = [("insert", event, message)]
                if k % 10 == 0:
                    ops.append(("rename", project, "renamed-%d" % k))
                if k % 20 == 0 and org in last_event:
                    ops.append(("delete", last_event[org], ""))
                break
        if latency is not None:
            latency.write("%d\t%.4f\t%.3f\n" % (org, time.monotonic() - began, time.time()))
        if refused_at is not None:
            log.write("%d\trefused\t%.3f\n" % (org, time.monotonic() - refused_at))
        for op, object_id, value in ops:
            log.write("%d\t%s\t%d\t%s\t%s\n" % (org, op, object_id, value, cell))
        last_event[org] = event
    next_at += interval
    delay = next_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    else:
        next_at = time.monotonic()
sys.exit(0)
