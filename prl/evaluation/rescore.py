"""``prl rescore``: re-verify a stored run's samples under the current verifier and gold normalisation,
into a **new** run (kind 'rescore'); the old run is never changed.

Each sample's response is verified again against its problem's gold, normalised afresh from
the raw answer the store keeps (``problems.gold``) with today's :func:`prl.data.datasets.normalize_gold`.
Golds whose normalisation changed are listed in the new run's manifest (``gold_changes``:
{problem: {old, new}}), so a Math-Verify upgrade or a normalisation fix is measured sample by
sample with ``prl report --agreement NEW --against OLD``. Resumable and idempotent like an
evaluation: the same command verifies only what the new run is missing.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import Any, Callable

from tqdm.auto import tqdm

from prl.data.datasets import BENCHMARKS, SYNTHETIC, Problem, normalize_gold
from prl.evaluation.config import RescoreConfig  # noqa: F401  (prl rescore's flags; kept beside EvalConfig)
from prl.evaluation.report import ReportError
from prl.grading.relevance import FitIndex, fit_index, graded_fields
from prl.grading.verifier import VerifierSettings
from prl.manifest import run_manifest
from prl.store.db import Store

RESCORE = "rescore"
"""The ``runs.kind`` of a re-verified copy of a run."""


def renormalized_gold(dataset: str, gold_raw: str, gold_stored: str) -> str:
    """Today's normalisation of a stored raw gold (the stored one where the raw field cannot be read again)."""
    try:
        raw = json.loads(gold_raw)
    except (TypeError, ValueError):
        return gold_stored
    if dataset == SYNTHETIC:
        return gold_stored  # the synthetic task's gold is its own (already an integer string)
    try:
        return normalize_gold(dataset if dataset in BENCHMARKS else "", raw)
    except (ValueError, TypeError):
        return gold_stored


def _problem(s: dict[str, Any]) -> Problem:
    return Problem(s["dataset"], s["problem_id"], s["problem"], s["gold_normalized"], s["gold"])


def _fit_index(store: Store, samples: list[dict[str, Any]]) -> FitIndex | None:
    """The benchmark's index for a single-data-set run of a known benchmark; else one over the stored problems
    of its data set (user files: the problems the store has)."""
    datasets = {s["dataset"] for s in samples}
    if len(datasets) != 1:
        return None  # graded_fields() then looks each bundled benchmark up itself
    (name,) = datasets
    known = fit_index(name)
    if known is not None:
        return known
    rows = store.records("problems_of_dataset", dataset=name)
    return FitIndex([Problem(r["dataset"], r["problem_id"], r["problem"], r["gold_normalized"], r["gold"],
                             json.loads(r["meta"] or "{}")) for r in rows])


def rescore_run(db: str, run_id: str, new_run_id: str | None = None, *,
                verifier: VerifierSettings = VerifierSettings(), chunk: int = 256, progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Verify ``run_id``'s samples again into ``new_run_id`` (default ``<run>.rescore``); returns the summary."""
    t0 = time.perf_counter()
    store = Store(db, create=False)
    old = store.records("get_run", run_id=run_id)
    if not old:
        raise ReportError(f"run {run_id!r} is not in {db}")
    old = old[0]
    new_run_id = new_run_id or f"{run_id}.rescore"
    if new_run_id == run_id:
        raise ReportError("--new-run: the rescored run needs a new id (the old run is never changed)")
    existing = store.records("get_run", run_id=new_run_id)
    if existing:
        m = json.loads(existing[0]["manifest"] or "{}")
        if existing[0]["kind"] != RESCORE or m.get("source_run") != run_id:
            raise ReportError(f"run_id: {new_run_id!r} already exists in {db} and is not a rescore of {run_id!r}; "
                              "choose another --new-run")
    samples = store.records("samples_with_gold_for_run", run_id=run_id)
    if not samples:
        raise ReportError(f"run {run_id!r} has no samples to rescore")
    gold_changes: dict[str, dict[str, str]] = {}
    golds: dict[str, str] = {}
    for s in samples:
        key = s["problem_id"]
        if key not in golds:
            golds[key] = renormalized_gold(s["dataset"], s["gold"], s["gold_normalized"])
            if golds[key] != s["gold_normalized"]:
                gold_changes[key] = {"old": s["gold_normalized"], "new": golds[key]}
    old_manifest = json.loads(old["manifest"] or "{}")
    config = {"source_run": run_id, "db": db, **asdict(verifier)}
    manifest = {**run_manifest(RESCORE, config=config, seed=None), "source_run": run_id,
                "source_kind": old["kind"], "gold_changes": gold_changes,
                "reported_accuracy": old_manifest.get("reported_accuracy"),
                "verifier": verifier.manifest(),
                "source_verifier": old_manifest.get("verifier")}
    store.execute("upsert_run", run_id=new_run_id, kind=RESCORE, model=old["model"], status="running", config=config,
                  manifest=manifest, parent_run_id=run_id, train_step=old["train_step"])
    stored = {(d, p, i) for d, p, i in store.rows("stored_sample_keys", run_id=new_run_id)}
    pending = [s for s in samples if (s["dataset"], s["problem_id"], s["sample_idx"]) not in stored]
    log(f"rescore {run_id} → {new_run_id}: {len(samples)} samples, {len(samples) - len(pending)} already rescored; "
        f"{len(gold_changes)} gold(s) normalise differently today")
    index = _fit_index(store, samples)
    added = 0
    try:
        if pending:
            with verifier.pool() as pool, \
                    tqdm(total=len(pending), unit="sample", desc=f"rescore {new_run_id}", disable=not progress,
                         file=sys.stderr, dynamic_ncols=True) as bar:
                for i in range(0, len(pending), chunk):
                    part = pending[i:i + chunk]
                    verdicts = pool.verify([(s["response"], golds[s["problem_id"]]) for s in part])
                    rows = [{"run_id": new_run_id, "dataset": s["dataset"], "problem_id": s["problem_id"],
                             "sample_idx": s["sample_idx"], "response": s["response"], "n_tokens": s["n_tokens"],
                             "finish_reason": s["finish_reason"], **graded_fields(_problem(s), s["response"], v, index),
                             "source_label": s["source_label"], "source_answer": s["source_answer"],
                             "source_gold": s["source_gold"], "source_ref": s["source_ref"]} for s, v in zip(part, verdicts)]
                    added += Store(db, create=False).insert_samples(rows)
                    bar.update(len(part))
    except BaseException:
        store.execute("set_run_status", run_id=new_run_id, status="failed")
        raise
    changed = store.records("agreement_between_runs", run_id=new_run_id, other_run_id=run_id)
    flips = [r for r in changed if r["verdict"] != r["other_verdict"]]
    summary = {"run_id": new_run_id, "source_run": run_id, "samples": len(samples), "samples_added": added,
               "verdicts_changed": len(flips),
               "now_correct": sum(r["verdict"] == "correct" for r in flips),
               "now_not_correct": sum(r["other_verdict"] == "correct" for r in flips),
               "gold_changes": len(gold_changes), "total_s": round(time.perf_counter() - t0, 2)}
    manifest["summary"] = summary
    store.execute("upsert_run", run_id=new_run_id, kind=RESCORE, model=old["model"], status="finished", config=config,
                  manifest=manifest, parent_run_id=run_id, train_step=old["train_step"])
    log(f"rescore {new_run_id}: {summary['verdicts_changed']} verdict(s) changed ({summary['now_correct']} now "
        f"correct, {summary['now_not_correct']} no longer); compare: prl report --db {db} --agreement {new_run_id} "
        f"--against {run_id}")
    return summary
