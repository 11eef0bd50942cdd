#!/usr/bin/env python3
"""bench/consumer/run.sh's consumer: consumer/outbox_consumer.py, claiming three batches
ahead, with a no-op handler (mode noop) or one that measures commit-to-handler lag from the
payload's written_at (mode lag, printed as "p50 p99 max count" in ms on
SIGTERM).  OUTBOX_DSN names the database."""
import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "consumer"))
from outbox_consumer import Consumer  # noqa: E402

mode = sys.argv[1]
lags = []


def lag(message):
    written = datetime.datetime.fromisoformat(message["payload"]["written_at"])
    now = datetime.datetime.now(datetime.timezone.utc)
    lags.append((now - written).total_seconds() * 1000)


consumer = Consumer(os.environ["OUTBOX_DSN"], (lambda message: None) if mode == "noop" else lag,
                    batch=1000, poll=60, claim_ahead=3)
consumer.run()
if mode == "lag":
    lags.sort()
    n = len(lags)
    print("%.0f %.0f %.0f %d" % (lags[n // 2], lags[min(n - 1, int(n * 0.99))], lags[-1], n))
