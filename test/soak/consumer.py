#!/usr/bin/env python3
"""A consumer of the soak (test/soak/soak.py starts it again whenever it
dies): consumer/outbox_consumer.py's Consumer on control, for one category,
its handler recording each message in control's table consumed through a
connection of its own, committed at once, so that a message delivered again
(after a lease that ended before its completion) shows twice.
With REPLICA=1 the handler does what Sentry's handlers do with a message:
it reads the object the message names again, here the label from the cell
that holds its organization (the message's shard, control's
organization_cell()), as soak_reader, and makes control's label_replica
hold it, or not; a cell that does not answer fails the message (its shard
backs off and comes again).  Only that cell: after a move's cutover the
source keeps its copies for a while and deletes them without messages (the
soak's first 3-minute run read them there, and kept labels the target had
deleted since).
Environment: NAME, OUTBOX_DSN, RECORD_DSN, CATEGORY, LEASE, REPLICA,
DIR_us, PORT_us, DIR_eu, PORT_eu."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "consumer"))
import psycopg2  # noqa: E402
from psycopg2.extras import Json  # noqa: E402
from outbox_consumer import Consumer  # noqa: E402

env = os.environ
record = psycopg2.connect(env["RECORD_DSN"])
record.autocommit = True
recorder = record.cursor()
cells = {}


def cell(name):
    if name not in cells:
        conn = psycopg2.connect("host=%s port=%s user=soak_reader dbname=postgres connect_timeout=3"
                                % (env["DIR_" + name], env["PORT_" + name]))
        conn.autocommit = True
        cells[name] = conn
    return cells[name]


def read_label(label, organization):
    """(organization, name) of the label in its organization's cell, or
    None when that cell does not have it."""
    recorder.execute("SELECT outbox.organization_cell(%s)", (organization,))
    name = recorder.fetchone()[0]
    try:
        with cell(name).cursor() as c:
            c.execute("SELECT organization_id, name FROM label WHERE id = %s", (label,))
            return c.fetchone()
    except psycopg2.Error:
        conn = cells.pop(name, None)
        if conn is not None:
            conn.close()
        raise


def handle(message):
    payload = message["payload"]
    if env.get("REPLICA") == "1":
        row = read_label(message["object_identifier"], message["shard_identifier"])
        if row is None:
            recorder.execute("DELETE FROM label_replica WHERE id = %s",
                             (message["object_identifier"],))
            payload = None
        else:
            recorder.execute("INSERT INTO label_replica VALUES (%s, %s, %s) ON CONFLICT (id)"
                             " DO UPDATE SET organization_id = excluded.organization_id,"
                             " name = excluded.name", (message["object_identifier"],) + row)
            payload = {"name": row[1]}
    recorder.execute(
        "INSERT INTO consumed (consumer, category, object, payload, cell, first_id, last_id,"
        " claim, lease_until) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (env["NAME"], message["category"], message["object_identifier"],
         Json(payload) if payload is not None else None,
         message["cell_name"], message["first_id"], message["last_id"], message["claim"],
         message["lease_until"]))


# The cells' messages, which control's links received.
Consumer(env["OUTBOX_DSN"], handle, [env["CATEGORY"]], batch=200,
         lease=env.get("LEASE", "10 seconds"), poll=1.0, silo="cell").run()
