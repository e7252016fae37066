"""The study report (``prl report --study ID``, the ``study`` flow's artifact, the dashboard's Study page).

From the store alone (the study's cells and their runs), per cell:

* average@n and pass@k for k = 1..n on the held-out evaluation, micro-averaged over problems, with a
  95% CI **across seeds** (Student t over the seeds' values: seeds are the unit of replication) and a
  95% CI **across problems** (percentile bootstrap over problems of the seed-averaged per-problem value);
* a **seed-matched paired comparison** with the baseline cell: for each seed both ran, the difference of
  their average@n on the problems both evaluated; the mean difference with its t CI across seeds (and a
  paired bootstrap over problems), and a note when the CI includes 0;
* reward and KL-to-reference over training (the seeds' mean per step), and the η sweep of the PRL cells
  that differ from each other only in η;
* the cells' stored training configs, compared key by key: every key that differs between cells, and any
  that differs where the study did not vary it (which would make the comparison unfair).
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from prl_core.metrics import average_at_k, bootstrap_ci, paired_bootstrap_diff, pass_at_k, seed_ci

from prl.evaluation.report import ReportError
from prl.store.db import Store
from prl.studies.config import config_differences, implied_keys


class StudyNotFound(ReportError):
    """No study of that id in the store."""


def _outcomes(store: Store, study_id: str) -> dict[tuple[str, int], dict[tuple[str, str], tuple[int, int]]]:
    """{(cell, seed): {(dataset, problem_id): (n, c)}} of the finished evaluations."""
    out: dict[tuple[str, int], dict[tuple[str, str], tuple[int, int]]] = defaultdict(dict)
    for r in store.records("study_problem_outcomes", study_id=study_id):
        out[(r["cell"], r["seed"])][(r["dataset"], r["problem_id"])] = (int(r["n"]), int(r["c"]))
    return out


def _metric(problems: dict[tuple[str, str], tuple[int, int]], keys: list[tuple[str, str]], k: int | None
            ) -> torch.Tensor:
    """Per-problem value (P,) on ``keys``: average@n (k None) or pass@k."""
    n = torch.tensor([problems[p][0] for p in keys])
    c = torch.tensor([problems[p][1] for p in keys], dtype=torch.float64)
    return average_at_k(c, n) if k is None else pass_at_k(c, n, k)


def _ci_row(cell: str, metric: str, per_seed: dict[int, torch.Tensor]) -> dict[str, Any]:
    seeds = sorted(per_seed)
    s = seed_ci([float(per_seed[x].mean()) for x in seeds])
    pooled = torch.stack([per_seed[x] for x in seeds]).mean(dim=0)
    plo, phi = bootstrap_ci(pooled)
    return {"cell": cell, "metric": metric, "mean": s["mean"], "seed_lo": s["lo"], "seed_hi": s["hi"],
            "seed_sd": s["sd"], "problem_lo": plo, "problem_hi": phi, "seeds": len(seeds),
            "per_seed": {str(x): float(per_seed[x].mean()) for x in seeds}, "problems": int(pooled.numel())}


def study_report(store: Store, study_id: str) -> dict[str, Any]:
    """Everything the report shows, computed from the stored rows of the study ``study_id``."""
    found = store.records("get_study", study_id=study_id)
    if not found:
        known = [r["study_id"] for r in store.records("list_studies")]
        raise StudyNotFound(f"study {study_id!r} is not in {store.path}; studies there: {', '.join(known) or 'none'}")
    config = json.loads(found[0]["config"] or "{}")
    cells = [c["name"] for c in config.get("cells", [])]
    varied = {c["name"]: set(c.get("varied", [])) for c in config.get("cells", [])}
    baseline = config["study"]["baseline"]
    seeds = list(config["study"]["seeds"])
    jobs = store.records("study_cells_for_study", study_id=study_id)
    outcomes = _outcomes(store, study_id)

    # one problem set for every figure: the problems every finished (cell, seed) evaluated
    finished = sorted(outcomes)
    common = sorted(set.intersection(*(set(outcomes[j]) for j in finished))) if finished else []
    n = min((outcomes[j][p][0] for j in finished for p in common), default=0)

    per_cell: list[dict[str, Any]] = []
    values: dict[str, dict[int, torch.Tensor]] = {}
    for cell in cells:
        runs = {s: outcomes[(cell, s)] for s in seeds if (cell, s) in outcomes}
        if not runs or not common:
            continue
        values[cell] = {s: _metric(p, common, None) for s, p in runs.items()}
        per_cell.append(_ci_row(cell, f"average@{n}", values[cell]))
        for k in range(1, n + 1):
            per_cell.append(_ci_row(cell, f"pass@{k}", {s: _metric(p, common, k) for s, p in runs.items()}))

    paired: list[dict[str, Any]] = []
    for cell in cells:
        if cell == baseline or cell not in values or baseline not in values:
            continue
        both = sorted(set(values[cell]) & set(values[baseline]))
        if not both:
            continue
        diffs = {s: float(values[cell][s].mean() - values[baseline][s].mean()) for s in both}
        s = seed_ci(list(diffs.values()))
        a = torch.stack([values[baseline][x] for x in both]).mean(dim=0)
        b = torch.stack([values[cell][x] for x in both]).mean(dim=0)
        prob = paired_bootstrap_diff(a, b)
        includes_zero = not (s["lo"] > 0 or s["hi"] < 0)  # NaN (one seed) counts as including 0
        paired.append({"cell": cell, "baseline": baseline, "metric": f"average@{n}", "seeds": len(both),
                       "per_seed": {str(k): v for k, v in diffs.items()}, "diff": s["mean"], "lo": s["lo"],
                       "hi": s["hi"], "problem_lo": prob["lo"], "problem_hi": prob["hi"],
                       "includes_zero": includes_zero,
                       "note": ("the CI across seeds includes 0: no difference shown at this number of seeds"
                                if includes_zero else ("better than" if s["mean"] > 0 else "worse than")
                                + f" {baseline} on every reading of the CI across seeds")})

    curves = [dict(r) for r in store.records("study_train_curves", study_id=study_id)]

    stored = {}
    for j in jobs:
        if j["train_config"] and j["cell"] not in stored:
            cfg = json.loads(j["train_config"])
            stored[j["cell"]] = {"algorithm": cfg.get("algorithm", {}), "train": cfg.get("train", {})}
    diffs = config_differences(stored)
    allowed = implied_keys(set().union(*varied.values())) if varied else set()
    undeclared = sorted(k for k in diffs if k not in allowed)

    eta = _eta_sweep(per_cell, stored, varied, f"average@{n}")
    claims = _claims(store, study_id, config.get("claims") or [], outcomes, common, n)
    return {"study_id": study_id, "status": found[0]["status"], "baseline": baseline, "seeds": seeds,
            "cells": cells, "n": n, "problems": len(common),
            "datasets": sorted({d for d, _ in common}),
            "jobs": [{k: j[k] for k in ("cell", "seed", "train_run_id", "eval_run_id", "status")} for j in jobs],
            "per_cell": per_cell, "paired": paired, "curves": curves, "eta_sweep": eta,
            "config_differences": diffs, "undeclared_differences": undeclared, "claims": claims,
            "manifest": json.loads(found[0]["manifest"] or "{}")}


VERDICTS = ("holds here", "not shown at this scale", "contradicted")
"""A claim's verdict: the seed-matched 95% CI of the difference excludes 0 in the claimed direction against every
compared cell / includes 0 somewhere (and nowhere excludes it the other way) / excludes 0 the other way somewhere."""


def _claims(store: Store, study_id: str, claims: list[dict[str, Any]], outcomes, common, n: int) -> list[dict[str, Any]]:
    """Each claim of the study file with its comparisons (cell − other, seed by seed) and its verdict."""
    if not claims:
        return []
    names = sorted({c["metric"] for c in claims if "@" not in c["metric"]})
    run_metrics: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for r in store.records("study_run_metrics", study_id=study_id, names=names) if names else []:
        if r["value"] is not None:
            run_metrics[(r["cell"], r["seed"])][r["name"]] = float(r["value"])

    def per_seed(cell: str, metric: str) -> dict[int, Any]:
        if "@" in metric:  # an evaluation figure: per-problem values on the common problems
            k = None if metric.startswith("average@") else int(metric.split("@")[1])
            return {s: _metric(p, common, k) for (c, s), p in outcomes.items() if c == cell and common}
        return {s: m[metric] for (c, s), m in run_metrics.items() if c == cell and metric in m}

    out = []
    for c in claims:
        want = 1.0 if c["higher"] else -1.0
        mine = per_seed(c["cell"], c["metric"])
        rows = []
        for other in c["against"]:
            theirs = per_seed(other, c["metric"])
            both = sorted(set(mine) & set(theirs))
            value = (lambda v: float(v.mean())) if "@" in c["metric"] else float
            diffs = {s: value(mine[s]) - value(theirs[s]) for s in both}
            ci = seed_ci(list(diffs.values()))
            row = {"against": other, "seeds": len(both), "per_seed": {str(s): d for s, d in diffs.items()},
                   "diff": ci["mean"], "lo": ci["lo"], "hi": ci["hi"],
                   "cell_mean": seed_ci([value(mine[s]) for s in both])["mean"] if both else math.nan,
                   "against_mean": seed_ci([value(theirs[s]) for s in both])["mean"] if both else math.nan}
            if "@" in c["metric"] and both:
                prob = paired_bootstrap_diff(torch.stack([theirs[s] for s in both]).mean(0),
                                             torch.stack([mine[s] for s in both]).mean(0))
                row.update(problem_lo=prob["lo"], problem_hi=prob["hi"])
            lo, hi = sorted((want * ci["lo"], want * ci["hi"]))  # the CI in the claimed direction (NaN: one seed)
            row["reading"] = "claimed direction" if lo > 0 else "opposite direction" if hi < 0 else "includes 0"
            rows.append(row)
        if not rows or any(r["seeds"] < 2 for r in rows):
            verdict = "not shown at this scale"
        elif any(r["reading"] == "opposite direction" for r in rows):
            verdict = "contradicted"
        elif all(r["reading"] == "claimed direction" for r in rows):
            verdict = "holds here"
        else:
            verdict = "not shown at this scale"
        out.append({**c, "comparisons": rows, "verdict": verdict})
    return out


def _eta_sweep(per_cell: list[dict[str, Any]], stored: dict[str, dict], varied: dict[str, set[str]],
               metric: str) -> list[dict[str, Any]]:
    """average@n against η for the PRL cells that vary η and nothing else besides what they share."""
    rows = []
    for r in per_cell:
        cfg = stored.get(r["cell"])
        if r["metric"] != metric or not cfg or cfg["algorithm"].get("estimator") != "prl":
            continue
        if "algorithm.eta" not in varied.get(r["cell"], set()):
            continue
        eta = cfg["algorithm"].get("eta")
        eta = math.inf if eta in ("inf", None) else float(eta)
        rows.append({"cell": r["cell"], "eta": eta, "mean": r["mean"], "seed_lo": r["seed_lo"],
                     "seed_hi": r["seed_hi"], "split": cfg["algorithm"].get("step_split"),
                     "order": cfg["algorithm"].get("order")})
    # a sweep is the cells sharing split and order; keep the largest such group
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[(r["split"], r["order"])].append(r)
    best = max(groups.values(), key=len, default=[])
    return sorted(best, key=lambda r: r["eta"]) if len(best) >= 2 else []


CANNOT_SHOW = (
    "What this study can show: differences between cells larger than the CI across its seeds, on the data "
    "it evaluates. What it cannot: a difference smaller than that CI (with 3 seeds the t quantile is 4.30, "
    "so CIs are wide), anything about other models, tasks or response lengths than the ones trained here, "
    "and, on the embedded default, anything about the paper's numbers (a 0.85 M-parameter model on a "
    "synthetic arithmetic task, ~30-token responses, a few dozen steps).")


def _f(x: float | None, pct: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.1f}" if pct else f"{x:.3g}"


def _cell(text: str) -> str:
    """A value as a Markdown table cell: a '|' in it would end the cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(rep: dict[str, Any], *, embedded: bool = False) -> str:
    """The report as Markdown (the Prefect artifact and ``prl report --study``'s file)."""
    done = sum(j["status"] == "finished" for j in rep["jobs"])
    lines = [f"# Study `{rep['study_id']}`", "",
             f"{len(rep['cells'])} cells × {len(rep['seeds'])} seeds ({done} of {len(rep['jobs'])} finished); "
             f"baseline `{rep['baseline']}`; {rep['problems']} held-out problems "
             f"({', '.join(rep['datasets']) or '–'}), n = {rep['n']} samples each. Percentages; "
             "CIs are 95%: *seeds* = Student t across seeds, *problems* = bootstrap across problems.", ""]
    metrics = [m for m in dict.fromkeys(r["metric"] for r in rep["per_cell"])]
    lines += ["## Per cell", "", "| cell | seeds | " + " | ".join(metrics) + " |",
              "|---|---|" + "---|" * len(metrics)]
    by = {(r["cell"], r["metric"]): r for r in rep["per_cell"]}
    for cell in rep["cells"]:
        rows = [by.get((cell, m)) for m in metrics]
        if not any(rows):
            lines.append(f"| {cell} | 0 |" + " – |" * len(metrics))
            continue
        cells = [f"{_f(r['mean'])} [{_f(r['seed_lo'])}, {_f(r['seed_hi'])}] (problems [{_f(r['problem_lo'])}, "
                 f"{_f(r['problem_hi'])}])" if r else "–" for r in rows]
        lines.append(f"| {cell} | {rows[0]['seeds'] if rows[0] else 0} | " + " | ".join(cells) + " |")
    lines += ["", f"## Each cell against `{rep['baseline']}`, seed by seed", "",
              "| cell | seeds | per-seed difference | mean difference [CI seeds] | [CI problems] | reading |",
              "|---|---|---|---|---|---|"]
    for p in rep["paired"]:
        per = ", ".join(f"s{s}: {_f(v)}" for s, v in p["per_seed"].items())
        lines.append(f"| {p['cell']} | {p['seeds']} | {per} | {_f(p['diff'])} [{_f(p['lo'])}, {_f(p['hi'])}] | "
                     f"[{_f(p['problem_lo'])}, {_f(p['problem_hi'])}] | {p['note']} |")
    if rep.get("claims"):
        lines += ["", "## Claims tested", "",
                  "Each claim's cell against each compared cell, seed by seed (difference = cell − other, 95% CI "
                  "across seeds; pass@k and average also across problems). *holds here*: the CI excludes 0 in the "
                  "claimed direction against every compared cell; *contradicted*: it excludes 0 the other way "
                  "against one; else *not shown at this scale*.", "",
                  "| claim | metric | against | cell / other (mean over seeds) | difference [CI seeds] | "
                  "[CI problems] | verdict |", "|---|---|---|---|---|---|---|"]
        for c in rep["claims"]:
            pct = "@" in c["metric"]
            for i, r in enumerate(c["comparisons"]):
                prob = (f"[{_f(r['problem_lo'])}, {_f(r['problem_hi'])}]" if "problem_lo" in r else "–")
                lines.append(f"| {_cell(c['text']) if i == 0 else ''} | {c['metric']} | {r['against']} | "
                             f"{_f(r['cell_mean'], pct)} / {_f(r['against_mean'], pct)} | {_f(r['diff'], pct)} "
                             f"[{_f(r['lo'], pct)}, {_f(r['hi'], pct)}] | {prob} | "
                             f"{('**' + c['verdict'] + '**') if i == 0 else ''} |")
    if rep["eta_sweep"]:
        lines += ["", "## η sweep", "", "| η | cell | average [CI seeds] |", "|---|---|---|"]
        for r in rep["eta_sweep"]:
            lines.append(f"| {r['eta']:g} | {r['cell']} | {_f(r['mean'])} [{_f(r['seed_lo'])}, {_f(r['seed_hi'])}] |")
    lines += ["", "## What differs between the cells (their stored training configs)", ""]
    if rep["config_differences"]:
        cells = rep["cells"]
        lines += ["| key | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]
        for k, vals in rep["config_differences"].items():
            lines.append(f"| {k} | " + " | ".join(_cell(json.dumps(vals.get(c), default=str)) for c in cells) + " |")
    else:
        lines.append("Nothing: the cells' stored configs are identical.")
    lines.append("")
    lines.append("**Every difference is one the study declares.**" if not rep["undeclared_differences"] else
                 f"**WARNING: {', '.join(rep['undeclared_differences'])} differ between cells although the study "
                 "does not vary them: the comparison is not like for like.**")
    if embedded:
        lines += ["", "## What this study can and cannot show", "", CANNOT_SHOW]
    return "\n".join(lines) + "\n"


def render_html(rep: dict[str, Any], figures: list[Any], *, embedded: bool = False) -> str:
    """A self-contained HTML page: the Markdown's headings, paragraphs and tables (every value escaped)
    and the charts (Plotly, its script inlined once)."""
    def text(x: str) -> str:
        return html.escape(x.replace("**", "").replace("`", ""))

    body: list[str] = []
    table: list[str] = []
    for line in render_markdown(rep, embedded=embedded).splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                tag = "th" if not table else "td"
                table.append("<tr>" + "".join(f"<{tag}>{text(c.strip())}</{tag}>"
                                              for c in line.strip().strip("|").split("|")) + "</tr>")
            continue
        if table:
            body.append("<table>" + "".join(table) + "</table>")
            table = []
        if line.startswith("# "):
            body.append(f"<h1>{text(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{text(line[3:])}</h2>")
        elif line.strip():
            body.append(f"<p>{text(line)}</p>")
    charts = [f.to_html(full_html=False, include_plotlyjs=(True if i == 0 else False)) for i, f in enumerate(figures)]
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px}"
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Study " + html.escape(rep["study_id"])
            + f"</title><style>{style}</style></head><body>" + "\n".join(body) + "\n".join(charts) + "</body></html>\n")


def write_report(study_id: str, db: str | Path, out_dir: str | Path, *, embedded: bool = False) -> dict[str, Any]:
    """study_report.{md,html,json} in ``out_dir`` from the store; returns the report with the paths
    (``files``) and its Markdown (``markdown``)."""
    from prl.studies.charts import report_figures  # plotly: only when a report is written

    rep = study_report(Store(db, create=False), study_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = render_markdown(rep, embedded=embedded)
    (out / "study_report.md").write_text(md, encoding="utf-8")
    (out / "study_report.html").write_text(render_html(rep, report_figures(rep), embedded=embedded),
                                           encoding="utf-8")
    (out / "study_report.json").write_text(json.dumps(rep, indent=2, default=str) + "\n", encoding="utf-8")
    rep["files"] = {k: str(out / f"study_report.{k}") for k in ("md", "html", "json")}
    rep["markdown"] = md
    return rep
