#!/usr/bin/env python3
"""Benchmark 7's waiter under sessions as the clients wait where the server's
lapse waker runs (bench/sessions.sh; docs/reference.md, "Lapses"): it registers the
names it waits on with simba_wait on a LISTEN connection of its own, asks
simba_waker(), attempts each name once after registering it and then only
on a NOTIFY of it or every --backstop seconds, as a client's
announced_lapse_poll. One statement per batch of attempts (an attempts row
each, as the polling waiter's); a name it takes goes to the table taken.

  lapse_waiter.py wait --session SID   1 lock in --every of those live (table live: n), while it
                                       runs; live.waited: how many it has registered and tried
  lapse_waiter.py take --session SID --names-from SQL
                                       those names: prints "ready" once registered and told the
                                       waker runs, then takes each as it is announced, until all
                                       are taken or --timeout passes
"""
import argparse
import select
import sys
import time

import psycopg

BATCH = 10000  # names to one simba_wait and to one attempt statement

ATTEMPT_SQL = (
    "WITH a AS (SELECT x, o.owner_id, o.acquired_at FROM unnest(%(names)s::text[]) x,"
    " LATERAL simba_acquire(x, 'waiter', '10s', '6s', session_id => %(sid)s::uuid) o),"
    " t AS (INSERT INTO taken SELECT substr(x, 6)::int, acquired_at FROM a WHERE owner_id = 'waiter'"
    "       ON CONFLICT DO NOTHING RETURNING i),"
    " s AS (INSERT INTO attempts VALUES (clock_timestamp()))"
    " SELECT array_agg(x) FILTER (WHERE owner_id = 'waiter') FROM a"
)


class Waiter:
    def __init__(self, dsn, session, backstop):
        self.session = session
        self.backstop = backstop
        self.listen = psycopg.connect(dsn, autocommit=True, application_name="simba-bench-waiter-listen")
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="simba-bench-waiter")
        self.listen.execute("LISTEN simba")
        self.next_poll = {}  # name -> monotonic time of its backstop poll
        self.taken = set()

    def register(self, names):
        for lo in range(0, len(names), BATCH):
            batch = names[lo:lo + BATCH]
            while batch:  # names refused while a release of their bucket committed: again
                batch = self.listen.execute("SELECT simba_wait(%s::text[])", (batch,)).fetchone()[0]
                if batch:
                    time.sleep(0.02)
        announced = self.listen.execute("SELECT simba_waker()").fetchone()[0]
        if not announced:
            sys.exit("lapse_waiter: simba_waker() is false: lapses are not announced")
        self.attempt(names)  # a release before the registration was not announced

    def attempt(self, names):
        now = time.monotonic()
        for lo in range(0, len(names), BATCH):
            batch = [n for n in names[lo:lo + BATCH] if n not in self.taken]
            if not batch:
                continue
            won = self.conn.execute(ATTEMPT_SQL, {"names": batch, "sid": self.session}).fetchone()[0] or []
            self.taken.update(won)
            for n in batch:
                if n in self.taken:
                    self.next_poll.pop(n, None)
                else:
                    self.next_poll[n] = now + self.backstop

    def step(self, timeout):
        """NOTIFYs for up to timeout seconds, then the polls due."""
        select.select([self.listen.pgconn.socket], [], [], max(0.0, timeout))
        self.listen.pgconn.consume_input()
        heard = set()
        while (n := self.listen.pgconn.notifies()) is not None:
            name = n.extra.decode()
            if name in self.next_poll:
                heard.add(name)
        now = time.monotonic()
        due = [n for n, at in self.next_poll.items() if at <= now]
        if heard or due:
            self.attempt(sorted(heard | set(due)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("wait", "take"))
    p.add_argument("--dsn", default="")
    p.add_argument("--session", required=True)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--backstop", type=float, default=300.0)
    p.add_argument("--names-from", help="take: SQL returning the names")
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()
    w = Waiter(a.dsn, a.session, a.backstop)
    if a.mode == "take":
        names = [r[0] for r in w.conn.execute(a.names_from).fetchall()]
        w.register(names)
        print("ready", flush=True)
        end = time.monotonic() + a.timeout
        while len(w.taken) < len(names) and time.monotonic() < end:
            w.step(0.05)
        return
    first = 0  # the next lock to wait on
    while True:
        live = w.conn.execute("SELECT n FROM live").fetchone()[0]
        new = [f"lock-{i}" for i in range(first, live, a.every)]
        if new:
            w.register(new)
            first = int(new[-1][5:]) + a.every
        w.conn.execute("UPDATE live SET waited = %s", (live,))  # what the steady phase waits for
        w.step(1.0)


if __name__ == "__main__":
    main()
