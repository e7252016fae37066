"""Agreement of two graders on the same responses: our verdict against an imported run's own labels,
or two runs' verdicts (a run and its rescore), sample by sample.

    agreement(store, run, against=None) → {"table" (2×2), "kappa", both accuracies, "disagreements", …}

"Correct" means verdict 'correct' for our verifier and a label > 0.5 for a source's
(:func:`prl.imports.formats.label_correct`). Samples the source left unlabelled are counted, not
compared. Every disagreeing sample comes back whole (problem, gold, response, both extractions)
so a user can tell whether a published number is a model's or a grader's.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import torch

from prl_core.metrics import agreement_2x2, cohens_kappa

from prl.evaluation.report import ReportError
from prl.imports.formats import label_correct
from prl.store.db import Store


def _run(store: Store, run_id: str) -> dict[str, Any]:
    rows = store.records("get_run", run_id=run_id)
    if not rows:
        known = ", ".join(r["run_id"] for r in store.records("list_runs")) or "none"
        raise ReportError(f"run {run_id!r} is not in the store (runs: {known})")
    run = rows[0]
    run["manifest"] = json.loads(run["manifest"] or "{}")
    return run


def agreement(store: Store, run_id: str, against: str | None = None) -> dict[str, Any]:
    """Our verdicts in ``run_id`` against its source labels (``against`` None) or against run ``against``."""
    run = _run(store, run_id)
    manifest = run["manifest"]
    if against is None:
        rows = store.records("agreement_with_source", run_id=run_id)
        if not rows:
            raise ReportError(f"run {run_id!r} has no samples")
        labelled = [r for r in rows if r["source_label"] is not None]
        if not labelled:
            raise ReportError(f"run {run_id!r} has no source labels (only imported runs whose files score each "
                              "response have them); compare two runs with --against RUN")
        ours = [r["verdict"] == "correct" for r in labelled]
        theirs = [bool(label_correct(r["source_label"])) for r in labelled]
        other_name = "source labels"
        for r in labelled:
            r["other_verdict"] = "correct" if label_correct(r["source_label"]) else "wrong"
            r["other_answer"] = r["source_answer"]
            r["other_gold"] = r["source_gold"]
        unlabelled = len(rows) - len(labelled)
        compared = labelled
    else:
        _run(store, against)
        compared = store.records("agreement_between_runs", run_id=run_id, other_run_id=against)
        if not compared:
            raise ReportError(f"runs {run_id!r} and {against!r} share no sample (same problem and sample index)")
        ours = [r["verdict"] == "correct" for r in compared]
        theirs = [r["other_verdict"] == "correct" for r in compared]
        other_name = against
        unlabelled = 0
    a, b = torch.tensor(ours), torch.tensor(theirs)
    t = agreement_2x2(a, b)
    kappa = cohens_kappa(a, b)
    gold_changes = manifest.get("gold_changes", {})
    disagreements = []
    for r, x, y in zip(compared, ours, theirs):
        if x == y:
            continue
        disagreements.append({
            "dataset": r["dataset"], "problem_id": r["problem_id"], "sample_idx": r["sample_idx"],
            "problem": r["problem"], "gold": gold_changes.get(r["problem_id"], {}).get("new", r["gold"]),
            "response": r["response"], "verdict": r["verdict"], "extracted_answer": r["extracted_answer"],
            "verdict_detail": r.get("verdict_detail"), "other_verdict": r["other_verdict"],
            "other_answer": r.get("other_answer"), "other_gold": r.get("other_gold"), "source_ref": r.get("source_ref"),
        })
    n = len(compared)
    return {
        "run_id": run_id, "against": other_name, "kind": run["kind"], "model": run["model"],
        "samples": n, "unlabelled": unlabelled,
        "table": {"both_correct": t["both_correct"], "ours_only": t["a_only"], "theirs_only": t["b_only"],
                  "both_wrong": t["both_wrong"]},
        "agree": t["both_correct"] + t["both_wrong"], "kappa": None if math.isnan(kappa) else kappa,
        "ours_accuracy": sum(ours) / n, "theirs_accuracy": sum(theirs) / n,
        "reported_accuracy": manifest.get("reported_accuracy"),
        "unmatched": manifest.get("unmatched", []),
        "disagreements": disagreements,
    }


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clip(text: str | None, head: int, tail: int = 0) -> str:
    """Untrusted text for a terminal: control characters (ANSI escapes among them) shown as U+FFFD, long text cut."""
    if text is None:
        return "—"
    text = _CONTROL.sub("\ufffd", str(text)).strip()
    if len(text) <= head + tail + 5:
        return text
    return text[:head] + " … " + (text[-tail:] if tail else "")


def render_agreement(result: dict[str, Any], *, full: bool = False) -> str:
    """The agreement report as plain text: the 2×2 counts, κ, accuracies, every disagreement, unmatched rows."""
    t, n = result["table"], result["samples"]
    kappa = "undefined (one verdict for every sample)" if result["kappa"] is None else f"{result['kappa']:.3f}"
    lines = [f"agreement: run {result['run_id']} (ours) vs {result['against']} — {n} samples compared"
             + (f", {result['unlabelled']} without a source label" if result["unlabelled"] else ""), "",
             f"{'':>18}{'theirs correct':>16}{'theirs wrong':>14}",
             f"{'ours correct':>18}{t['both_correct']:>16}{t['ours_only']:>14}",
             f"{'ours wrong':>18}{t['theirs_only']:>16}{t['both_wrong']:>14}", "",
             f"agree on {result['agree']}/{n} ({result['agree'] / n:.1%}), Cohen's κ {kappa}",
             f"accuracy: ours {result['ours_accuracy']:.4f}, theirs {result['theirs_accuracy']:.4f}"
             + (f", reported by the source {result['reported_accuracy']:.4f}" if result["reported_accuracy"] is not None
                else "")]
    if result["unmatched"]:
        lines.append(f"rows of the source that match no problem (not stored): {len(result['unmatched'])}")
    d = result["disagreements"]
    lines += ["", f"disagreements: {len(d)}"]
    for x in d:
        lines += ["", f"── {x['problem_id']} sample {x['sample_idx']}" + (f"  ({x['source_ref']})" if x["source_ref"] else ""),
                  f"   ours:   {x['verdict']:<8} extracted {_clip(x['extracted_answer'], 80)!s}"
                  + (f"  [{x['verdict_detail']}]" if x.get("verdict_detail") else ""),
                  f"   theirs: {x['other_verdict']:<8} extracted {_clip(x['other_answer'], 80)!s}",
                  f"   gold:     {_clip(x['gold'], 120)}"
                  + (f"   (theirs: {_clip(x['other_gold'], 120)})" if x.get("other_gold") not in (None, x["gold"]) else ""),
                  f"   problem:  {_clip(x['problem'], 10**6 if full else 200)}",
                  f"   response: {_clip(x['response'], 10**6 if full else 160, 0 if full else 240)}"]
    if result["unmatched"]:
        lines += ["", "unmatched rows:"]
        shown = result["unmatched"] if full else result["unmatched"][:20]
        lines += [f"   {u['ref']}: {u['reason']}: {u['excerpt'][:100]!r}" for u in shown]
        if len(shown) < len(result["unmatched"]):
            lines.append(f"   … {len(result['unmatched']) - len(shown)} more (--full lists them all)")
    return "\n".join(lines)
