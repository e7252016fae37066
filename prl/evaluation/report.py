"""Scores of stored runs and paired comparisons (``prl report``), docs/architecture.md §Metrics and aggregates.

Per run and data set: average@n, unbiased pass@k for the requested k (each ≤ the run's n),
maj@n, each with a percentile bootstrap CI over problems; micro (size-weighted, the paper's
"5 Avg") and macro (mean of data sets, what the authors' scripts print) aggregates, labelled
with sizes, with stratified bootstrap CIs. Paired comparison of two runs on the problems both
have: the difference of average@n with a paired bootstrap CI, and McNemar's exact test on
pass@k success (solved by at least one of the first k samples), with the problems gained and
lost. The paper's reference rows and their "5 Avg" check close the report.

Data comes from the store through named queries; the arithmetic is ``prl_core.metrics``.
"""

from __future__ import annotations

from prl_core.errors import UserError
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from prl_core.metrics import (aggregate_bootstrap_ci, average_at_k, bootstrap_ci, maj_at_k, mcnemar, micro_macro,
                              paired_bootstrap_diff, pass_at_k)

from prl.data.paper import load_paper_tables, render_check
from prl.grading.relevance import SUSPICION_RULES, flagged_by
from prl.grading.verifier import equivalent_answers
from prl.store.db import Store


class ReportError(UserError, ValueError):
    """The report cannot be made as asked (unknown run, k larger than n, …)."""


class NothingToCompare(ReportError):
    """Two runs have no problem in common with samples (e.g. evaluated on different data sets):
    each run's own scores stand, but there is no paired comparison to make."""


