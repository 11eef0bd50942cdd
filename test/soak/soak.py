#!/usr/bin/env python3
"""The soak (test/soak/soak.sh sets up the clusters and calls this).

For SOAK_MINUTES, on three clusters (control, us, eu) and a Redis:
  - move_writer.py writes to organizations 1 and 2 (us) and 3 (eu), routed
    by control's organization_cell(): events inserted and deleted, projects
    renamed ("renamed-<k>", k growing);
  - a control writer inserts, renames ("u<id>-v<k>", k growing) and
    deletes users of auth_user (odd ids only), whose messages the links
    carry to both cells and whose deletions cascade to the cells' members;
    it adds members of even users in the organizations' cells;
  - team's replication version is raised in both cells: a backfill with
    its cursor in Redis;
  - a label writer in the cells: COPY of new labels, upserts (both
    branches), updates, deletions, and now and then a TRUNCATE of a cell's
    labels;
  - three consumers outside (test/soak/consumer.py) take teams', events'
    and labels' messages in control, started again whenever they die; the
    labels' one reads each label again from the cells into a replica;
  - organization 1 moves from us to eu, then back;
  - an operator pauses and resumes shards, retries them, and sets an
    event's message aside (skip_message) and puts it back
    (requeue_dead_letters);
  - faults at random from the seed: SIGKILL of a worker or a consumer, immediate
    shutdown and restart of a cluster, a cell stopped for a while, Redis
    killed and restarted, a snapshot held, a lock held on project.
Then the faults stop, everything drains, and the checker reads each side:
  1. every replica equals its source: control's last message of each
     project and organization (its handler's) and of each team (its
     consumer's) has the row's values in the cell that holds it; each event
     the writer wrote and nobody deleted reached its consumer; each cell's
     last message of each user has control's name, and each deleted user a
     tombstone there; the label consumer's replica equals the cells'
     labels;
  2. per object, the versions applied never go backwards nor come twice
     (renamed-<k> and u<id>-v<k> strictly growing in applied order; the
     labels the consumer read, never backwards);
  3. in-database handlers apply each outbox row in exactly one message:
     per (cell, category, object) the [first_id, last_id] ranges of the
     messages applied are disjoint; links hand each row over once: no
     sender's row id in two batches of an inbox; consumers take a row
     again only after the lease of its earlier delivery ended;
  4. nothing is left in any outbox (the operator made no dead letters);
  5. the cascade left no orphan: no member of a deleted user;
  6. no backend crashed: no "terminated by signal" in a server log but
     the injected kills.
The schedule (faults, operator, moves) is drawn from SOAK_SEED before the
run starts and printed; the same seed gives the same schedule.  A broken
invariant prints the objects involved; the last line is
"N passed, M failed"."""
import io
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg2

env = os.environ
SEED = int(env["SOAK_SEED"])
DURATION = float(env["SOAK_MINUTES"]) * 60
WORK = env["WORK"]
ROOT = env["ROOT"]
PG_BIN = env["PG_BIN"]
REDIS_PORT = int(env["REDIS_PORT"])
CLUSTERS = ["control", "us", "eu"]
DIRS = {c: env["DIR_" + c] for c in CLUSTERS}
PORTS = {c: int(env["PORT_" + c]) for c in CLUSTERS}
AS_ROOT = os.getuid() == 0
START = time.monotonic()
stop = threading.Event()
log_lock = threading.Lock()
killed_pids = set()  # the injected kills, allowed in the servers' logs
down = {c: threading.Event() for c in CLUSTERS}  # set while a fault holds it down


def say(text):
    with log_lock:
        print("[%7.1f s] %s" % (time.monotonic() - START, text), flush=True)


def dsn(cluster, user="postgres"):
    return "host=%s port=%d user=%s dbname=postgres connect_timeout=5" % (
        DIRS[cluster], PORTS[cluster], user)


def query(cluster, sql, args=None, retry_for=120):
    """Rows of sql on cluster, in a transaction of its own; a connection
    that breaks (a fault) is tried again for retry_for seconds."""
    deadline = time.monotonic() + retry_for
    while True:
        try:
            conn = psycopg2.connect(dsn(cluster))
            try:
                conn.autocommit = True
                with conn.cursor() as c:
                    c.execute(sql, args)
                    return c.fetchall() if c.description else []
            finally:
                conn.close()
        except psycopg2.Error as e:
            if e.pgcode is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def one(cluster, sql, args=None, retry_for=120):
    rows = query(cluster, sql, args, retry_for)
    return rows[0][0] if rows else None


