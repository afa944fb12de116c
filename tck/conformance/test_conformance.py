"""The conformance suite (README.md): what every simba client must do, judged
from the workers' replies and the server's view, whatever the worker's
language. Leases are TTL_MS + TRANSITION_MS (3 s)."""
import random
import signal
import threading
import time

import pytest

from conftest import KINDS, LEASE_S, PAIRS, concurrently, elapsed_since

SLACK_S = 2.5  # a loaded 2-core machine: scheduling, a reconnect, a poll


def mixes(n=4):
    """n workers: each kind alone, and all kinds taking turns."""
    out = [pytest.param([k] * n, id=f"{k}x{n}") for k in KINDS]
    if len(KINDS) > 1:
        kinds = list(KINDS)
        out.append(pytest.param([kinds[i % len(kinds)] for i in range(n)], id="mixed"))
    return out


@pytest.mark.parametrize("kinds", mixes())
def test_one_holder_at_a_time_and_fences_increase(h, name, kinds):
    workers = [h.worker(k) for k in kinds]
    rounds = 12
    mu = threading.Lock()
    holder = [None]
    fences = []
    failures = []

    def run(i, w):
        for _ in range(rounds):
            fence = w.lock(name, 20)
            assert fence is not None, f"{w.kind}: no hold within 20 s"
            with mu:
                if holder[0] is not None:
                    failures.append(f"{w.kind} acquired fence {fence} while {holder[0]} held")
                holder[0] = f"{w.kind} (fence {fence})"
                fences.append(fence)
            time.sleep(random.uniform(0, 0.01))  # act on it
            with mu:
                holder[0] = None  # before the unlock is sent: from here on it does not act
            w.unlock(name)

    failures += concurrently(workers, run)
    assert failures == []
    assert len(fences) == rounds * len(workers)
    assert all(a < b for a, b in zip(fences, fences[1:])), f"fences out of order: {fences}"
    assert h.server_fence(name) is None, "every hold was released, yet the server names a holder"


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_timeout_takes_nothing(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    t0 = time.monotonic()
    assert wb.lock(name, 0.3) is None, "acquired a lock another worker holds"
    took = elapsed_since(t0)
    assert 0.3 <= took < 0.3 + SLACK_S, f"a 300 ms timeout took {took:.3f} s"
    assert wb.lease(name) is None
    assert h.server_fence(name) == fa
    wa.unlock(name)
    fb = wb.lock(name, 10)
    assert fb is not None and fb > fa, "the worker that timed out cannot take the lock afterwards"
    wb.unlock(name)


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_clean_quit_frees_the_lock_at_once(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    waiting = {}
    t = threading.Thread(target=lambda: waiting.update(fence=wb.lock(name, 10), at=time.monotonic()))
    t.start()
    t0 = time.monotonic()
    wa.quit()
    t.join()
    assert waiting["fence"] is not None and waiting["fence"] > fa
    took = waiting["at"] - t0
    assert took < LEASE_S / 2, f"the lock passed {took:.2f} s after a clean quit: the release was not sent"
    wb.unlock(name)


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_killed_holder_frees_the_lock_within_its_lease(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    wa.signal(signal.SIGKILL)
    t0 = time.monotonic()
    fb = wb.lock(name, LEASE_S + SLACK_S)
    took = elapsed_since(t0)
    assert fb is not None, f"no hold {LEASE_S + SLACK_S} s after the holder was killed"
    assert fb > fa
    assert took < LEASE_S + SLACK_S
    wb.unlock(name)


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_hold_stopped_past_its_lease_is_lost_for_good(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    wa.signal(signal.SIGSTOP)
    # b gets the lock only once a's lease has ended on the server
    fb = wb.lock(name, LEASE_S + SLACK_S)
    assert fb is not None and fb > fa
    wa.signal(signal.SIGCONT)
    wa.wait_event(f"event lost {name}", SLACK_S)
    assert wa.lease(name) is None, "the stopped holder still reports its hold after b took the lock"
    wa.unlock(name)  # ends the lost hold: must not touch b's
    assert wb.lease(name) == fb
    assert h.server_fence(name) == fb, "the lost holder's unlock released the new holder's lock"
    assert wa.lease(name) is None, "loss is final: nothing is taken back without a new lock"
    wb.unlock(name)


@pytest.mark.parametrize("a,b", PAIRS)
def test_an_operators_forced_release_is_loss(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    assert h.sql("SELECT simba_force_release(%s)", name)[0] is True
    wa.wait_event(f"event lost {name}", LEASE_S + SLACK_S)
    assert wa.lease(name) is None
    fb = wb.lock(name, 10)
    assert fb is not None and fb > fa
    wa.unlock(name)
    assert h.server_fence(name) == fb
    wb.unlock(name)


@pytest.mark.parametrize("a,b", PAIRS)
def test_terminated_connections_never_make_two_holders(h, name, a, b):
    wa, wb, fa = h.held(a, b, name)
    killed = h.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                   wa.application_name)[0]
    assert killed >= 1
    # The hold lives by its lease, not by a connection: nobody else gets it
    assert wb.lock(name, 0.5) is None
    # and the holder keeps it past the lease it had (its renewals reconnect).
    time.sleep(LEASE_S + 0.5)
    assert wa.lease(name) == fa, "the holder lost its lock to a dropped connection it could replace"
    assert h.server_fence(name) == fa
    assert wb.lock(name, 0.3) is None
    wa.unlock(name)
    assert wb.lock(name, 10) is not None
    wb.unlock(name)


@pytest.mark.parametrize("kinds", mixes())
def test_at_most_n_permit_holders(h, name, kinds):
    """Four workers share two permits of one key, 6 rounds each: never three
    holders at once (as the workers report, or on the server), both permits
    in use at times, every grant a new fence, none left at the end."""
    workers = [h.worker(k) for k in kinds]
    mu = threading.Lock()
    holding = set()
    most = [0]
    fences = []
    failures = []

    def run(i, w):
        for _ in range(6):
            fence = w.permit(name, 2, 20)
            assert fence is not None, f"{w.kind}: no permit within 20 s"
            with mu:
                holding.add(fence)
                most[0] = max(most[0], len(holding))
                if len(holding) > 2:
                    failures.append(f"{w.kind} got permit {fence} while {sorted(holding - {fence})} held")
                fences.append(fence)
            time.sleep(random.uniform(0.02, 0.06))  # act on it
            with mu:
                holding.discard(fence)  # before the release is sent: from here on it does not act
            w.unpermit(name)

    failures += concurrently(workers, run)
    assert failures == []
    assert len(set(fences)) == len(fences) == 6 * len(workers), f"a fence granted twice: {fences}"
    assert most[0] == 2, "two permits, yet never two holders at once"
    assert h.server_permits(name) == 0, "every permit was released, yet the server counts one live"


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_killed_permit_holder_frees_its_permit_within_its_lease(h, name, a, b):
    wa, wb = h.worker(a), h.worker(b)
    fa = wa.permit(name, 1, 10)
    assert fa is not None, f"{a} worker: no permit of a free key within 10 s"
    assert wb.permit(name, 1, 0.3) is None, "two holders of a key with one permit"
    assert h.server_permits(name) == 1
    wa.signal(signal.SIGKILL)
    t0 = time.monotonic()
    fb = wb.permit(name, 1, LEASE_S + SLACK_S)
    assert fb is not None, f"no permit {LEASE_S + SLACK_S} s after its holder was killed"
    assert fb > fa and elapsed_since(t0) < LEASE_S + SLACK_S
    wb.unpermit(name)
    assert h.server_permits(name) == 0


@pytest.mark.parametrize("kinds", mixes())
def test_fair_waiters_are_granted_in_arrival_order(h, name, kinds):
    """`lock NAME TIMEOUT_MS fair`: the first worker holds, the other three
    queue one after the other (each queued on the server before the next
    asks); after the release they hold it in that order, one at a time."""
    holder, *waiters = [h.worker(k) for k in kinds]
    assert holder.lock(name, 10, fair=True) is not None
    order = []
    mu = threading.Lock()
    failures = []

    def wait(i, w):
        try:
            fence = w.lock(name, 25, fair=True)
            assert fence is not None, f"{w.kind}: no hold within 25 s"
            with mu:
                order.append((i, fence))
            w.unlock(name)
        except AssertionError as e:
            failures.append(str(e))

    threads = []
    for i, w in enumerate(waiters):
        t = threading.Thread(target=wait, args=(i, w))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 10
        while h.server_queue(name) < i + 1:  # queued before the next one arrives
            assert time.monotonic() < deadline, f"{w.kind} worker not queued within 10 s"
            time.sleep(0.02)
    holder.unlock(name)
    for t in threads:
        t.join()
    assert failures == []
    assert [i for i, _ in order] == [0, 1, 2], f"granted out of arrival order: {order}"
    assert all(a < b for (_, a), (_, b) in zip(order, order[1:]))
    assert h.server_fence(name) is None and h.server_queue(name) == 0


@pytest.mark.parametrize("kinds", mixes())
def test_readers_share_and_a_writer_is_alone(h, name, kinds):
    """Four workers × 8 rounds on one read-write lock, each round a read
    (two in three) or a write: no write hold beside any other hold, no read
    hold beside a write hold; writers' fences strictly increase; a reader's
    fence is a writer's (the write epoch) or 0 before any; readers overlap."""
    workers = [h.worker(k) for k in kinds]
    mu = threading.Lock()
    readers, writer = set(), [None]
    write_fences, read_fences = [], []
    most_readers = [0]
    failures = []

    def run(i, w):
        rnd = random.Random(i)
        for _ in range(8):
            mode = "write" if rnd.random() < 1 / 3 else "read"
            fence = w.rwlock(name, mode, 20)
            assert fence is not None, f"{w.kind}: no {mode} hold within 20 s"
            me = (i, fence)
            with mu:
                if writer[0] is not None or (mode == "write" and readers):
                    failures.append(f"{w.kind} got a {mode} hold (fence {fence}) beside"
                                    f" writer {writer[0]}, readers {sorted(readers)}")
                if mode == "write":
                    writer[0] = me
                    write_fences.append(fence)
                else:
                    readers.add(me)
                    read_fences.append(fence)
                    most_readers[0] = max(most_readers[0], len(readers))
            time.sleep(rnd.uniform(0.02, 0.06))  # act on it
            with mu:  # before the unlock is sent: from here on it does not act
                if mode == "write":
                    writer[0] = None
                else:
                    readers.discard(me)
            w.rwunlock(name)

    failures += concurrently(workers, run)
    assert failures == []
    assert write_fences and read_fences, "both modes should have been held"
    assert all(a < b for a, b in zip(write_fences, write_fences[1:])), f"write fences out of order: {write_fences}"
    assert set(read_fences) <= set(write_fences) | {0}, "a reader's fence that no writer had"
    assert most_readers[0] >= 2, "readers never shared the lock"
    assert h.server_rwlock(name) == ("free", 0)


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_multi_lock_holds_all_or_nothing(h, name, a, b):
    x, y = f"{name}-x", f"{name}-y"
    wa, wb = h.worker(a), h.worker(b)
    fx = wa.lock(x, 10)
    assert fx is not None
    assert wb.multilock([x, y], 0.3) is None, "a multi-lock over a held member"
    assert h.server_fence(y) is None, "a refused multi-lock took a member"
    wa.unlock(x)
    fences = wb.multilock([x, y], 10)
    assert fences is not None, "no multi-lock of two free mutexes within 10 s"
    assert fences[x] > fx and h.server_fence(x) == fences[x] and h.server_fence(y) == fences[y]
    assert wa.lock(y, 0.3) is None, "a member of a held multi-lock taken by another"
    wb.multiunlock([x, y])
    assert h.server_fence(x) is None and h.server_fence(y) is None


@pytest.mark.parametrize("kinds", mixes())
def test_overlapping_multi_locks_exclude_and_never_deadlock(h, name, kinds):
    """Four workers × 6 rounds, each on two of three mutexes (a ring of
    overlapping sets): no member held by two at once, every round done."""
    ring = [f"{name}-{i}" for i in range(3)]
    workers = [h.worker(k) for k in kinds]
    mu = threading.Lock()
    holding = {}
    failures = []

    def run(i, w):
        names = [ring[i % 3], ring[(i + 1) % 3]]
        for _ in range(6):
            fences = w.multilock(names, 20)
            assert fences is not None, f"{w.kind}: no multi-lock within 20 s"
            with mu:
                for m in names:
                    if m in holding:
                        failures.append(f"{w.kind} holds {m} (fence {fences[m]}) beside worker {holding[m]}")
                    holding[m] = i
            time.sleep(random.uniform(0.01, 0.04))  # act on them
            with mu:  # before the unlock is sent: from here on it does not act
                for m in names:
                    holding.pop(m, None)
            w.multiunlock(names)

    failures += concurrently(workers, run)
    assert failures == []
    assert all(h.server_fence(m) is None for m in ring)


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_server_restart_shorter_than_the_lease_keeps_the_hold(h, name, a, b):
    """A fast restart cuts every connection; the hold lives by its durable
    row and its lease (10 s + 5 s here, so the restart ends well inside
    it): nobody else gets the lock, the holder still holds it, and its
    release, sent once its connection is back, passes the lock on."""
    lease_ms = (10000, 5000)
    wa, wb = h.worker(a, lease_ms), h.worker(b, lease_ms)
    fa = wa.lock(name, 10)
    assert fa is not None
    # b connected first: a server down at a client's first connect is a setup mistake (08001)
    assert wb.lock(name, 0.5) is None
    h.restart_server()
    assert wb.lock(name, 0.5) is None, "a restart let a second worker take a held lock"
    assert wa.lease(name) == fa, "the holder lost its lock to a restart shorter than its lease"
    assert h.server_fence(name) == fa
    waiting = {}
    t = threading.Thread(target=lambda: waiting.update(fence=wb.lock(name, 20), at=time.monotonic()))
    t.start()
    t0 = time.monotonic()
    wa.unlock(name)
    t.join()
    assert waiting["fence"] is not None and waiting["fence"] > fa
    took = waiting["at"] - t0
    assert took < 5, f"the lock passed {took:.2f} s after its release, a poll's time: the release or wake-up was lost"
    wb.unlock(name)


# Elections: `elect NAME` starts a leader service (it campaigns until `resign
# NAME`, and again after a lost leadership); its worker reports `event leader
# NAME FENCE` when elected.

ELECTED_S = LEASE_S + 1.0 + SLACK_S  # a leader's end: its lease, a campaigner's jitter (up to 1 s), slack


def next_leader(workers, name, timeout_s):
    """The first of `workers` to report `event leader NAME FENCE` within
    timeout_s, and FENCE; any other event fails the case."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for w in workers:
            event = w.event(0.02)
            if event is None:
                continue
            words = event.split()
            assert words[:3] == ["event", "leader", name], f"{w.kind} worker: {event!r} while a leader was awaited"
            return w, int(words[3])
    raise AssertionError(f"no leader of {name} within {timeout_s} s")


def leaders(workers, name):
    """{worker: fence} of the workers that say they lead now."""
    return {w: f for w in workers if (f := w.leader(name)) is not None}


@pytest.mark.parametrize("kinds", mixes(3))
def test_one_leader_at_a_time_and_a_new_one_when_it_ends(h, name, kinds):
    """Three campaigners: one leads; its resignation elects another at once;
    killing that one elects the third within a lease; fences increase and
    no two ever say they lead."""
    workers = [h.worker(k) for k in kinds]
    for w in workers:
        w.elect(name)
    first, f1 = next_leader(workers, name, ELECTED_S)
    assert leaders(workers, name) == {first: f1}
    t0 = time.monotonic()
    first.resign(name)
    second, f2 = next_leader(workers, name, ELECTED_S)
    took = elapsed_since(t0)
    assert second is not first and f2 > f1
    assert took < LEASE_S / 2, f"a new leader {took:.2f} s after a resignation: the release was not sent"
    assert leaders(workers, name) == {second: f2}
    second.signal(signal.SIGKILL)
    live = [w for w in workers if w is not second]
    third, f3 = next_leader(live, name, ELECTED_S)
    assert third is not first and f3 > f2
    assert leaders(live, name) == {third: f3}
    third.resign(name)
    assert h.server_fence(name) is None, "every campaigner resigned, yet the server names a leader"


@pytest.mark.parametrize("a,b", PAIRS)
def test_a_leader_stopped_past_its_lease_is_replaced_and_steps_down(h, name, a, b):
    """A frozen leader (SIGSTOP) is replaced once its lease ends; thawed, it
    reports the loss, says it does not lead, and campaigns on as a follower."""
    wa, wb = h.worker(a), h.worker(b)
    wa.elect(name)
    _, fa = next_leader([wa], name, ELECTED_S)
    wb.elect(name)
    wa.signal(signal.SIGSTOP)
    _, fb = next_leader([wb], name, ELECTED_S)
    assert fb > fa
    wa.signal(signal.SIGCONT)
    wa.wait_event(f"event lost {name}", SLACK_S)
    assert wa.leader(name) is None, "the frozen leader still says it leads after another was elected"
    assert wb.leader(name) == fb and h.server_fence(name) == fb
    wb.resign(name)
    _, fa2 = next_leader([wa], name, ELECTED_S)  # the campaign went on
    assert fa2 > fb
    wa.resign(name)
