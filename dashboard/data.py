"""The dashboard's data: every function takes the store path and returns DataFrames or dicts.

No SQL text here or in the pages: everything goes through the store's named queries
(``sql/queries.sql``) and ``prl.evaluation.report``. Each call opens a read-only connection for its
queries and closes it (``prl.store``), so the app never holds the file and never blocks a flow
that is writing; the pages cache results for a few seconds and show fresh rows on refresh.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from prl.data.datasets import Problem
from prl.grading.relevance import JUDGEMENTS, FitIndex, answer_only, fit_index, flagged_by, relevance
from prl.store.db import DEFAULT_STORE, Store, StoreError

DB_ENV = "PRL_DB"


def db_path() -> str:
    """The store the app shows (``prl dashboard --db PATH`` sets it)."""
    return os.environ.get(DB_ENV, DEFAULT_STORE)


def open_store(db: str) -> Store:
    if not Path(db).exists():
        raise StoreError(f"{db}: no such store yet. Create one with `prl eval --db {db} …` or `prl demo`.")
    return Store(db, create=False)


def store_version(db: str) -> tuple[tuple[int, int] | None, ...]:
    """What changes whenever the store's content does, read without opening it: the modification time and size
    of the store file and of its write-ahead log (every committed write changes one of them). The pages'
    cached results are keyed on it (``dashboard.ui.cached``)."""
    out: list[tuple[int, int] | None] = []
    for path in (Path(db), Path(f"{db}.wal")):
        try:
            stat = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append((stat.st_mtime_ns, stat.st_size))
    return tuple(out)


def _json(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return {}


# ─── runs ───────────────────────────────────────────────────────────────────────────────────

def runs(db: str) -> pd.DataFrame:
    """Every run with what a reader compares: model, estimator, η, split, step, sampling, status."""
    df = open_store(db).df("runs_full")
    rows = []
    for r in df.itertuples(index=False):
        cfg, man = _json(r.config), _json(r.manifest)
        algo = cfg.get("algorithm", {}) if r.kind == "train" else {}
        train = cfg.get("train", {}) if r.kind == "train" else {}
        sampling = man.get("sampling", {})
        rows.append({
            "run_id": r.run_id, "kind": r.kind, "status": r.status, "model": Path(str(r.model or "")).name or None,
            "estimator": algo.get("estimator"), "eta": algo.get("eta"), "step_split": algo.get("step_split"),
            "parent_run": r.parent_run_id, "step": r.train_step,
            "n": sampling.get("n", cfg.get("n")), "temperature": sampling.get("temperature", train.get("temperature")),
            "max_tokens": sampling.get("max_tokens", train.get("max_tokens")),
            "datasets": ", ".join(cfg.get("datasets", [])) if r.kind == "eval" else None,
            "samples": int(r.samples), "average": r.average, "created_at": r.created_at,
        })
    return pd.DataFrame(rows, columns=["run_id", "kind", "status", "model", "estimator", "eta", "step_split",
                                       "parent_run", "step", "n", "temperature", "max_tokens", "datasets", "samples",
                                       "average", "created_at"])


def run_manifest(db: str, run_id: str) -> dict[str, Any]:
    rows = open_store(db).records("get_run", run_id=run_id)
    if not rows:
        return {}
    return {"config": _json(rows[0]["config"]), "manifest": _json(rows[0]["manifest"])}




def paper_rows() -> pd.DataFrame:
    """The paper's Tables 1 and 3 as reference rows (clearly not runs of this store)."""
    from prl.data.paper import load_paper_tables

    return pd.DataFrame([{"source": f"paper Table {p.table}", "metric": p.metric, "model": p.base_model,
                          "method": p.method, **p.scores, "5 Avg (reported)": p.reported_5avg,
                          "micro (recomputed)": round(p.computed_5avg, 2), "macro": round(p.macro, 2),
                          "check": "ok" if p.matches else "MISMATCH"} for p in load_paper_tables()])


# ─── scores ────────────────────────────────────────────────────────────────────────────────