def as_db_user(args):
    return (["runuser", "-u", "postgres", "--"] if AS_ROOT else []) + args


def pg_ctl(cluster, *args):
    subprocess.run(as_db_user([PG_BIN + "/pg_ctl", "-D", DIRS[cluster] + "/data"] + list(args)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def cluster_stop(cluster):
    down[cluster].set()
    pg_ctl(cluster, "-m", "immediate", "stop")


def cluster_start(cluster):
    server_env = env.get("OUTBOX_SERVER_ENV", "").split()
    subprocess.run(as_db_user(["env"] + server_env + [
        PG_BIN + "/pg_ctl", "-D", DIRS[cluster] + "/data", "-l", DIRS[cluster] + "/server.log",
        "-w", "start"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    down[cluster].clear()


# Redis: ours, so that a fault can kill it and start it again on its port.
redis = None


def redis_start():
    global redis
    redis = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True,
                          check=False).returncode == 0:
            return
        time.sleep(0.1)


def redis_kill():
    redis.kill()
    redis.wait()


# The schedule, drawn before anything runs.
def draw_schedule(rng):
    events = []
    scale = DURATION / 1200.0  # a 20-minute run holds things as the issue says
    fault_kinds = ["kill_worker", "kill_consumer", "restart", "stop_cell", "redis", "snapshot",
                   "lock"]
    n_faults = max(6, int(DURATION / 20))
    end = DURATION * 0.85
    for _ in range(n_faults):
        at = rng.uniform(DURATION * 0.05, end)
        kind = rng.choice(fault_kinds)
        target = rng.choice(list(CONSUMERS) if kind == "kill_consumer" else
                            CLUSTERS if kind in ("kill_worker", "restart", "snapshot")
                            else ["us", "eu"])
        hold = {"stop_cell": max(10.0, 60 * scale), "snapshot": max(20.0, 120 * scale),
                "lock": rng.uniform(2, 8), "redis": rng.uniform(1, 5)}.get(kind, 0.0)
        events.append((round(at, 1), "fault", kind, target, round(hold, 1)))
    for _ in range(max(2, int(DURATION / 60))):
        at = rng.uniform(DURATION * 0.05, end)
        events.append((round(at, 1), "operator", rng.choice(["pause", "retry", "skip"]),
                       rng.choice(["us", "eu"]), round(rng.uniform(2, 15), 1)))
    events.append((round(DURATION * 0.1, 1), "backfill", "team", "us", 0.0))
    events.append((round(DURATION * 0.15, 1), "backfill", "team", "eu", 0.0))
    events.append((round(DURATION * 0.2, 1), "move", "1", "eu", 0.0))
    events.append((round(DURATION * 0.55, 1), "move", "1", "us", 0.0))
    return sorted(events)


# Faults.
def worker_pid(cluster):
    return one(cluster, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'")


def fault(kind, target, hold):
    if kind == "kill_worker":
        pid = worker_pid(target)
        if pid:
            killed_pids.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        say("fault: SIGKILL of %s's worker (%s)" % (target, pid))
    elif kind == "kill_consumer":
        process = consumers.get(target)
        if process is not None and process.poll() is None:
            process.kill()
        say("fault: SIGKILL of the %s consumer" % target)
    elif kind == "restart":
        say("fault: immediate shutdown and restart of %s" % target)
        cluster_stop(target)
        cluster_start(target)
    elif kind == "stop_cell":
        say("fault: %s stopped for %.0f s" % (target, hold))
        cluster_stop(target)
        stop.wait(hold)
        cluster_start(target)
        say("fault: %s back" % target)
    elif kind == "redis":
        say("fault: Redis killed for %.0f s" % hold)
        redis_kill()
        time.sleep(hold)
        redis_start()
    elif kind in ("snapshot", "lock"):
        threading.Thread(target=hold_open, args=(kind, target, hold), daemon=True).start()


def hold_open(kind, target, hold):
    """A transaction that holds a snapshot, or a lock that stops project's
    writers, for hold seconds (or until its cluster goes)."""
    try:
        conn = psycopg2.connect(dsn(target))
        with conn.cursor() as c:
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ" if kind == "snapshot"
                      else "SET lock_timeout = '2s'")
            c.execute("SELECT count(*) FROM outbox.cell_outbox" if kind == "snapshot"
                      else "LOCK TABLE project IN SHARE ROW EXCLUSIVE MODE")
            say("fault: %s held on %s for %.0f s" % (kind, target, hold))
            time.sleep(hold)
        conn.rollback()
        conn.close()
    except psycopg2.Error as e:
        say("fault: %s on %s ended early (%s)" % (kind, target, str(e).strip().splitlines()[0]))


# The operator.
def operate(kind, cell, hold):
    shard = random.Random(SEED + int(hold * 10)).choice([1, 2, 3])
    scope = one(cell, "SELECT id FROM outbox.scopes WHERE name = 'Organization'")
    try:
        if kind == "pause":
            query(cell, "SELECT outbox.pause_shard('cell', %s, %s)", (scope, shard))
            say("operator: paused %s's shard %d for %.0f s" % (cell, shard, hold))
            stop.wait(hold)
            query(cell, "SELECT outbox.resume_shard('cell', %s, %s)", (scope, shard), retry_for=600)
            say("operator: resumed %s's shard %d" % (cell, shard))
        elif kind == "skip":
            skip_and_requeue(hold)
        else:
            n = one(cell, "SELECT outbox.retry_shard('cell', %s, %s)", (scope, shard))
            say("operator: retried %s's shard %d (%s rows made due)" % (cell, shard, n))
    except psycopg2.Error as e:
        say("operator: %s on %s failed: %s" % (kind, cell, str(e).strip().splitlines()[0]))


def skip_and_requeue(hold):
    """The operator sets an event's message waiting in control aside
    (skip_message: its rows go to the dead letters) and puts it back hold
    seconds later (requeue_dead_letters); the event must still reach its
    consumer.  (Events only: a requeued message comes after newer ones with
    its old payload, docs/operating.md, and an event is never changed.)"""
    # A shard of events paused for two seconds, so that messages wait in it.
    scope = one("control", "SELECT id FROM outbox.scopes WHERE name = 'Organization'")
    shard = random.Random(SEED + int(hold * 10)).choice([1, 2, 3])  # organizations
    try:
        query("control", "SELECT outbox.pause_shard('cell', %s, %s)", (scope, shard))
        stop.wait(2)
        event = one("control", "SELECT object_identifier FROM outbox.cell_outbox"
                               " WHERE shard_scope = %s AND shard_identifier = %s AND category = 8"
                               " ORDER BY id DESC LIMIT 1", (scope, shard))
        n = (one("control", "SELECT outbox.skip_message('cell', %s, %s, 8, %s)",
                 (scope, shard, event)) if event is not None else 0)
    finally:
        query("control", "SELECT outbox.resume_shard('cell', %s, %s)", (scope, shard),
              retry_for=600)
    if event is None:
        say("operator: no event waiting in control's shard %d to skip" % shard)
        return
    ids = [r[0] for r in query("control", "SELECT id FROM outbox.dead_letters WHERE silo = 'cell'"
                                          " AND category = 8 AND object_identifier = %s", (event,))]
    say("operator: skipped event %d's message in control (%s rows, dead letters %s) for %.0f s"
        % (event, n, ids, hold))
    stop.wait(hold)
    if ids:
        n = one("control", "SELECT outbox.requeue_dead_letters(%s::bigint[])", (ids,), retry_for=600)
        say("operator: requeued event %d's dead letters (%s rows)" % (event, n))



def backfill(table, cell):
    query(cell, "SELECT outbox.set_replication_version(%s, 2)", (table,))
    query(cell, "SELECT outbox.set_option(%s, '2')",
          ("outbox_replication.%s.replication_version" % table,))
    say("backfill: %s's gate opened in %s" % (table, cell))


moves = []


def move(org, to_cell):
    # The move before this one has to be over first.
    deadline = time.monotonic() + DURATION
    while moves and time.monotonic() < deadline:
        state = one("control", "SELECT state FROM outbox.relocations WHERE relocation = %s",
                    (moves[-1],))
        if state in ("complete", "cancelled", "failed"):
            break
        time.sleep(1)
    try:
        relocation = one("control", "SELECT outbox.relocate_organization(%s, %s)",
                         (int(org), to_cell))
        moves.append(relocation)
        say("move: organization %s to %s (%s)" % (org, to_cell, relocation))
    except psycopg2.Error as e:
        say("move: organization %s to %s refused: %s" % (org, to_cell,
                                                         str(e).strip().splitlines()[0]))


def run_schedule(events):
    threads = []
    for at, what, kind, target, hold in events:
        if stop.wait(max(0.0, START + at - time.monotonic())):
            break
        fn = {"fault": fault, "operator": operate}.get(what)
        if fn is not None:
            args = (kind, target, hold)
        elif what == "backfill":
            fn, args = backfill, (kind, target)
        else:
            fn, args = move, (kind, target)
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


# The consumers: each started again whenever it dies (a SIGKILL, its
# connection broken by a fault), until the checks.
CONSUMERS = {"team": "TEAM_UPDATE", "event": "EVENT_UPDATE", "label": "LABEL_UPDATE"}
consumers = {}
consumers_stop = threading.Event()


def run_consumer(name):
    consumer_env = dict(env, NAME=name, CATEGORY=CONSUMERS[name], LEASE="10 seconds",
                        OUTBOX_DSN=dsn("control", "soak_consumer"), RECORD_DSN=dsn("control"),
                        REPLICA="1" if name == "label" else "0")
    err = open("%s/consumer_%s.err" % (WORK, name), "a")
    while not consumers_stop.is_set():
        consumers[name] = subprocess.Popen([sys.executable, ROOT + "/test/soak/consumer.py"],
                                           env=consumer_env, stdout=subprocess.DEVNULL, stderr=err)
        while consumers[name].poll() is None and not consumers_stop.is_set():
            time.sleep(0.5)
        if consumers[name].poll() is None:
            consumers[name].terminate()
            consumers[name].wait()
        consumers_stop.wait(1)


# The control writer: users (odd ones may be deleted) and members.
user_version = {}
deleted_users = set()
writes = {"users": 0, "members": 0}


def control_writer(rng):
    next_user = 201
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = psycopg2.connect(dsn("control"))
            with conn.cursor() as c:
                r = rng.random()
                if r < 0.2:
                    c.execute("INSERT INTO auth_user VALUES (%s, %s)",
                              (next_user, "u%d-v0" % next_user))
                    user_version[next_user] = 0
                    next_user += 1
                elif r < 0.95:
                    uid = rng.randint(1, next_user - 1)
                    if uid in deleted_users:
                        continue
                    k = user_version.get(uid, 0) + 1
                    c.execute("UPDATE auth_user SET name = %s WHERE id = %s", ("u%d-v%d" % (uid, k), uid))
                    user_version[uid] = k
                else:
                    uid = rng.randrange(1, next_user, 2)
                    if uid in deleted_users:
                        continue
                    c.execute("DELETE FROM auth_user WHERE id = %s", (uid,))
                    deleted_users.add(uid)
            conn.commit()
            writes["users"] += 1
        except psycopg2.Error as e:
            # Broken by a fault, the commit may or may not have happened:
            # the checker reads control's table as it ends up.  An error of
            # the server's (a lock timeout) is said and the writer goes on.
            if e.pgcode is not None:
                say("control writer: %s" % str(e).strip().splitlines()[0])
            try:
                conn.close()
            except (psycopg2.Error, AttributeError):
                pass
            conn = None
            time.sleep(0.5)
            continue
        if rng.random() < 0.3:
            add_member(rng)
        stop.wait(0.05)


def add_member(rng):
    org = rng.choice([1, 2, 3])
    uid = rng.randrange(2, 201, 2)
    for _ in range(50):
        try:
            cell = one("control", "SELECT outbox.organization_cell(%s)", (org,))
            query(cell, "INSERT INTO member (organization_id, user_id) VALUES (%s, %s)", (org, uid),
                  retry_for=5)
            writes["members"] += 1
            return
        except psycopg2.Error as e:
            if e.pgcode not in (None, "OBM01"):
                say("control writer: a member of organization %d: %s" % (
                    org, str(e).strip().splitlines()[0]))
                return
            time.sleep(0.2)


# The label writer: in the cell that holds the organization (control's
# organization_cell()), COPY of new labels, upserts (either branch), updates,
# deletions, and now and then a TRUNCATE of a cell's labels.  A label's name
# is "l<id>-v<k>", k growing with each write tried (an attempt whose outcome a
# fault hid uses up its k).  Ids from each cell's sequence, us from 1,000,001,
# eu from 6,000,001 (a move keeps them).
label_version = {}


def label_writer(rng):
    conns = {}
    while not stop.is_set():
        org = rng.choice([1, 2, 3])
        cell = None
        try:
            cell = one("control", "SELECT outbox.organization_cell(%s)", (org,), retry_for=5)
            if cell not in conns:
                conns[cell] = psycopg2.connect(dsn(cell))
            conn = conns[cell]
            with conn.cursor() as c:
                r = rng.random()
                c.execute("SELECT id FROM label WHERE organization_id = %s ORDER BY random() LIMIT 1",
                          (org,))
                found = c.fetchone()
                if r < 0.3 or found is None:
                    c.execute("SELECT nextval('label_id_seq') FROM generate_series(1, %s)",
                              (rng.randint(1, 5),))
                    ids = [row[0] for row in c.fetchall()]
                    data = "".join("%d\t%d\tl%d-v0\n" % (i, org, i) for i in ids)
                    for i in ids:
                        label_version[i] = 0
                    c.copy_expert("COPY label (id, organization_id, name) FROM STDIN",
                                  io.StringIO(data))
                    op = "copy"
                elif r < 0.997:
                    label = found[0]
                    k = label_version.get(label, 0) + 1
                    label_version[label] = k
                    if r < 0.6:
                        c.execute("INSERT INTO label VALUES (%s, %s, %s) ON CONFLICT (id)"
                                  " DO UPDATE SET name = excluded.name",
                                  (label, org, "l%d-v%d" % (label, k)))
                        op = "upsert"
                    elif r < 0.88:
                        c.execute("UPDATE label SET name = %s WHERE id = %s",
                                  ("l%d-v%d" % (label, k), label))
                        op = "update"
                    else:
                        c.execute("DELETE FROM label WHERE id = %s", (label,))
                        op = "delete"
                else:
                    c.execute("TRUNCATE label")
                    op = "truncate"
            conn.commit()
            writes["labels " + op] = writes.get("labels " + op, 0) + 1
            if op == "truncate":
                say("label writer: TRUNCATE label in %s" % cell)
        except psycopg2.Error as e:
            if e.pgcode is not None and e.pgcode != "OBM01":
                say("label writer: %s" % str(e).strip().splitlines()[0])
            conn = conns.pop(cell, None)
            if conn is not None:
                try:
                    conn.close()
                except psycopg2.Error:
                    pass
            stop.wait(0.5)
            continue
        stop.wait(0.05)


# Waiting for everything to drain once the faults stopped.
def settled():
    for c in CLUSTERS:
        if one(c, "SELECT (SELECT count(*) FROM outbox.cell_outbox)"
                  " + (SELECT count(*) FROM outbox.control_outbox)") != 0:
            return "%s's outbox is not empty" % c
    pending = one("control", "SELECT count(*) FROM outbox.relocations"
                             " WHERE state NOT IN ('complete', 'cancelled')")
    if pending:
        return "%d moves are not over" % pending
    for c in ("us", "eu"):
        state = one(c, "SELECT string_agg(table_key || ' ' || state, ', ') FROM outbox.backfill_status"
                       " WHERE table_key LIKE '%%team' AND state <> 'complete'")
        if state:
            return "%s's backfill: %s" % (c, state)
        orphans = orphan_members(c)
        if orphans:
            return "%s has %d members of deleted users" % (c, len(orphans))
    return None


def orphan_members(cell):
    users = {r[0] for r in query("control", "SELECT id FROM auth_user")}
    return [r for r in query(cell, "SELECT id, user_id FROM member") if r[1] not in users]


# The checks.
passed = failed = 0


def check(description, problems):
    """problems: a list of what is broken (empty: the invariant holds)."""
    global passed, failed
    if problems:
        failed += 1
        print("not ok - %s (%d broken, the first: %s)" % (description, len(problems), problems[:5]),
              flush=True)
    else:
        passed += 1
        print("ok - %s" % description, flush=True)


def last_consumed(category):
    rows = query("control", "SELECT DISTINCT ON (object) object, payload FROM consumed"
                            " WHERE category = %s ORDER BY object, n DESC", (category,))
    return {r[0]: r[1] for r in rows}


def check_consumers():
    problems = []
    rows = query("control", "SELECT coalesce(cell, ''), category, object, first_id, last_id, at,"
                            " lease_until FROM consumed ORDER BY 1, 2, 3, 4, n")
    again = 0
    previous = None
    for cell, category, obj, first, last, at, lease_until in rows:
        key = (cell, category, obj)
        if previous and previous[0] == key and first <= previous[1]:
            again += 1
            if at < previous[2]:
                problems.append("%s: rows %d-%d taken again at %s, its lease until %s" % (
                    key, first, last, at, previous[2]))
        previous = (key, max(last, previous[1]) if previous and previous[0] == key else last,
                    lease_until)
    check("consumers took a row again only after its lease ended (%d messages, %d again)" %
          (len(rows), again), problems)


def last_applied(cluster, category):
    rows = query(cluster, "SELECT DISTINCT ON (object) object, payload FROM applied"
                          " WHERE category = %s ORDER BY object, n DESC", (category,))
    return {r[0]: r[1] for r in rows}


def check_replicas():
    cell_of = dict(query("control", "SELECT organization, cell FROM outbox.organization_cells"))
    for category, table, column in ((5, "project", "slug"), (0, "organization", "slug"),
                                    (6, "team", "name")):
        applied = (last_applied("control", category) if category != 6
                   else last_consumed("TEAM_UPDATE"))
        problems = []
        for cell in ("us", "eu"):
            org_column = "id" if table == "organization" else "organization_id"
            for key, org, value in query(cell, "SELECT id, %s, %s FROM %s" % (org_column, column,
                                                                               table)):
                if cell_of.get(org) != cell:
                    problems.append("%s %d of organization %d in %s, which lives in %s" %
                                    (table, key, org, cell, cell_of.get(org)))
                    continue
                got = (applied.get(key) or {}).get(column)
                if got != value:
                    problems.append("%s %d: %s has %r, control's last message %r" %
                                    (table, key, cell, value, got))
        check("control's last message of every %s has the cell's row" % table, problems)
    consumed = {r[0] for r in query("control", "SELECT DISTINCT object FROM consumed"
                                         " WHERE category = 'EVENT_UPDATE'")}
    problems = []
    for cell in ("us", "eu"):
        for event, org in query(cell, "SELECT e.id, p.organization_id FROM event e"
                                      " JOIN project p ON p.id = e.project_id WHERE e.message LIKE 'w%%'"):
            if cell_of.get(org) == cell and event not in consumed:
                problems.append("event %d in %s: never consumed" % (event, cell))
    check("every event the writer wrote reached its consumer", problems)
    users = dict(query("control", "SELECT id, name FROM auth_user"))
    for cell in ("us", "eu"):
        applied = last_applied(cell, 1)
        tombstones = {r[0] for r in query(cell, "SELECT object_identifier FROM outbox.cell_tombstone"
                                                " WHERE table_name = 'auth_user'")}
        problems = []
        for uid in set(users) | set(applied):
            if uid in users:
                got = (applied.get(uid) or {}).get("name")
                if got != users[uid] or uid in tombstones:
                    problems.append("user %d: control %r, %s's last message %r%s" % (
                        uid, users[uid], cell, got, ", a tombstone" if uid in tombstones else ""))
            elif uid not in tombstones:
                problems.append("user %d deleted in control, no tombstone in %s" % (uid, cell))
        check("%s's last message of every user has control's name, and each deleted one a"
              " tombstone" % cell, problems)


def check_labels():
    """The label consumer's replica equals the cells' labels, each in the
    cell that holds its organization; the versions it read never went
    backwards."""
    cell_of = dict(query("control", "SELECT organization, cell FROM outbox.organization_cells"))
    source = {}
    problems = []
    for cell in ("us", "eu"):
        for label, org, name in query(cell, "SELECT id, organization_id, name FROM label"):
            if cell_of.get(org) != cell:
                problems.append("label %d of organization %d in %s, which lives in %s" %
                                (label, org, cell, cell_of.get(org)))
            source[label] = (org, name)
    replica = {r[0]: (r[1], r[2]) for r in query("control", "SELECT id, organization_id, name"
                                                          " FROM label_replica")}
    for label in sorted(set(source) | set(replica)):
        if source.get(label) != replica.get(label):
            problems.append("label %d: cells %r, the consumer's replica %r" % (
                label, source.get(label), replica.get(label)))
    check("the label consumer's replica equals the cells' %d labels" % len(source), problems)
    problems = []
    last = {}
    for obj, name in query("control", "SELECT object, payload->>'name' FROM consumed"
                                      " WHERE category = 'LABEL_UPDATE' ORDER BY n"):
        if name is None:
            continue
        k = int(name.rsplit("-v", 1)[1])
        if k < last.get(obj, -1):
            problems.append("label %d: v%d read after v%d" % (obj, k, last[obj]))
        last[obj] = k
    check("the label consumer never read a label's versions backwards", problems)


def check_versions():
    problems = []
    last = {}
    for obj, slug in query("control", "SELECT object, payload->>'slug' FROM applied"
                                      " WHERE category = 5 ORDER BY n"):
        if slug and slug.startswith("renamed-"):
            k = int(slug[len("renamed-"):])
            if obj in last and k <= last[obj]:
                problems.append("project %d: renamed-%d after renamed-%d" % (obj, k, last[obj]))
            last[obj] = k
    check("control applied the renames of each project in order, each once", problems)
    users = {r[0] for r in query("control", "SELECT id FROM auth_user")}
    for cell in ("us", "eu"):
        versions = {}
        for obj, name in query(cell, "SELECT object, payload->>'name' FROM applied"
                                     " WHERE category = 1 ORDER BY n"):
            versions.setdefault(obj, []).append(int(name.split("-v")[1]))
        problems = []
        for obj, ks in versions.items():
            # A deletion's message carries the row's last values.
            if obj not in users and len(ks) > 1 and ks[-1] == ks[-2]:
                ks = ks[:-1]
            for a, b in zip(ks, ks[1:]):
                if b <= a:
                    problems.append("user %d: v%d after v%d" % (obj, b, a))
        check("%s applied the names of each user in order, each once" % cell, problems)


def check_exactly_once():
    for cluster in CLUSTERS:
        problems = []
        rows = query(cluster, "SELECT coalesce(cell, ''), category, object, first_id, last_id FROM applied"
                              " WHERE first_id IS NOT NULL ORDER BY 1, 2, 3, 4")
        previous = None
        for cell, category, obj, first, last in rows:
            key = (cell, category, obj)
            if previous and previous[0] == key and first <= previous[1]:
                problems.append("%s: rows %d-%d again in %d-%d" % (key, previous[2], previous[1],
                                                                    first, last))
            previous = (key, last, first)
        check("%s's handler applied each outbox row in one message (%d messages)" %
              (cluster, len(rows)), problems)
        dupes = query(cluster, "SELECT origin, id, count(*) FROM outbox.inbox, unnest(row_ids) id"
                               " GROUP BY origin, id HAVING count(*) > 1 LIMIT 5")
        check("%s's inbox took each row of each sender once (%s rows)" %
              (cluster, one(cluster, "SELECT coalesce(sum(cardinality(row_ids)), 0) FROM outbox.inbox")),
              ["%s row %d in %d batches" % d for d in dupes])


def check_outboxes():
    problems = []
    for c in CLUSTERS:
        n = one(c, "SELECT (SELECT count(*) FROM outbox.cell_outbox)"
                   " + (SELECT count(*) FROM outbox.control_outbox)")
        dead = one(c, "SELECT count(*) FROM outbox.dead_letters")
        if n or dead:
            problems.append("%s: %d rows, %d dead letters" % (c, n, dead))
    check("nothing is left in any outbox", problems)
    problems = []
    for cell in ("us", "eu"):
        problems += ["%s member %d of user %d" % (cell, m, u) for m, u in orphan_members(cell)]
    check("the cascade left no member of a deleted user", problems)


def check_logs():
    problems = []
    for c in CLUSTERS:
        with open(DIRS[c] + "/server.log", errors="replace") as f:
            for line in f:
                if "terminated by signal" in line or "was terminated by" in line:
                    if not any("(PID %d)" % pid in line for pid in killed_pids):
                        problems.append("%s: %s" % (c, line.strip()))
                if "AddressSanitizer" in line or "runtime error:" in line:
                    problems.append("%s: %s" % (c, line.strip()))
    check("no backend crashed (%d kills injected)" % len(killed_pids), problems)


def end_children(*_):
    """Redis, the writer and the consumers are this process's: they go with it."""
    consumers_stop.set()
    for process in [redis] + list(consumers.values()):
        if process is not None and process.poll() is None:
            process.kill()
    sys.exit(1)


def main():
    signal.signal(signal.SIGTERM, end_children)
    rng = random.Random(SEED)
    events = draw_schedule(rng)
    print("schedule (seed %d):" % SEED)
    for e in events:
        print("  %7.1f s  %s %s %s %s" % e)
    sys.stdout.flush()
    redis_start()
    writer_log = WORK + "/writes"
    eu_project = one("eu", "SELECT min(id) FROM project WHERE organization_id = 3")
    writer_env = dict(env, ORGS="1:1,2:721,3:%d" % eu_project, RATE="20", LOG=writer_log,
                      STOP=WORK + "/stop")
    writer = subprocess.Popen([sys.executable, ROOT + "/test/harness/move_writer.py"], env=writer_env,
                              stderr=open(WORK + "/writer.err", "w"))
    for name in CONSUMERS:
        threading.Thread(target=run_consumer, args=(name,), daemon=True).start()
    users = threading.Thread(target=control_writer, args=(random.Random(SEED + 1),), daemon=True)
    users.start()
    labels = threading.Thread(target=label_writer, args=(random.Random(SEED + 2),), daemon=True)
    labels.start()
    schedule = threading.Thread(target=run_schedule, args=(events,), daemon=True)
    schedule.start()
    time.sleep(DURATION)
    say("the run is over: faults stop, writers stop, everything drains")
    stop.set()
    schedule.join(timeout=300)
    for c in CLUSTERS:
        if down[c].is_set():
            cluster_start(c)
    if redis.poll() is not None:
        redis_start()
    open(WORK + "/stop", "w").close()
    writer.wait(timeout=120)
    users.join(timeout=60)
    labels.join(timeout=60)
    for c in ("us", "eu"):  # a pause still in force when the run ended
        query(c, "SELECT outbox.resume_shard(silo, shard_scope, shard_identifier,"
                 " nullif(cell_name, '')) FROM outbox.paused_shards")
    deadline = time.monotonic() + 600
    why = settled()
    while why and time.monotonic() < deadline:
        # As an operator would once the cause is gone: shards that backed
        # off while a cell was down (the label consumer's) are due now.
        for c in CLUSTERS:
            query(c, "SELECT outbox.retry_shard(silo, shard_scope, shard_identifier, cell_name)"
                     " FROM outbox.shard_depth WHERE state = 'backed_off'")
        time.sleep(2)
        why = settled()
    say("settled" if not why else "not settled after 600 s: %s" % why)
    with open(writer_log) as f:
        acknowledged = sum(1 for line in f if "\trefused\t" not in line)
    print("writes: %d acknowledged by the organizations' writer (%s), %d users' and %d members'"
          " by the control writer, labels' %s; moves: %s" % (
              acknowledged, WORK + "/writer.err", writes["users"], writes["members"],
              ", ".join("%s %d" % (k[len("labels "):], v) for k, v in sorted(writes.items())
                        if k.startswith("labels ")),
              query("control", "SELECT concat_ws(' ', relocation, state, step, error)"
                                " FROM outbox.organization_moves WHERE side = 'control'")))
    check("everything drained once the faults stopped", [why] if why else [])
    check_replicas()
    check_labels()
    check_versions()
    check_exactly_once()
    check_consumers()
    check_outboxes()
    check_logs()
    consumers_stop.set()
    redis_kill()
    print("messages consumed: %s" % one("control", "SELECT count(*) FROM consumed"))
    print("messages applied: %s" % ", ".join(
        "%s %s" % (c, one(c, "SELECT count(*) FROM applied")) for c in CLUSTERS))
    print("seed %d: %d passed, %d failed" % (SEED, passed, failed))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
