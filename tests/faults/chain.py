"""Kill chains: run a command, SIGKILL its whole process group at a seeded random moment, check
the store, run it again … then let it finish, and report what was killed and what was recovered.

``PRL_FAULT_KILLS`` sets the kills per chain: a few in CI (the default), 20 or more for the full
run (``PRL_FAULT_KILLS=20 .venv/bin/python -m pytest tests/faults``). Each chain writes its
record to ``artifacts/faults/<name>.json``; ``bench/faults_report.py`` summarises them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
REPORT_DIR = ROOT / "artifacts" / "faults"
KILLS = int(os.environ.get("PRL_FAULT_KILLS", "3"))
PIPELINE_KILLS = int(os.environ.get("PRL_FAULT_KILLS", "2"))  # each pipeline start costs ~1 min: fewer in CI


def kill_chain(name: str, cmd: list[str], *, kills: int, seed: int, delay: tuple[float, float], env: dict[str, str],
               after_kill: Callable[[], dict[str, Any]], attempt_timeout: float = 900) -> dict[str, Any]:
    """Up to ``kills`` SIGKILLs at ``uniform(*delay)`` seconds after each start, ``after_kill()`` after
    each (it asserts the invariants and returns what to record), then one run to completion.

    A start that finishes before its kill time ends the chain early (recorded). Every start that is
    not killed must exit 0: a rerun that fails is a failed recovery.
    """
    rng = random.Random(seed)
    points: list[dict[str, Any]] = []
    t0 = time.monotonic()
    finished = False
    for _ in range(kills):
        d = rng.uniform(*delay)
        rc, err, ran = _run(cmd, env, kill_after=d, timeout=attempt_timeout)
        if rc is not None:  # ended before the kill
            assert rc == 0, f"{name}: a restart failed (rc {rc}):\n{err[-4000:]}"
            points.append({"after_s": round(d, 2), "killed": False, "ran_s": round(ran, 2)})
            finished = True
            break
        points.append({"after_s": round(d, 2), "killed": True, **after_kill()})
    if not finished:
        rc, err, ran = _run(cmd, env, kill_after=None, timeout=attempt_timeout)
        assert rc == 0, f"{name}: the final rerun failed (rc {rc}):\n{err[-4000:]}"
    killed = sum(p["killed"] for p in points)
    return {"name": name, "seed": seed, "requested_kills": kills, "kills": killed, "recovered": killed,
            "delay_s": list(delay), "points": points, "seconds": round(time.monotonic() - t0, 1)}


def write_report(record: dict[str, Any]) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (REPORT_DIR / f"{record['name']}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\n[faults] {record['name']}: {record['kills']} kills, {record['recovered']} recovered, "
          f"{record.get('rows_lost', 0)} rows lost, {record.get('duplicates', 0)} duplicates "
          f"({record['seconds']:.0f} s)")


def _run(cmd: list[str], env: dict[str, str], *, kill_after: float | None, timeout: float):
    """(returncode or None if killed, stderr text, seconds ran)."""
    with tempfile.TemporaryFile("w+") as err:
        t = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=kill_after if kill_after is not None else timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            _reap_group(proc.pid)
            if kill_after is None:
                raise AssertionError(f"{cmd[:4]} did not finish in {timeout} s")
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