def scores(db: str, run_ids: list[str], k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (run, data set) and per (run, aggregate) average@n and pass@k with 95% CIs.

    Returns (datasets, aggregates) in long form: run_id, dataset/aggregate, problems, metric,
    value, lo, hi (fractions). k is clipped to each run's n.
    """
    from prl.evaluation.report import run_scores

    store = open_store(db)
    per_ds, agg = [], []
    for run_id in run_ids:
        sizes = store.records("dataset_metrics_for_run", run_id=run_id)
        if not sizes:
            continue
        kk = min(k, min(size["n"] for size in sizes))
        s = run_scores(store, run_id, [kk], iters=1000)
        names = [f"average@{s['n']}", f"pass@{kk}"]
        for row in s["datasets"]:
            for name in names:
                m = row[name]
                per_ds.append({"run_id": run_id, "dataset": row["dataset"], "problems": row["problems"],
                               "metric": name.split("@")[0], "k": int(name.split("@")[1]), **m})
        for how in ("micro", "macro"):
            for name in names:
                m = s["aggregates"][how][name]
                agg.append({"run_id": run_id, "aggregate": how, "problems": s["problems"],
                            "datasets": len(s["datasets"]), "metric": name.split("@")[0],
                            "k": int(name.split("@")[1]), **m})
    cols = ["run_id", "dataset", "problems", "metric", "k", "value", "lo", "hi"]
    return pd.DataFrame(per_ds, columns=cols), pd.DataFrame(
        agg, columns=["run_id", "aggregate", "problems", "datasets", "metric", "k", "value", "lo", "hi"])


def pass_at_k_curve(db: str, run_ids: list[str]) -> pd.DataFrame:
    """Micro-averaged unbiased pass@k for every k ≤ n of each run: run_id, k, value."""
    from prl.evaluation.report import load_run, per_problem
    from prl_core.metrics import micro_macro

    store = open_store(db)
    rows = []
    for run_id in run_ids:
        run = load_run(store, run_id)
        for k in range(1, run.n + 1):
            rows.append({"run_id": run_id, "k": k, "value": micro_macro(per_problem(run, "pass", k))["micro"]})
    return pd.DataFrame(rows, columns=["run_id", "k", "value"])


# ─── compare ───────────────────────────────────────────────────────────────────────────────

def compare(db: str, run_a: str, run_b: str) -> dict[str, Any]:
    """B vs A: per-data-set deltas with paired CIs, success-set counts, per-problem success rates."""
    from prl.evaluation.report import compare_runs

    store = open_store(db)
    c = compare_runs(store, run_a, run_b, iters=1000)
    deltas = pd.DataFrame([{"dataset": r["dataset"], "problems": r["problems"], "average_a": r["average_a"],
                            "average_b": r["average_b"], "diff": r["diff"]["diff"], "lo": r["diff"]["lo"],
                            "hi": r["diff"]["hi"], "gained": r["mcnemar"]["gained"], "lost": r["mcnemar"]["lost"],
                            "p_value": r["mcnemar"]["p_value"]} for r in c["datasets"]])
    out = store.df("outcomes_for_runs", run_ids=[run_a, run_b])
    a = out[out.run_id == run_a].set_index(["dataset", "problem_id"])
    b = out[out.run_id == run_b].set_index(["dataset", "problem_id"])
    both = a.join(b, suffixes=("_a", "_b"), how="inner").reset_index()
    both["rate_a"] = both["c_a"] / both["n_a"]
    both["rate_b"] = both["c_b"] / both["n_b"]
    solved_a, solved_b = both["c_a"] > 0, both["c_b"] > 0
    both["outcome"] = "neither"
    both.loc[solved_a & solved_b, "outcome"] = "both"
    both.loc[~solved_a & solved_b, "outcome"] = "gained"
    both.loc[solved_a & ~solved_b, "outcome"] = "lost"
    sets = (both.groupby(["dataset", "outcome"]).size().unstack(fill_value=0)
            .reindex(columns=["gained", "lost", "both", "neither"], fill_value=0).reset_index())
    return {"summary": c, "deltas": deltas, "sets": sets,
            "problems": both[["dataset", "problem_id", "rate_a", "rate_b", "outcome"]]}


# ─── problem ───────────────────────────────────────────────────────────────────────────────

def problem_choices(db: str, run_ids: list[str]) -> pd.DataFrame:
    return open_store(db).df("problem_ids_for_runs", run_ids=run_ids)


def problem(db: str, dataset: str, problem_id: str, run_ids: list[str]) -> tuple[dict[str, Any] | None, pd.DataFrame]:
    store = open_store(db)
    rows = store.records("problem_row", dataset=dataset, problem_id=problem_id)
    info = None
    if rows:
        row = rows[0]
        info = {"dataset": row["dataset"], "problem_id": row["problem_id"], "problem": row["problem"],
                "gold_raw": row["gold"], "gold_normalized": row["gold_normalized"], "meta": _json(row["meta"])}
    return info, store.df("samples_for_problem", dataset=dataset, problem_id=problem_id, run_ids=run_ids)


# ─── failures ──────────────────────────────────────────────────────────────────────────────

def verdict_counts(db: str, run_ids: list[str]) -> pd.DataFrame:
    return open_store(db).df("verdict_counts_for_runs", run_ids=run_ids)


def samples_by_verdict(db: str, run_ids: list[str], verdict: str, limit: int = 200) -> pd.DataFrame:
    return open_store(db).df("samples_by_verdict", run_ids=run_ids, verdict=verdict, limit=limit)


def _value(x: Any) -> Any:
    """A DataFrame cell as Python: NaN / NA → None, numpy scalars → Python scalars."""
    if x is None or (not isinstance(x, str) and pd.isna(x)):
        return None
    return x.item() if hasattr(x, "item") else x


def _judgements(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """The judgements of the runs' samples (none in a store written before the table existed)."""
    if not store.rows("has_judgements")[0][0]:
        return pd.DataFrame(columns=["run_id", "dataset", "problem_id", "sample_idx", "judgement", "flagged_by", "note",
                                     "judged_at"])
    return store.df("judgements_for_runs", run_ids=run_ids)


def suspicious_passes(db: str, run_ids: list[str], limit: int = 200) -> pd.DataFrame:
    """The runs' suspicious passes (the ``suspicious_passes`` view), each with the rules that list it
    (``flagged_by``, from ``prl.grading.relevance.flagged_by``) and its researcher's judgement, if any."""
    store = open_store(db)
    df = store.df("suspicious_passes_for_runs", run_ids=run_ids, limit=limit)
    df.insert(4, "flagged_by", [", ".join(flagged_by("correct", _value(r.relevance), _value(r.answer_only),
                                                     _value(r.best_fit), r.problem_id))
                                for r in df.itertuples(index=False)])
    keys = ["run_id", "dataset", "problem_id", "sample_idx"]
    judged = _judgements(store, run_ids)[keys + ["judgement"]]
    if judged.empty:  # a typed empty frame: merging an all-object one would turn sample_idx into objects
        df.insert(5, "judgement", pd.Series([None] * len(df), dtype=object))
        return df
    out = df.merge(judged, on=keys, how="left")
    out["judgement"] = out["judgement"].astype(object).where(out["judgement"].notna(), None)
    return out[list(df.columns[:5]) + ["judgement"] + list(df.columns[5:])]


def _fit_index(store: Store, dataset: str) -> FitIndex | None:
    """The fit index the sample's ``best_fit`` was computed with: the bundled benchmark's, else one over the problems
    the store holds of that data set (a user file's)."""
    known = fit_index(dataset)
    if known is not None:
        return known
    rows = store.records("problems_of_dataset", dataset=dataset)
    return FitIndex([Problem(r["dataset"], r["problem_id"], r["problem"], r["gold_normalized"], r["gold"],
                             _json(r["meta"])) for r in rows]) if rows else None


def suspicious_case(db: str, run_id: str, dataset: str, problem_id: str, sample_idx: int) -> dict[str, Any] | None:
    """One suspicious pass as the Appendix-C case view shows it (None if the sample is not listed):

    ``asked`` and ``best`` ({problem_id, problem, gold}): the problem asked and the one the reasoning fits best
    (the stored ``best_fit`` where it names another problem, else the closest rival the fit finds now, shown
    with ``best_is_rival``); the response and the verdict's fields; ``flagged_by`` (the stored signals, the
    rules that list it in the store) and ``flagged_now`` (the same rules with the fit and answer-only test
    computed again with the current code); ``fit`` (own fit, rival fit, their ratio and the threshold
    ``1 + margin``); the researcher's ``judgement`` and ``note``."""
    store = open_store(db)
    rows = store.records("suspicious_case", run_id=run_id, dataset=dataset, problem_id=problem_id,
                         sample_idx=int(sample_idx))
    if not rows:
        return None
    r = rows[0]
    index = _fit_index(store, dataset)
    fit = index.fit_case(problem_id, r["response"]) if index is not None else None
    stored_best = r["best_fit"]
    best_id = stored_best if stored_best not in (None, problem_id) else (fit.rival if fit is not None else None)
    best = None
    if best_id is not None:
        found = index.problem(best_id) if index is not None else None
        if found is not None:
            best = {"problem_id": best_id, "problem": found.problem, "gold": found.gold_normalized}
        else:
            stored = store.records("problem_row", dataset=dataset, problem_id=best_id)
            best = ({"problem_id": best_id, "problem": stored[0]["problem"], "gold": stored[0]["gold_normalized"]}
                    if stored else {"problem_id": best_id, "problem": None, "gold": None})
    now_best = fit.best_fit if fit is not None else None
    judged = _judgements(store, [run_id])
    judged = judged[(judged["dataset"] == dataset) & (judged["problem_id"] == problem_id)
                    & (judged["sample_idx"] == int(sample_idx))]
    return {
        "run_id": run_id, "dataset": dataset, "problem_id": problem_id, "sample_idx": int(sample_idx),
        "asked": {"problem_id": problem_id, "problem": r["problem"], "gold": r["gold_normalized"]},
        "best": best, "best_is_rival": best is not None and stored_best in (None, problem_id),
        "response": r["response"], "extracted_answer": r["extracted_answer"], "verdict": r["verdict"],
        "n_tokens": r["n_tokens"], "relevance": r["relevance"], "answer_only": r["answer_only"], "best_fit": stored_best,
        "flagged_by": flagged_by("correct", r["relevance"], r["answer_only"], stored_best, problem_id),
        "flagged_now": flagged_by("correct", relevance(r["problem"], r["response"]) if r["problem"] else r["relevance"],
                                  answer_only(r["response"]), now_best, problem_id),
        "fit": None if fit is None else {"own": fit.own_fit, "rival": fit.rival, "rival_fit": fit.rival_fit,
                                         "ratio": fit.ratio, "threshold": 1 + fit.margin, "best_fit": fit.best_fit},
        "judgement": _value(judged["judgement"].iloc[0]) if len(judged) else None,
        "note": _value(judged["note"].iloc[0]) if len(judged) else None,
    }


def judge(db: str, run_id: str, dataset: str, problem_id: str, sample_idx: int, judgement: str | None,
          note: str | None = None) -> None:
    """The dashboard's one write: a researcher's judgement of a suspicious pass (one of
    ``prl.grading.relevance.JUDGEMENTS``; None withdraws it), with the rules that list the sample, through
    ``Store.set_judgement`` (the store's writer path and lock). The samples are never changed."""
    if judgement is not None and judgement not in JUDGEMENTS:
        raise ValueError(f"judgement: {judgement!r} is not one of {', '.join(JUDGEMENTS)}")
    store = open_store(db)
    rows = store.records("suspicious_case", run_id=run_id, dataset=dataset, problem_id=problem_id,
                         sample_idx=int(sample_idx))
    rules = (", ".join(flagged_by("correct", rows[0]["relevance"], rows[0]["answer_only"], rows[0]["best_fit"],
                                  problem_id)) if rows else None)
    store.set_judgement(run_id, dataset, problem_id, int(sample_idx), judgement, flagged_by=rules,
                        note=(note or None))


# ─── training ──────────────────────────────────────────────────────────────────────────────



def train_metrics(db: str, run_ids: list[str]) -> pd.DataFrame:
    return open_store(db).df("train_metrics_for_runs", run_ids=run_ids)


def eval_points(db: str, run_ids: list[str]) -> pd.DataFrame:
    return open_store(db).df("eval_points_for_runs", run_ids=run_ids)


def rollout_steps(db: str, run_id: str) -> list[int]:
    return [r["step"] for r in open_store(db).records("rollout_steps_for_run", run_id=run_id)]


def rollouts(db: str, run_id: str, step: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The inspected rollouts of a step and their segments (start/end token, S, ρ)."""
    store = open_store(db)
    ro = store.df("rollouts_for_run_step", run_id=run_id, step=step)
    segs = store.df("segments_for_run", run_id=run_id)
    return ro, segs[segs["step"] == step]


# ─── agreement ──────────────────────────────────────────────────────────────────────────────

def agreement(db: str, run_id: str, against: str | None = None) -> dict[str, Any]:
    """Our verdicts in ``run_id`` against its source's labels (``against`` None) or another run
    (``prl.evaluation.agreement``), with the disagreements as a DataFrame under "rows"."""
    from prl.evaluation.agreement import agreement as compute

    result = compute(open_store(db), run_id, against)
    result["rows"] = pd.DataFrame(result.pop("disagreements"),
                                  columns=["dataset", "problem_id", "sample_idx", "verdict", "extracted_answer",
                                           "other_verdict", "other_answer", "gold", "other_gold", "problem",
                                           "response", "verdict_detail", "source_ref"])
    result["unmatched"] = pd.DataFrame(result["unmatched"], columns=["ref", "reason", "excerpt"])
    return result


# ─── studies ────────────────────────────────────────────────────────────────────────────────

def studies(db: str) -> pd.DataFrame:
    """Every study in the store: id, created_at, status, jobs, finished."""
    return open_store(db).df("list_studies")


def study(db: str, study_id: str) -> dict[str, Any]:
    """The study's report (``prl.studies.report.study_report``): the same figures as ``prl report --study``."""
    from prl.studies.report import study_report

    return study_report(open_store(db), study_id)
