"""A Math-Verify worker that crashes or hangs costs only its own item's verdict, never the batch."""

from __future__ import annotations

import os
import signal
import threading
import time

from prl.grading.verifier import VerifierPool, verify_one

PAIRS = [(f"Step one.\n\nThe answer is \\boxed{{{i % 7}}}.", str(i % 5)) for i in range(3000)]


def _reference():
    return [verify_one(r, g, timeout_s=2).verdict for r, g in PAIRS[:35]]  # 35 distinct (answer, gold) pairs


def test_workers_killed_mid_batch_cost_only_their_items():
    expected = _reference() * (len(PAIRS) // 35 + 1)
    with VerifierPool(2, timeout_s=2, wall_s=10, cache=False) as pool:
        pool.verify(PAIRS[:4])  # workers up
        kills = []

        def crash():
            for _ in range(3):
                time.sleep(0.15)
                pid = pool._workers[0][0].pid
                os.kill(pid, signal.SIGKILL)
                kills.append((pid, time.monotonic()))

        t = threading.Thread(target=crash)
        t0 = time.monotonic()
        t.start()
        verdicts = pool.verify(PAIRS)
        finished = time.monotonic()
        t.join()
        assert len(kills) == 3 and finished - t0 < 60
        assert all(at < finished for _, at in kills), "the batch ended before the workers were killed"
        errors = [i for i, v in enumerate(verdicts) if v.verdict == "error"]
        assert len(errors) <= 3 and all(verdicts[i].detail == "verifier worker died" for i in errors)
        assert all(v.verdict == expected[i] for i, v in enumerate(verdicts) if i not in errors)
        # the pool replaced the dead workers and still works
        assert [v.verdict for v in pool.verify(PAIRS[:35])] == expected[:35]


def test_a_worker_dead_while_idle_is_replaced_before_use():
    with VerifierPool(1, timeout_s=2, wall_s=10) as pool:
        pool.verify(PAIRS[:2])
        proc = pool._workers[0][0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(5)
        verdicts = pool.verify(PAIRS[40:44])
    assert [v.verdict for v in verdicts[1:]] == [verify_one(r, g, timeout_s=2).verdict for r, g in PAIRS[41:44]]
    assert verdicts[0].verdict in ("error", verify_one(*PAIRS[40], timeout_s=2).verdict)


def test_a_hung_worker_is_killed_at_the_wall_clock_limit_and_replaced():
    wall = 3.0
    with VerifierPool(2, timeout_s=1, wall_s=wall, cache=False) as pool:
        pool.verify(PAIRS[:4])
        hung = pool._workers[1][0].pid
        os.kill(hung, signal.SIGSTOP)  # a worker stuck in C code: no reply, no exit
        t0 = time.monotonic()
        verdicts = pool.verify(PAIRS[:20])
        elapsed = time.monotonic() - t0
        assert elapsed < wall + 10
        timeouts = [v for v in verdicts if v.verdict == "timeout"]
        assert len(timeouts) == 1 and "wall clock" in timeouts[0].detail
        assert pool.stats["killed"] == 1 and pool._workers[1][0].pid != hung
        assert sum(v.verdict != "timeout" for v in verdicts) == 19
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
