"""Kill chains: run a command, SIGKILL its whole process group at a seeded random moment, check
the store, run it again … until it completes; then compare the store, key by key, with an
uninterrupted run's. When a run completes before the requested number of kills, the chain goes
on with a fresh segment (new output directory and store), so every kill lands somewhere in a
real run, from start-up to the last write.

Every figure in a chain's record is measured: ``recovered`` counts the kills whose segment ended
in a run that exited 0 with a final state equal to the reference's; ``rows_lost``, ``rows_extra``
and ``duplicates`` come from comparing the store's key multiset with the uninterrupted run's
(:func:`compare_keys`).

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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REPORT_DIR = ROOT / "artifacts" / "faults"
KILLS = int(os.environ.get("PRL_FAULT_KILLS", "2"))
PIPELINE_KILLS = int(os.environ.get("PRL_FAULT_KILLS", "1"))  # a pipeline run costs ~2 min: one kill in CI

# The rows a run writes, by their full key (the table's primary key, run id included).
KEY_QUERIES = {
    "runs": "select run_id from runs",
    "samples": "select run_id, dataset, problem_id, sample_idx from samples",
    "train_metrics": "select run_id, step, name from train_metrics",
    "train_rollouts": "select run_id, step, rollout_idx from train_rollouts",
}
COUNTS = ("rows_expected", "rows_lost", "rows_extra", "duplicates")


@dataclass
class Segment:
    """One run of the command, killed and restarted until it completes."""

    cmd: list[str]
    after_kill: Callable[[], dict[str, Any]]
    """Asserts the invariants after a kill; returns what to record."""
    final: Callable[[], dict[str, Any]]
    """Measures the completed run against the uninterrupted one: rows_expected, rows_lost, rows_extra,
    duplicates (from :func:`compare_keys`) and ``mismatches``, a list naming anything else that differs."""


def store_keys(db: Path | str) -> Counter:
    """The multiset of (table, *full key) over every row the runs in the store wrote."""
    from prl.store.db import Store

    keys: Counter = Counter()
    with Store(db, create=False, lock_timeout_s=30).read() as con:
        for table, q in KEY_QUERIES.items():
            keys.update((table, *row) for row in con.execute(q).fetchall())
    return keys


def compare_keys(got: Iterable[tuple], ref: Iterable[tuple]) -> dict[str, int]:
    """Compare a killed run's key multiset with an uninterrupted run's. Keys are (table, run_id, *rest).

    rows_lost: reference rows missing; rows_extra: rows beyond the reference (keys it does not hold,
    or held more often); duplicates: rows of a unit of work the reference holds (a key without its
    run id: the same sample, step metric, rollout or run) beyond the reference's count, e.g. work
    stored again under another run id, which the tables' primary keys do not prevent.
    """
    got, ref = Counter(got), Counter(ref)

    def units(c: Counter) -> Counter:
        out: Counter = Counter()
        for (table, _run, *rest), n in c.items():
            out[(table, *rest)] += n
        return out

    got_units, ref_units = units(got), units(ref)
    return {"rows_expected": sum(ref.values()), "rows_lost": sum((ref - got).values()),
            "rows_extra": sum((got - ref).values()),
            "duplicates": sum(max(0, got_units[u] - n) for u, n in ref_units.items())}


def kill_chain(name: str, make_segment: Callable[[int], Segment], *, kills: int, seed: int,
               delay: tuple[float, float], env: dict[str, str], attempt_timeout: float = 900) -> dict[str, Any]:
    """Exactly ``kills`` SIGKILLs at ``uniform(*delay)`` seconds after a start, over as many segments as
    it takes. A kill is recovered when the runs after it end in one that exits 0 and the segment's
    final state matches the reference (no row lost, extra or duplicated, no mismatch). A start that
    is not killed and exits non-zero ends the chain (recorded in ``failure``)."""
    rng = random.Random(seed)
    points: list[dict[str, Any]] = []
    totals = dict.fromkeys(COUNTS, 0)
    mismatches: list[str] = []
    failure = None
    t0 = time.monotonic()
    killed, recovered, segment_no = 0, 0, 0
    while killed < kills and failure is None:
        seg = make_segment(segment_no)
        seg_points: list[dict[str, Any]] = []
        while True:
            d = rng.uniform(*delay) if killed < kills else None
            git_lock = ROOT / ".git" / "index.lock"
            lock_before = git_lock.exists()
            rc, err, _ = _run(seg.cmd, env, kill_after=d, timeout=attempt_timeout)
            if seg_points:
                seg_points[-1]["next_run"] = "killed" if rc is None else f"exit {rc}"
            if rc is None:
                killed += 1
                # run manifests read the git state; a killed `git status` used to leave the index locked
                assert lock_before or not git_lock.exists(), f"{name}: a killed run left {git_lock} behind"
                seg_points.append({"segment": segment_no, "after_s": round(d, 2), **seg.after_kill()})
                continue
            if rc != 0:
                failure = f"segment {segment_no}: a restart exited {rc}:\n{err[-4000:]}"
            break
        matched = False
        if failure is None:
            measured = seg.final()
            for k in COUNTS:
                totals[k] += measured[k]
            mismatches += [f"segment {segment_no}: {m}" for m in measured.get("mismatches", [])]
            matched = not measured.get("mismatches") and not any(measured[k] for k in COUNTS[1:])
        for p in seg_points:
            p["recovered"] = matched
        recovered += len(seg_points) if matched else 0
        points += seg_points
        segment_no += 1
    return {"name": name, "seed": seed, "kills": killed, "recovered": recovered, "segments": segment_no,
            "delay_s": list(delay), **totals, "mismatches": mismatches, "failure": failure, "points": points,
            "seconds": round(time.monotonic() - t0, 1)}


def check_record(record: dict[str, Any], kills: int) -> None:
    """The chain's assertions, after its record is written: every kill recovered, the store equal to the
    uninterrupted run's."""
    assert record["failure"] is None, record["failure"]
    assert record["mismatches"] == [], record["mismatches"]
    assert record["kills"] == kills and record["recovered"] == kills, record
    assert record["rows_lost"] == record["rows_extra"] == record["duplicates"] == 0, record


def write_report(record: dict[str, Any]) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (REPORT_DIR / f"{record['name']}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\n[faults] {record['name']}: {record['kills']} kills, {record['recovered']} recovered, "
          f"{record['rows_lost']} rows lost, {record['rows_extra']} extra, {record['duplicates']} duplicates "
          f"({record['segments']} runs, {record['seconds']:.0f} s; uninterrupted reference "
          f"{record.get('reference_s', '?')} s)")
    for m in record.get("mismatches") or []:
        print(f"[faults] {record['name']}: {m}")


def run_reference(cmd: list[str], env: dict[str, str], timeout: float = 900) -> float:
    """Run ``cmd`` uninterrupted; asserts it exits 0; returns its seconds."""
    rc, err, ran = _run(cmd, env, kill_after=None, timeout=timeout)
    assert rc == 0, f"the uninterrupted reference run failed (rc {rc}):\n{err[-4000:]}"
    return ran
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
