"""The Python client's worker for the conformance suite: the line protocol of
tck/conformance/README.md on stdin/stdout, over one ``simba.Client`` (one
session), a ``simba.Lock`` per lock name, a read and a write
``simba.ReadWriteLock`` per read-write lock, a ``simba.MultiLock`` per set
of names, ``simba.Permit`` s by key and a ``simba.Election`` campaigning on
a thread of its own per election.

    python3 tck/conformance/worker.py --conninfo CONNINFO [--listen-conninfo CONNINFO]
                                      [--ttl-ms N] [--transition-ms N]
"""
import argparse
import sys
import threading

import simba

_out = threading.Lock()  # replies (main thread) and events (the client's events thread)


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def one_line(s: str) -> str:
    return s.replace("\n", " ").replace("\r", " ")


class Campaign:
    """A leader service on a thread of its own: campaigns until resigned,
    and again after a lost leadership (the loss is an ``event lost``)."""

    def __init__(self, client: simba.Client, name: str) -> None:
        self.name = name
        self.election = client.election(name, on_lost=self._lost)
        self.wake = threading.Event()  # a loss, or resign()
        self.resigning = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _lost(self, lease: simba.Lease) -> None:
        say(f"event lost {self.name}")
        self.wake.set()

    def _run(self) -> None:
        while not self.resigning:
            try:
                lease = self.election.campaign(timeout=1.0)  # then resign() is looked at again
            except simba.LockTimeoutError:
                self.election.resign()  # ends a leadership lost as it was won
                continue
            except simba.Error as e:
                say(f"event error {self.name} {one_line(str(e))}")
                continue
            say(f"event leader {self.name} {lease.fence}")
            self.wake.wait()
            self.wake.clear()
            self.election.resign()  # steps down, or ends the lost leadership

    def resign(self) -> None:
        self.resigning = True
        self.wake.set()
        self.thread.join()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--conninfo", default="")
    p.add_argument("--listen-conninfo")
    p.add_argument("--ttl-ms", type=int, default=2000)
    p.add_argument("--transition-ms", type=int, default=1000)
    a = p.parse_args()
    # --listen-conninfo: the statements go through a transaction pooler, LISTEN there
    pooled = {"pooled": True, "listen_conninfo": a.listen_conninfo} if a.listen_conninfo else {}
    client = simba.Client(a.conninfo, session_ttl=a.ttl_ms / 1000, session_transition=a.transition_ms / 1000,
                          reconnect_initial=0.05, reconnect_max=0.5, **pooled)
    locks = {}
    permits = {}
    multis = {}  # comma-separated names -> their MultiLock
    rwlocks = {}  # name -> (mode -> its ReadWriteLock), and the one held
    rw_held = {}
    campaigns = {}  # election name -> its Campaign

    def lock_of(name: str, fair: bool = False) -> simba.Lock:
        """A name's Lock is made by its first lock command, fair or not."""
        if name not in locks:
            locks[name] = client.lock(name, fair=fair, on_lost=lambda lease, name=name: say(f"event lost {name}"))
        return locks[name]

    say("ready python")
    for line in sys.stdin:
        words = line.split()
        cmd, name = (words + ["", ""])[:2]
        try:
            if cmd == "lock":
                lk = lock_of(name, words[3:4] == ["fair"])
                if lk.acquire(timeout=int(words[2]) / 1000):
                    say(f"ok acquired {lk.fence}")
                else:
                    say("ok timeout")
            elif cmd == "unlock":
                lock_of(name).release()
                say("ok released")
            elif cmd == "lease":
                lease = lock_of(name).lease
                say(f"ok held {lease.fence}" if lease else "ok none")
            elif cmd == "multilock":
                if name not in multis:
                    multis[name] = client.multi_lock(name.split(","),
                                                     on_lost=lambda lease, name=name: say(f"event lost {name}"))
                lk = multis[name]
                if lk.acquire(timeout=int(words[2]) / 1000):
                    fences = lk.fences
                    say("ok acquired " + ",".join(str(fences[m]) for m in lk.names))
                else:
                    say("ok timeout")
            elif cmd == "multiunlock":
                multis[name].release()
                say("ok released")
            elif cmd == "rwlock":
                mode, timeout_s = words[2], int(words[3]) / 1000
                if mode not in ("read", "write"):
                    say("err 22023 mode must be read or write")
                    continue
                by_mode = rwlocks.setdefault(name, {})
                if mode not in by_mode:
                    make = client.read_lock if mode == "read" else client.write_lock
                    by_mode[mode] = make(name, on_lost=lambda lease, name=name: say(f"event lost {name}"))
                lk = by_mode[mode]
                if lk.acquire(timeout=timeout_s):
                    rw_held[name] = lk
                    say(f"ok acquired {lk.fence}")
                else:
                    say("ok timeout")
            elif cmd == "rwunlock":
                held = rw_held.pop(name, None)
                if held is not None:
                    held.release()
                say("ok released")
            elif cmd == "permit":
                sem = client.semaphore(name, int(words[2]), on_lost=lambda lease, name=name: say(f"event lost {name}"))
                permit = sem.acquire(timeout=int(words[3]) / 1000)
                if permit is None:
                    say("ok timeout")
                else:
                    permits[name] = permit
                    say(f"ok permit {permit.fence}")
            elif cmd == "unpermit":
                permit = permits.pop(name, None)
                if permit is not None:
                    permit.release()
                say("ok released")
            elif cmd == "elect":
                if name not in campaigns:
                    campaigns[name] = Campaign(client, name)
                say("ok campaigning")
            elif cmd == "resign":
                campaign = campaigns.pop(name, None)
                if campaign is not None:
                    campaign.resign()
                say("ok resigned")
            elif cmd == "leader":
                campaign = campaigns.get(name)
                lease = campaign.election.lease if campaign else None
                say(f"ok leader {lease.fence}" if lease else "ok follower")
            elif cmd == "quit":
                for campaign in campaigns.values():
                    campaign.resign()
                client.close()  # releases what it holds, closes the session
                say("ok bye")
                return 0
            else:
                say(f"err 22023 unknown command {one_line(cmd)}")
        except simba.Error as e:
            say(f"err {e.sqlstate or 'XX000'} {one_line(str(e))}")
        except Exception as e:  # noqa: BLE001 - every failure is a reply
            say(f"err XX000 {one_line(repr(e))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