@dataclass
class RunSamples:
    """Per-problem sample outcomes of one run, grouped by data set."""

    run_id: str
    # dataset -> problem_id -> list of (extracted answer, correct) in sample order
    by_dataset: dict[str, dict[str, list[tuple[str | None, bool]]]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Samples per problem (the smallest, if a run is still in progress)."""
        counts = [len(v) for d in self.by_dataset.values() for v in d.values()]
        return min(counts) if counts else 0

    def problems(self) -> int:
        return sum(len(d) for d in self.by_dataset.values())


def load_run(store: Store, run_id: str) -> RunSamples:
    if not store.rows("get_run", run_id=run_id):
        known = [r["run_id"] for r in store.records("list_runs")]
        raise ReportError(f"run {run_id!r} is not in {store.path}; runs there: {', '.join(known) or 'none'}")
    run = RunSamples(run_id)
    for dataset, pid, _idx, answer, correct in store.rows("answers_for_run", run_id=run_id):
        run.by_dataset.setdefault(dataset, {}).setdefault(pid, []).append((answer, bool(correct)))
    return run


def _counts(rows: Sequence[list[tuple[str | None, bool]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, n) per problem: its correct samples and its samples (the view ``problem_outcomes``' c and n)."""
    return (torch.tensor([sum(ok for _, ok in s) for s in rows], dtype=torch.float64),
            torch.tensor([len(s) for s in rows]))


def per_problem(run: RunSamples, metric: str, k: int | None = None) -> dict[str, torch.Tensor]:
    """Per-problem values (P,) by data set for 'average', 'pass' (pass@k) or 'maj' (maj@k: the first k
    samples' answers clustered by mathematical equivalence, :func:`prl.grading.verifier.equivalent_answers`)."""
    out: dict[str, torch.Tensor] = {}
    for dataset, problems in sorted(run.by_dataset.items()):
        rows = [problems[p] for p in sorted(problems)]
        if metric == "average":
            out[dataset] = average_at_k(*_counts(rows))
        elif metric == "pass":
            out[dataset] = pass_at_k(*_counts(rows), k)
        elif metric == "maj":
            out[dataset] = maj_at_k([[a for a, _ in s] for s in rows], [[ok for _, ok in s] for s in rows],
                                    k or min(len(s) for s in rows), equivalent=equivalent_answers)
        else:
            raise ValueError(f"metric: unknown {metric!r}")
    return out


def run_scores(store: Store, run_id: str, ks: Sequence[int] | None = None, *, iters: int = 2000,
               seed: int = 0) -> dict[str, Any]:
    """Per-data-set and aggregate scores of one run with bootstrap CIs (a JSON-ready dict)."""
    run = load_run(store, run_id)
    n = run.n
    if n == 0:
        return {"run_id": run_id, "n": 0, "datasets": [], "aggregates": {}, "note": "the run has no samples yet"}
    ks = sorted(set(ks or [k for k in (1, 2, 4, 8, 16, 32) if k <= n] + [n]))
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ReportError(f"k: {bad} not in [1, n={n}] for run {run_id}")
    metrics = {f"average@{n}": per_problem(run, "average"), **{f"pass@{k}": per_problem(run, "pass", k) for k in ks},
               f"maj@{n}": per_problem(run, "maj", n)}
    datasets = []
    for d in sorted(run.by_dataset):
        row: dict[str, Any] = {"dataset": d, "problems": len(run.by_dataset[d]), "n": n}
        for name, vals in metrics.items():
            lo, hi = bootstrap_ci(vals[d], iters=iters, seed=seed)
            row[name] = {"value": float(vals[d].mean()), "lo": lo, "hi": hi}
        datasets.append(row)
    aggregates: dict[str, Any] = {}
    for how in ("micro", "macro"):
        agg = {}
        for name, vals in metrics.items():
            lo, hi = aggregate_bootstrap_ci(vals, how=how, iters=iters, seed=seed)
            agg[name] = {"value": micro_macro(vals)[how], "lo": lo, "hi": hi}
        aggregates[how] = agg
    return {"run_id": run_id, "n": n, "ks": ks, "problems": run.problems(), "datasets": datasets,
            "aggregates": aggregates, "incomplete_problems": sum(
                1 for d in run.by_dataset.values() for s in d.values() if len(s) != n)}


def eval_metrics(store: Store, run_id: str, ks: Sequence[int] = ()) -> dict[str, float]:
    """An evaluation run's scores as flat ``train_metrics`` names (what an in-training evaluation stores at its step):
    ``eval/average`` and ``eval/pass@k`` (micro averages over the run's problems, as :func:`run_scores`' ``micro``
    aggregate and ``prl report``), ``eval/macro/average``, and per data set ``eval/<dataset>/average`` and
    ``eval/<dataset>/pass@k``. ``ks``: empty = 1 and n. Values only (no bootstrap: the report has the CIs)."""
    run = load_run(store, run_id)
    if run.n == 0:
        return {}
    ks = sorted({k for k in (ks or (1, run.n)) if 1 <= k <= run.n})
    metrics = {"average": per_problem(run, "average"), **{f"pass@{k}": per_problem(run, "pass", k) for k in ks}}
    out: dict[str, float] = {}
    for name, vals in metrics.items():
        out[f"eval/{name}"] = micro_macro(vals)["micro"]
        for d, v in vals.items():
            out[f"eval/{d}/{name}"] = float(v.mean())
    out["eval/macro/average"] = micro_macro(metrics["average"])["macro"]
    return out


def compare_runs(store: Store, run_a: str, run_b: str, *, k: int | None = None, iters: int = 2000,
                 seed: int = 0) -> dict[str, Any]:
    """Run B against run A on the problems both have (per data set and overall)."""
    a, b = load_run(store, run_a), load_run(store, run_b)
    n = min(a.n, b.n)
    if n == 0:
        raise NothingToCompare(f"both runs need samples to compare ({run_a}: {a.problems()}, {run_b}: "
                               f"{b.problems()} problems)")
    k = k or n
    if not 1 <= k <= n:
        raise ReportError(f"k: {k} not in [1, {n}] (the smaller n of the two runs)")
    rows, all_a, all_b, gained, lost = [], [], [], [], []
    succ_a_all, succ_b_all = [], []
    for d in sorted(set(a.by_dataset) & set(b.by_dataset)):
        common = sorted(set(a.by_dataset[d]) & set(b.by_dataset[d]))
        if not common:
            continue
        sa, sb = [a.by_dataset[d][p] for p in common], [b.by_dataset[d][p] for p in common]
        avg_a, avg_b = average_at_k(*_counts(sa)), average_at_k(*_counts(sb))
        succ_a = torch.tensor([any(ok for _, ok in s[:k]) for s in sa])
        succ_b = torch.tensor([any(ok for _, ok in s[:k]) for s in sb])
        diff = paired_bootstrap_diff(avg_a, avg_b, iters=iters, seed=seed)
        test = mcnemar(succ_a, succ_b)
        gained += [f"{d}/{p}" if not p.startswith(d + "/") else p for p, x, y in zip(common, succ_a, succ_b) if y and not x]
        lost += [f"{d}/{p}" if not p.startswith(d + "/") else p for p, x, y in zip(common, succ_a, succ_b) if x and not y]
        rows.append({"dataset": d, "problems": len(common), "average_a": float(avg_a.mean()),
                     "average_b": float(avg_b.mean()), "diff": diff, "mcnemar": test,
                     "pass_a": float(succ_a.double().mean()), "pass_b": float(succ_b.double().mean())})
        all_a.append(avg_a)
        all_b.append(avg_b)
        succ_a_all.append(succ_a)
        succ_b_all.append(succ_b)
    if not rows:
        raise NothingToCompare(f"runs {run_a} and {run_b} share no problems ({run_a}: "
                               f"{', '.join(sorted(a.by_dataset))}; {run_b}: {', '.join(sorted(b.by_dataset))})")
    ta, tb = torch.cat(all_a), torch.cat(all_b)
    overall = {"problems": int(ta.numel()), "average_a": float(ta.mean()), "average_b": float(tb.mean()),
               "diff": paired_bootstrap_diff(ta, tb, iters=iters, seed=seed),
               "mcnemar": mcnemar(torch.cat(succ_a_all), torch.cat(succ_b_all))}
    return {"run_a": run_a, "run_b": run_b, "n": n, "k": k, "datasets": rows, "overall": overall,
            "gained": gained, "lost": lost}


# ─── rendering ──────────────────────────────────────────────────────────────────────────────

def _ci(m: dict[str, float]) -> str:
    if m["value"] != m["value"]:  # NaN
        return "—"
    return f"{100 * m['value']:5.1f} [{100 * m['lo']:5.1f}, {100 * m['hi']:5.1f}]"


def render_scores(s: dict[str, Any], store: Store | None = None) -> str:
    if not s["datasets"]:
        return f"run {s['run_id']}: {s.get('note', 'no samples')}"
    names = list(s["datasets"][0].keys())[3:]
    width = 22
    head = f"{'dataset':<16} {'problems':>8} {'n':>3}  " + " ".join(f"{x:>{width}}" for x in names)
    lines = [f"run {s['run_id']}: {s['problems']} problems, n={s['n']} samples each "
             f"(scores in %, [95% bootstrap CI over problems])", head, "-" * len(head)]
    for r in s["datasets"]:
        lines.append(f"{r['dataset']:<16} {r['problems']:>8} {r['n']:>3}  " + " ".join(f"{_ci(r[x]):>{width}}" for x in names))
    sizes = "/".join(str(r["problems"]) for r in s["datasets"])
    lines.append("-" * len(head))
    lines.append(f"{'micro':<16} {s['problems']:>8} {'':>3}  " + " ".join(f"{_ci(s['aggregates']['micro'][x]):>{width}}" for x in names))
    lines.append(f"{'macro':<16} {len(s['datasets']):>8} {'':>3}  " + " ".join(f"{_ci(s['aggregates']['macro'][x]):>{width}}" for x in names))
    lines.append(f"micro = size-weighted over problems (the paper's \"5 Avg\"; sizes {sizes}); "
                 f"macro = mean of the {len(s['datasets'])} data-set scores (what the authors' scripts print).")
    if s.get("incomplete_problems"):
        lines.append(f"note: {s['incomplete_problems']} problems have fewer than or more than n samples "
                     "(the run is incomplete; resume it)")
    return "\n".join(lines)


def render_comparison(c: dict[str, Any], max_list: int = 20) -> str:
    k = c["k"]
    head = (f"{'dataset':<16} {'problems':>8}  {'avg A':>6} {'avg B':>6} {'Δ avg [95% CI]':>22}  "
            f"{'pass@' + str(k) + ' A':>9} {'B':>6} {'gained':>6} {'lost':>5} {'McNemar p':>9}")
    lines = [f"paired comparison: B = {c['run_b']} vs A = {c['run_a']} (n={c['n']}; scores in %; "
             f"pass@{k} success = solved by one of the first {k} samples)", head, "-" * len(head)]

    def row(name: str, r: dict[str, Any], pa: str, pb: str) -> str:
        d = r["diff"]
        return (f"{name:<16} {r['problems']:>8}  {100 * r['average_a']:6.1f} {100 * r['average_b']:6.1f} "
                f"{100 * d['diff']:+6.1f} [{100 * d['lo']:+6.1f}, {100 * d['hi']:+6.1f}]  {pa:>9} {pb:>6} "
                f"{r['mcnemar']['gained']:>6} {r['mcnemar']['lost']:>5} {r['mcnemar']['p_value']:>9.3g}")

    for r in c["datasets"]:
        lines.append(row(r["dataset"], r, f"{100 * r['pass_a']:.1f}", f"{100 * r['pass_b']:.1f}"))
    lines.append("-" * len(head))
    lines.append(row("all (micro)", c["overall"], "", ""))
    for label, items in (("gained (B solves, A does not)", c["gained"]), ("lost (A solves, B does not)", c["lost"])):
        shown = ", ".join(items[:max_list]) + (f", … (+{len(items) - max_list})" if len(items) > max_list else "")
        lines.append(f"{label}: {len(items)}" + (f": {shown}" if items else ""))
    return "\n".join(lines)


def render_suspicious(store: Store, run_id: str, limit: int = 10) -> str:
    """A run's suspicious passes (the ``suspicious_passes`` view), each with the rules that list it
    (``prl.grading.relevance.flagged_by``) and the header stating every rule (``SUSPICION_RULES``)."""
    rows = store.records("suspicious_passes_for_run", run_id=run_id, limit=limit)
    if not rows:
        return f"suspicious passes in {run_id}: none (no correct sample is listed by any rule)"
    out = [f"suspicious passes in {run_id} (correct verdict, listed by one of these rules; first {len(rows)}):"]
    out += [f"  rule {rule.name}: {rule.says}" for rule in SUSPICION_RULES]
    for r in rows:
        pid, best = r["problem_id"], r["best_fit"]
        detail = {"answer_only": "answer_only", "fits_another": f"fits_another ({best})",
                  "low_relevance": f"low_relevance ({r['relevance']:.2f})"}
        why = ", ".join(detail[rule] for rule in flagged_by("correct", r["relevance"], r["answer_only"], best, pid))
        out.append(f"  {pid} sample {r['sample_idx']}: {why}; answer {json.dumps(r['extracted_answer'])}, "
                   f"{r['n_tokens']} tokens")
    return "\n".join(out)


SCORE_COLUMNS = ("run_id", "against", "dataset", "problems", "n", "metric", "value", "ci_lo", "ci_hi")
"""The columns of :func:`scores_table` (``prl report --format csv``)."""


def scores_table(scores: Sequence[dict[str, Any]], comparison: dict[str, Any] | None = None
                 ) -> tuple[tuple[str, ...], list[tuple]]:
    """(columns, rows): every figure of the report's score tables as one long table, one row per (run, data set or
    ``micro``/``macro``, metric) with its value and 95% CI (fractions, not %); a comparison adds B's rows against A
    (``against``: A) per data set and ``all``: ``diff average@n`` with its paired CI, ``pass@k A``/``pass@k B``,
    ``gained``, ``lost`` and ``mcnemar p``."""
    rows: list[tuple] = []
    for s in scores:
        for d in s["datasets"]:
            for name, m in d.items():
                if isinstance(m, dict):
                    rows.append((s["run_id"], None, d["dataset"], d["problems"], d["n"], name, m["value"], m["lo"],
                                 m["hi"]))
        for how, agg in s.get("aggregates", {}).items():
            size = s["problems"] if how == "micro" else len(s["datasets"])
            for name, m in agg.items():
                rows.append((s["run_id"], None, how, size, s["n"], name, m["value"], m["lo"], m["hi"]))
    if comparison:
        c, k = comparison, comparison["k"]
        for d in [*c["datasets"], {**c["overall"], "dataset": "all"}]:
            key = (c["run_b"], c["run_a"], d["dataset"], d["problems"], c["n"])
            rows.append((*key, f"diff average@{c['n']}", d["diff"]["diff"], d["diff"]["lo"], d["diff"]["hi"]))
            if "pass_a" in d:
                rows += [(*key, f"pass@{k} A", d["pass_a"], None, None), (*key, f"pass@{k} B", d["pass_b"], None, None)]
            rows += [(*key, f"pass@{k} gained", d["mcnemar"]["gained"], None, None),
                     (*key, f"pass@{k} lost", d["mcnemar"]["lost"], None, None),
                     (*key, "mcnemar p", d["mcnemar"]["p_value"], None, None)]
    return SCORE_COLUMNS, rows


def report(store: Store, runs: Sequence[str] | None = None, ks: Sequence[int] | None = None, *,
           include_paper: bool = True, as_json: bool = False, fmt: str | None = None) -> str:
    """The full text (or JSON) report: each run's scores and suspicious passes, and the paper's
    reference rows with the 5-Avg check.

    ``runs=None`` reports every run with samples and compares none of them (runs of one store are
    often evaluated on different data sets). Named runs (``--run A,B``, two or more) add the paired
    comparison of the second against the first; when the two share no problem the report says so
    in place of the comparison, and every run's tables are still printed.

    ``fmt``: ``table`` (the text, the default), ``json`` (``as_json``) or ``csv`` (:func:`scores_table`: the
    figures of the score and comparison tables; the paper's rows are ``prl.data.paper.paper_table``'s)."""
    fmt = fmt or ("json" if as_json else "table")
    asked_to_compare = runs is not None and len(runs) >= 2
    if runs is None:
        runs = [r["run_id"] for r in store.records("list_runs") if r["samples"]]
    scores = [run_scores(store, r, ks) for r in runs]
    comparison, no_comparison = None, None
    if asked_to_compare:
        try:
            comparison = compare_runs(store, runs[0], runs[1])
        except NothingToCompare as e:
            no_comparison = f"no paired comparison: {e}; there is nothing in common to compare."
    if fmt == "csv":
        from prl.store.readonly import render

        return render(*scores_table(scores, comparison), "csv")
    paper = load_paper_tables() if include_paper else []
    if fmt == "json":
        return json.dumps({"runs": scores, "comparison": comparison, "comparison_note": no_comparison,
                           "paper": [{"table": p.table, "metric": p.metric, "base_model": p.base_model,
                                      "method": p.method, "scores": p.scores, "reported_5avg": p.reported_5avg,
                                      "computed_5avg": p.computed_5avg, "macro": p.macro, "matches": p.matches}
                                     for p in paper]}, indent=2, default=float)
    parts = []
    if not runs:
        parts.append(f"no runs with samples in {store.path} yet (run `prl eval --db {store.path} …`)")
    for s in scores:
        parts.append(render_scores(s))
        parts.append(render_suspicious(store, s["run_id"]))
    if comparison:
        parts.append(render_comparison(comparison))
    if no_comparison:
        parts.append(no_comparison)
    if paper:
        parts.append("reference rows (the paper's Tables 1 and 3; not runs of this store):\n" + render_check(paper))
    return "\n\n".join(parts)
