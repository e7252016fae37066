"""A Math-Verify worker that crashes or hangs costs only its own item's verdict, never the batch.

Every injected fault must show up in what the pool reports: a SIGKILLed worker's item (the one it
held, known from the pool's pipe) comes back ``error`` / "verifier worker died", a SIGSTOPped
worker's item ``timeout`` at the wall-clock limit; no other item changes, and each dead worker is
replaced by a new process (counted by the spawns)."""

from __future__ import annotations

import os
import signal
import threading
import time

from prl.grading.verifier import Verdict, VerifierPool, verify_one

# unique responses (the item a worker holds is known by its text); the verdict repeats every 35 items
PAIRS = [(f"Step {i}.\n\nThe answer is \\boxed{{{i % 7}}}.", str(i % 5)) for i in range(3000)]
INDEX = {pair: i for i, pair in enumerate(PAIRS)}


def _reference():
    return [verify_one(r, g, timeout_s=2).verdict for r, g in PAIRS[:35]]  # 35 distinct (answer, gold) pairs


class _Conn:
    """The pool's end of a worker's pipe, noting which item the worker holds (sent, its reply not read)."""

    def __init__(self, conn, pid: int, held: dict[int, int | None], lock: threading.Lock):
        self._conn, self.pid, self._held, self._lock = conn, pid, held, lock

    def send(self, obj) -> None:
        self._conn.send(obj)
        if obj is not None:
            self._held[self.pid] = INDEX[obj]

    def recv(self):
        with self._lock:  # reading a reply and clearing the held item is one step for kill_holding()
            reply = self._conn.recv()
            if isinstance(reply, Verdict):  # not the worker's start-up message, ("ready", "")
                self._held[self.pid] = None
            return reply

    def holding(self) -> int | None:
        """The item the worker holds, if no message is waiting in the pipe (call with the lock held)."""
        return None if self._conn.poll(0) else self._held.get(self.pid)

    def fileno(self) -> int:
        return self._conn.fileno()

    def close(self) -> None:
        self._conn.close()


class SpyPool(VerifierPool):
    """A VerifierPool that records its worker processes and the item each one holds."""

    def _spawn(self):
        if not hasattr(self, "held"):
            self.held: dict[int, int | None] = {}
            self.spawned: list[int] = []
            self.lock = threading.Lock()
        proc, conn = super()._spawn()
        self.spawned.append(proc.pid)
        self.held[proc.pid] = None
        return [proc, _Conn(conn, proc.pid, self.held, self.lock)]

    def kill_holding(self, w: int, timeout: float = 30.0) -> tuple[int, int | None]:
        """Stop worker ``w``, wait until it holds an item whose reply it has not written (stopped, it cannot),
        SIGKILL it: (its pid, the item it held), the item the pool must report lost. After ``timeout`` it is
        killed anyway and the item is None (the test fails, nothing hangs)."""
        proc, conn = self._workers[w]
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lock.acquire(timeout=0.05):
                try:
                    item = conn.holding()
                    if item is not None:
                        os.kill(proc.pid, signal.SIGKILL)
                        return proc.pid, item
                finally:
                    self.lock.release()
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        return proc.pid, None


def _wait_for(cond, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_workers_killed_mid_batch_cost_exactly_their_items():
    expected = _reference() * (len(PAIRS) // 35 + 1)
    with SpyPool(2, timeout_s=2, wall_s=10, cache=False) as pool:
        pool.verify(PAIRS[:4])  # workers up
        spawned = len(pool.spawned)
        kills: list[tuple[int, int, float]] = []  # (pid, item it held, when)

        failed: list[BaseException] = []

        def crash():
            try:
                for _ in range(3):
                    time.sleep(0.15)
                    pid, item = pool.kill_holding(0)
                    kills.append((pid, item, time.monotonic()))
                    _wait_for(lambda pid=pid: pool._workers[0][0].pid != pid, what=f"worker {pid} to be replaced")
            except BaseException as e:  # noqa: BLE001 - reported by the test's thread below
                failed.append(e)

        t = threading.Thread(target=crash)
        t0 = time.monotonic()
        t.start()
        verdicts = pool.verify(PAIRS)
        finished = time.monotonic()
        t.join()
        assert not failed, failed
        assert len(kills) == 3 and finished - t0 < 60
        assert all(at < finished for *_, at in kills), "the batch ended before the workers were killed"
        assert len({pid for pid, *_ in kills}) == 3, "each kill hit a different (replacement) worker"
        # every kill is reported: exactly the items the killed workers held come back as errors
        errors = [i for i, v in enumerate(verdicts) if v.verdict == "error"]
        assert errors == sorted(item for _, item, _ in kills)
        assert all(verdicts[i].detail == "verifier worker died" for i in errors)
        assert all(v.verdict == expected[i] for i, v in enumerate(verdicts) if i not in errors)
        # each dead worker was replaced by a new process, no more
        assert len(pool.spawned) == spawned + 3 and not {pid for pid, *_ in kills} & {p.pid for p, _ in pool._workers}
        # the pool still works with its replacements
        assert [v.verdict for v in pool.verify(PAIRS[:35])] == expected[:35]


def test_a_worker_dead_while_idle_is_replaced_before_use():
    with SpyPool(1, timeout_s=2, wall_s=10) as pool:
        pool.verify(PAIRS[:2])
        spawned = len(pool.spawned)
        proc = pool._workers[0][0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(5)
        verdicts = pool.verify(PAIRS[40:44])
        # the send to the dead worker fails, so the item goes to its replacement: nothing is lost
        assert [v.verdict for v in verdicts] == [verify_one(r, g, timeout_s=2).verdict for r, g in PAIRS[40:44]]
        assert len(pool.spawned) == spawned + 1 and pool._workers[0][0].pid != proc.pid


def test_a_hung_worker_is_killed_at_the_wall_clock_limit_and_replaced():
    wall = 3.0
    expected = _reference()
    with SpyPool(2, timeout_s=1, wall_s=wall, cache=False) as pool:
        pool.verify(PAIRS[:4])  # workers up (their start-up counts against no item)
        killed, spawned = pool.stats["killed"], len(pool.spawned)
        hung = pool._workers[1][0].pid
        os.kill(hung, signal.SIGSTOP)  # a worker stuck in C code: no reply, no exit
        t0 = time.monotonic()
        verdicts = pool.verify(PAIRS[:20])
        elapsed = time.monotonic() - t0
        assert wall <= elapsed < wall + 10
        # the item the hung worker held, and only it, is reported as a wall-clock timeout
        held = pool.held[hung]
        assert held is not None, "the hung worker was never given an item"
        timeouts = [i for i, v in enumerate(verdicts) if v.verdict == "timeout"]
        assert timeouts == [held] and "wall clock" in verdicts[held].detail
        assert all(v.verdict == expected[i % 35] for i, v in enumerate(verdicts) if i != held)
        # the kill is counted and the worker replaced
        assert pool.stats["killed"] == killed + 1 and len(pool.spawned) == spawned + 1
        assert pool._workers[1][0].pid != hung
    try:
        os.kill(hung, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive or _is_zombie(hung)


def _is_zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except FileNotFoundError:
        return False
