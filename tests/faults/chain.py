"""Kill chains: run a command, SIGKILL its whole process group at a named stage, read what the store and
the files show, run it again … until it completes; then compare the store, row by row and value by value,
with an uninterrupted run's.

A kill is aimed, not timed: each start of the command gets ``PRL_FAULT_POINT`` (:mod:`prl.fault_points`)
naming a fault point and its key or occurrence, and the process group dies there. After the kill the
chain's ``derive`` reads the store and the files (steps stored, checkpoint tags, ``latest``, partial
evaluation runs, shard files, the warm-start directory) and names the stage they show; the record holds
that derived stage beside the one the aim predicted, and the chain asserts they are equal, so a kill that
landed elsewhere (or a stage the files cannot tell apart) shows as a mismatch, not as a success.

Every figure in a chain's record is measured: ``recovered`` counts the kills whose segment ended in a run
that exited 0 with a final state equal to the reference's; ``rows_lost``, ``rows_extra`` and ``duplicates``
come from comparing the store's key multiset with the uninterrupted run's (:func:`compare_keys`);
``rows_compared`` and ``values_differ`` from comparing each row present in both by value
(:func:`compare_values`: every column but the measurements listed in :data:`NOT_COMPARED`).

``PRL_FAULT_KILLS`` unset (CI): each chain kills once per stage in one segment. ``PRL_FAULT_KILLS=N`` (the
bench: ``bench/run_all.py --only faults --full`` sets 20): at least N kills at seeded random stages, over
as many segments as it takes. Each chain writes its record to ``artifacts/faults/<name>.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
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
KILLS = int(os.environ.get("PRL_FAULT_KILLS", "0"))
"""0: one kill per stage (CI); N > 0: at least N kills at seeded random stages (the long chains)."""
FAULT_ENV = "PRL_FAULT_POINT"

# The rows a run writes, by their full key (the table's primary key, run id first) and the columns compared
# by value. Left out of the value comparison (NOT_COMPARED): measurements and what names the directory.
ROW_QUERIES = {
    "runs": ("select run_id, kind, status, parent_run_id, train_step from runs order by all", 1),
    "samples": ("select run_id, dataset, problem_id, sample_idx, response, extracted_answer, verdict, score, n_tokens, "
                "finish_reason, relevance, answer_only, best_fit, verdict_detail from samples order by all", 4),
    "train_metrics": ("select run_id, step, name, value from train_metrics order by all", 3),
    "train_rollouts": ("select run_id, step, rollout_idx, problem, gold, response, reward, tokens from train_rollouts "
                       "order by all", 3),
    "prl_segments": ("select run_id, step, rollout_idx, segment_idx, start_tok, end_tok, kl_to_go, rho from prl_segments "
                     "order by all", 4),
}
MEASURED_METRICS = ("time/", "memory/")
NOT_COMPARED = {
    "runs": "model (the directory the run was made in), created_at, config and manifest (paths, times, git state, "
            "attempts): compared are kind, status, parent run and step",
    "samples": "verify_ms (the verifier's wall-clock time)",
    "train_metrics": "the values of time/* and memory/* (measured seconds and GiB); their keys are compared",
}
COUNTS = ("rows_expected", "rows_lost", "rows_extra", "duplicates")
VALUE_COUNTS = ("rows_compared", "values_differ")


@dataclass(frozen=True)
class Aim:
    """One kill: where (``spec``, the PRL_FAULT_POINT value), the stage kind it is one of, and the stage the store
    and files must show after it (named as the chain's ``derive`` names what it reads)."""

    spec: str
    kind: str
    stage: str


@dataclass
class Segment:
    """One run of the command, killed at each of ``aims`` in turn and then run to completion."""

    cmd: list[str]
    aims: list[Aim]
    derive: Callable[[], dict[str, Any]]
    """After a kill: asserts the invariants (whole units only, contiguous steps, the checkpoint ``latest`` names
    loads) and returns {"stage": the stage the store and files show, ...what else it read}."""
    final: Callable[[], dict[str, Any]]
    """The completed run against the uninterrupted one: the counts of :func:`compare_rows` and ``mismatches``, a
    list naming anything else that differs (weights, checkpoints, run status)."""


# ─── comparing stores ──────────────────────────────────────────────────────────────────────────────

def store_rows(db: Path | str) -> dict[str, dict[tuple, list[tuple]]]:
    """Every row the runs in the store wrote: {table: {full key: [values compared, one per row held]}}. The values
    of measured train metrics (:data:`MEASURED_METRICS`) are None (their keys still count)."""
    from prl.store.db import Store

    out: dict[str, dict[tuple, list[tuple]]] = {}
    with Store(db, create=False, lock_timeout_s=30).read() as con:
        for table, (query, width) in ROW_QUERIES.items():
            rows: dict[tuple, list[tuple]] = {}
            for row in con.execute(query).fetchall():
                key, values = tuple(row[:width]), tuple(row[width:])
                if table == "train_metrics" and str(key[2]).startswith(MEASURED_METRICS):
                    values = (None,)
                rows.setdefault(key, []).append(values)
            out[table] = rows
    return out


def store_keys(db: Path | str) -> Counter:
    """The multiset of (table, *full key) over every row the runs in the store wrote."""
    return Counter({(table, *key): len(v) for table, rows in store_rows(db).items() for key, v in rows.items()})


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


def compare_values(got: dict[str, dict[tuple, list[tuple]]], ref: dict[str, dict[tuple, list[tuple]]]
                   ) -> dict[str, Any]:
    """Each row whose key both stores hold, compared by value (exact equality; NaN equals NaN): rows_compared,
    values_differ (rows with any column different), and per table the differing keys (first 5) and, per numeric
    column, the largest absolute difference seen (the bound where a value is not deterministic)."""
    compared, differ, detail = 0, 0, {}
    for table, ref_rows in ref.items():
        keys, bounds = [], {}
        for key, ref_values in ref_rows.items():
            got_values = got.get(table, {}).get(key)
            if not got_values or (table == "train_metrics" and str(key[2]).startswith(MEASURED_METRICS)):
                continue
            compared += 1
            a, b = got_values[0], ref_values[0]
            if not _same(a, b):
                differ += 1
                keys.append(key)
                for i, (x, y) in enumerate(zip(a, b)):
                    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not _same((x,), (y,)):
                        col = f"{table}.{i}" if table != "train_metrics" else f"train_metrics:{key[2]}"
                        bounds[col] = max(bounds.get(col, 0.0), abs(float(x) - float(y)))
        if keys:
            detail[table] = {"differ": len(keys), "first": [list(map(str, k)) for k in keys[:5]], "max_abs_diff": bounds}
    return {"rows_compared": compared, "values_differ": differ, "differences": detail}


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x)
                                               and math.isnan(y)) for x, y in zip(a, b))


