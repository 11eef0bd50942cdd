#!/usr/bin/env python3
"""A consumer of the soak (test/soak/soak.py starts it again whenever it
dies): consumer/outbox_consumer.py's Consumer on control, for one category,
its handler recording each message in control's table consumed through a
connection of its own, committed at once, so that a message delivered again
(after a lease that ended before its completion) shows twice.
Environment: NAME, OUTBOX_DSN, RECORD_DSN, CATEGORY, LEASE."""
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


def handle(message):
    recorder.execute(
        "INSERT INTO consumed (consumer, category, object, payload, cell, first_id, last_id,"
        " claim, lease_until) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (env["NAME"], message["category"], message["object_identifier"],
         Json(message["payload"]) if message["payload"] is not None else None,
         message["cell_name"], message["first_id"], message["last_id"], message["claim"],
         message["lease_until"]))


# The cells' messages, which control's links received.
Consumer(env["OUTBOX_DSN"], handle, [env["CATEGORY"]], batch=200,
         lease=env.get("LEASE", "10 seconds"), poll=1.0, silo="cell").run()
