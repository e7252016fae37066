"""Kill chains: run a command, SIGKILL its whole process group at a seeded random moment, check
the store, run it again … until it completes; then check that it holds exactly the rows of an
uninterrupted run. When a run completes before the requested number of kills, the chain goes
on with a fresh segment (new output directory and store), so every kill lands somewhere in a
real run, from start-up to the last write.

``PRL_FAULT_KILLS`` sets the kills per chain: a few in CI (the default), 20 for the full run
(``PRL_FAULT_KILLS=20 .venv/bin/python -m pytest tests/faults`` or ``bench/run_all.py --full``).
Each chain writes its record to ``artifacts/faults/<name>.json``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
REPORT_DIR = ROOT / "artifacts" / "faults"
KILLS = int(os.environ.get("PRL_FAULT_KILLS", "2"))
PIPELINE_KILLS = int(os.environ.get("PRL_FAULT_KILLS", "1"))  # a pipeline run costs ~2 min: one kill in CI


@dataclass
class Segment:
    """One run of the command, killed and restarted until it completes."""

    cmd: list[str]
    after_kill: Callable[[], dict[str, Any]]
    """Asserts the invariants after a kill; returns what to record."""
    final: Callable[[], dict[str, int]]
    """Asserts the completed run; returns rows_expected, rows_lost, rows_extra, duplicates."""


def kill_chain(name: str, make_segment: Callable[[int], Segment], *, kills: int, seed: int,
               delay: tuple[float, float], env: dict[str, str], attempt_timeout: float = 900) -> dict[str, Any]:
    """Exactly ``kills`` SIGKILLs at ``uniform(*delay)`` seconds after a start, over as many segments as
    it takes; every start that is not killed must exit 0 (a rerun that fails is a failed recovery)."""
    rng = random.Random(seed)
    points: list[dict[str, Any]] = []
    totals = {"rows_expected": 0, "rows_lost": 0, "rows_extra": 0, "duplicates": 0}
    t0 = time.monotonic()
    killed, segment_no = 0, 0
    while killed < kills:
        seg = make_segment(segment_no)
        while True:
            d = rng.uniform(*delay) if killed < kills else None
            git_lock = ROOT / ".git" / "index.lock"
            lock_before = git_lock.exists()
            rc, err, ran = _run(seg.cmd, env, kill_after=d, timeout=attempt_timeout)
            if rc is None:
                killed += 1
                # run manifests read the git state; a killed `git status` used to leave the index locked
                assert lock_before or not git_lock.exists(), f"{name}: a killed run left {git_lock} behind"
                points.append({"segment": segment_no, "after_s": round(d, 2), **seg.after_kill()})
                continue
            assert rc == 0, f"{name}: a restart failed (rc {rc}):\n{err[-4000:]}"
            break
        for k, v in seg.final().items():
            totals[k] += v
        segment_no += 1
    return {"name": name, "seed": seed, "kills": killed, "recovered": killed, "segments": segment_no,
            "delay_s": list(delay), **totals, "points": points, "seconds": round(time.monotonic() - t0, 1)}


def write_report(record: dict[str, Any]) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (REPORT_DIR / f"{record['name']}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\n[faults] {record['name']}: {record['kills']} kills, {record['recovered']} recovered, "
          f"{record['rows_lost']} rows lost, {record['rows_extra']} extra, {record['duplicates']} duplicates "
          f"({record['segments']} runs, {record['seconds']:.0f} s)")


def _run(cmd: list[str], env: dict[str, str], *, kill_after: float | None, timeout: float):
    """(returncode, or None if killed; stderr text; seconds ran)."""
    with tempfile.TemporaryFile("w+") as err:
        t = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=kill_after if kill_after is not None else timeout)
        except BaseException as e:  # the kill point, or the test itself timed out: never leave the group running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            _reap_group(proc.pid)
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            if kill_after is None:
                raise AssertionError(f"{cmd[:4]} did not finish in {timeout} s") from None
            return None, "", time.monotonic() - t
        _reap_group(proc.pid)
        err.seek(0)
        return rc, err.read(), time.monotonic() - t


def _reap_group(pgid: int) -> None:
    """SIGKILL anything left in the process group (orphaned workers) so the next start is clean."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    time.sleep(0.2)