def compare_rows(db: Path | str, ref: dict[str, dict[tuple, list[tuple]]]) -> dict[str, Any]:
    """A store against the reference's rows (:func:`store_rows`): the key counts and the value comparison."""
    got = store_rows(db)
    flat = lambda rows: Counter({(t, *k): len(v) for t, r in rows.items() for k, v in r.items()})  # noqa: E731
    return {**compare_keys(flat(got), flat(ref)), **compare_values(got, ref)}


def file_digest(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tensors_equal(a: dict, b: dict) -> list[str]:
    """Names of the tensors of two state dicts that are not bit-identical (missing ones included)."""
    import torch

    names = sorted(set(a) | set(b))
    return [n for n in names if n not in a or n not in b or a[n].dtype != b[n].dtype or a[n].shape != b[n].shape
            or not torch.equal(_bytes(a[n]), _bytes(b[n]))]


def _bytes(t):
    import torch

    return t.detach().cpu().contiguous().view(-1).view(torch.uint8) if t.numel() else t


# ─── the chain ──────────────────────────────────────────────────────────────────────────────────────

def kill_chain(name: str, make_segment: Callable[[int, random.Random], Segment], *, kills: int, seed: int,
               env: dict[str, str], attempt_timeout: float = 900) -> dict[str, Any]:
    """Segments until ``kills`` kills are made (each segment's aims from ``make_segment(i, rng)``); each start but
    the last of a segment is killed at its aim, and the segment's final state is compared with the reference.
    A start that is not killed where it was aimed (it exits instead), or a last start that exits non-zero, ends
    the chain (``failure``). A kill is recovered when its segment ends in a run that exits 0 with nothing lost,
    extra, duplicated or different, and every kill of the segment hit the stage it aimed at."""
    rng = random.Random(seed)
    points: list[dict[str, Any]] = []
    totals = dict.fromkeys(COUNTS + VALUE_COUNTS, 0)
    mismatches: list[str] = []
    differences: list[dict[str, Any]] = []
    failure = None
    t0 = time.monotonic()
    killed, recovered, segment_no = 0, 0, 0
    while killed < kills and failure is None:
        seg = make_segment(segment_no, rng)
        seg_points: list[dict[str, Any]] = []
        for aim in seg.aims:
            git_lock = ROOT / ".git" / "index.lock"
            lock_before = git_lock.exists()
            rc, err, ran = _run(seg.cmd, {**env, FAULT_ENV: aim.spec}, timeout=attempt_timeout)
            if seg_points:
                seg_points[-1]["next_run"] = "killed" if rc == -signal.SIGKILL else f"exit {rc}"
            if rc != -signal.SIGKILL:
                failure = (f"segment {segment_no}: the start aimed at {aim.spec} was not killed there (exit {rc}):\n"
                           f"{err[-4000:]}")
                break
            killed += 1
            # run manifests read the git state; a killed `git status` used to leave the index locked
            assert lock_before or not git_lock.exists(), f"{name}: a killed run left {git_lock} behind"
            derived = seg.derive()
            point = {"segment": segment_no, "aim": aim.spec, "kind": aim.kind, "aimed_stage": aim.stage,
                     "stage": derived.pop("stage"), "seconds": round(ran, 1), **derived}
            if point["stage"] != aim.stage:
                mismatches.append(f"segment {segment_no}: aimed at {aim.spec} ({aim.stage!r}); the store and files "
                                  f"show {point['stage']!r}")
            seg_points.append(point)
        if failure is None:
            rc, err, _ = _run(seg.cmd, env, timeout=attempt_timeout)
            if seg_points:
                seg_points[-1]["next_run"] = f"exit {rc}"
            if rc != 0:
                failure = f"segment {segment_no}: the last start exited {rc}:\n{err[-4000:]}"
        matched = False
        if failure is None:
            measured = seg.final()
            for k in COUNTS + VALUE_COUNTS:
                totals[k] += measured[k]
            if measured.get("differences"):
                differences.append({"segment": segment_no, **measured["differences"]})
            seg_mismatches = [f"segment {segment_no}: {m}" for m in measured.get("mismatches", [])]
            mismatches += seg_mismatches
            matched = (not seg_mismatches and not any(measured[k] for k in COUNTS[1:] + ("values_differ",))
                       and all(p["stage"] == p["aimed_stage"] for p in seg_points))
        for p in seg_points:
            p["recovered"] = matched
        recovered += len(seg_points) if matched else 0
        points += seg_points
        segment_no += 1
    stages: dict[str, dict[str, int]] = {}
    for p in points:
        s = stages.setdefault(p["kind"], {"kills": 0, "recovered": 0, "stage_as_aimed": 0})
        s["kills"] += 1
        s["recovered"] += p["recovered"]
        s["stage_as_aimed"] += p["stage"] == p["aimed_stage"]
    return {"name": name, "seed": seed, "kills": killed, "recovered": recovered, "segments": segment_no,
            "stages": stages, **totals, "not_compared": NOT_COMPARED, "differences": differences,
            "mismatches": mismatches, "failure": failure, "points": points,
            "seconds": round(time.monotonic() - t0, 1)}


def check_record(record: dict[str, Any], kills: int) -> None:
    """The chain's assertions, after its record is written: at least ``kills`` kills, each at the stage it aimed
    at and recovered; the store equal to the uninterrupted run's, key by key and value by value."""
    assert record["failure"] is None, record["failure"]
    assert record["mismatches"] == [], record["mismatches"]
    assert record["kills"] >= kills and record["recovered"] == record["kills"], record
    assert all(p["stage"] == p["aimed_stage"] for p in record["points"]), record["points"]
    assert record["rows_lost"] == record["rows_extra"] == record["duplicates"] == record["values_differ"] == 0, record
    assert record["rows_compared"] > 0


def write_report(record: dict[str, Any]) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (REPORT_DIR / f"{record['name']}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\n[faults] {record['name']}: {record['kills']} kills, {record['recovered']} recovered, "
          f"{record['rows_lost']} rows lost, {record['rows_extra']} extra, {record['duplicates']} duplicates, "
          f"{record['values_differ']} of {record['rows_compared']} rows different by value "
          f"({record['segments']} segments, {record['seconds']:.0f} s; uninterrupted reference "
          f"{record.get('reference_s', '?')} s)")
    for kind, s in record["stages"].items():
        print(f"[faults] {record['name']}: {kind}: {s['kills']} kills, {s['recovered']} recovered")
    for m in record.get("mismatches") or []:
        print(f"[faults] {record['name']}: {m}")


def write_reproducibility(record: dict[str, Any]) -> None:
    """A same-seed comparison of two uninterrupted runs: ``artifacts/reproducibility/<name>.json`` (bench/run_all.py
    collects them into bench/results/reproducibility.json)."""
    directory = REPORT_DIR.parent / "reproducibility"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{record['name']}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\n[reproducibility] {record['name']}: {record['values_differ']} of {record['rows_compared']} rows different "
          f"by value; {len(record['mismatches'])} files or tensors different")


def run_reference(cmd: list[str], env: dict[str, str], timeout: float = 900) -> float:
    """Run ``cmd`` uninterrupted; asserts it exits 0; returns its seconds."""
    rc, err, ran = _run(cmd, env, timeout=timeout)
    assert rc == 0, f"the uninterrupted reference run failed (rc {rc}):\n{err[-4000:]}"
    return ran


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without process-group variables an in-process trainer set, and without a
    fault point, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "LOCAL_WORLD_SIZE", FAULT_ENV)}
    return {**env, **extra}


def _run(cmd: list[str], env: dict[str, str], *, timeout: float) -> tuple[int, str, float]:
    """(returncode, negative for a signal; stderr text; seconds ran). In its own process group, which a fault
    point kills whole; anything of the group left afterwards is killed too."""
    with tempfile.TemporaryFile("w+") as err:
        t = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except BaseException as e:  # the test itself timed out or was interrupted: never leave the group running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            _reap_group(proc.pid)
            if isinstance(e, subprocess.TimeoutExpired):
                raise AssertionError(f"{cmd[:4]} did not finish in {timeout} s") from None
            raise
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
