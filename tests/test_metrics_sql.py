"""The per-problem metrics of ``prl_core.metrics`` (what both reports compute) equal the store's SQL
views (``problem_outcomes``, ``dataset_metrics`` in sql/schema.sql) on the same rows: rows an
evaluation run stored through the project's own code (the warm-started tiny model, the
transformers engine, Math-Verify workers), not hand-written ones."""

from __future__ import annotations

import pytest
import torch

from prl_core.metrics import average_at_k, pass_at_k

from prl.evaluation.config import EvalConfig
from prl.evaluation.evaluate import run_evaluation
from prl.evaluation.report import load_run, run_scores
from prl.store.db import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def evaluated(warm_model, tmp_path_factory):
    """(store, run id) of a small evaluation of the warm start, stored by run_evaluation."""
    model, _ = warm_model
    db = str(tmp_path_factory.mktemp("metrics-sql") / "store.duckdb")
    cfg = EvalConfig(model=str(model), datasets=("synth_test:24",), n=4, db=db, engine="hf", max_tokens=96,
                     verifier_workers=1, chunk_problems=24)
    summary = run_evaluation(cfg, progress=False, log=lambda _m: None)
    return Store(db, create=False), summary["run_id"]


def _python_outcomes(store: Store, run_id: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(n, c) per problem from the samples as the evaluation report reads them (answers_for_run)."""
    run = load_run(store, run_id)
    return {(d, p): (len(s), sum(ok for _, ok in s)) for d, problems in run.by_dataset.items()
            for p, s in problems.items()}


def _sql(store: Store, run_id: str, view: str) -> list[dict]:
    with store.read() as con:
        cur = con.execute(f"select * from {view} where run_id = ? order by all", [run_id])
        names = [c[0] for c in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def test_the_runs_outcomes_are_mixed(evaluated):
    store, run_id = evaluated
    outcomes = _python_outcomes(store, run_id)
    assert len(outcomes) == 24 and {n for n, _ in outcomes.values()} == {4}
    assert 0 < sum(c for _, c in outcomes.values()) < 24 * 4  # neither all right nor all wrong: a real check


def test_per_problem_average_is_the_problem_outcomes_view(evaluated):
    store, run_id = evaluated
    outcomes = _python_outcomes(store, run_id)
    view = {(r["dataset"], r["problem_id"]): r for r in _sql(store, run_id, "problem_outcomes")}
    assert set(view) == set(outcomes)
    keys = sorted(outcomes)
    n = torch.tensor([outcomes[k][0] for k in keys])
    c = torch.tensor([outcomes[k][1] for k in keys], dtype=torch.float64)
    assert [(view[k]["n"], view[k]["c"]) for k in keys] == [outcomes[k] for k in keys]
    assert average_at_k(c, n).tolist() == pytest.approx([view[k]["average"] for k in keys], abs=1e-15)


def test_dataset_average_and_pass_at_n_are_the_dataset_metrics_view(evaluated):
    store, run_id = evaluated
    [row] = _sql(store, run_id, "dataset_metrics")
    outcomes = _python_outcomes(store, run_id)
    n = torch.tensor([v[0] for _, v in sorted(outcomes.items())])
    c = torch.tensor([v[1] for _, v in sorted(outcomes.items())], dtype=torch.float64)
    assert (row["problems"], row["n"]) == (len(outcomes), int(n.min()))
    assert float(average_at_k(c, n).mean()) == pytest.approx(row["average_at_n"], abs=1e-12)
    assert float(pass_at_k(c, n, row["n"]).mean()) == pytest.approx(row["pass_at_n"], abs=1e-12)
    # and the report's figures (prl report, the dashboard's Scores page) are the same numbers
    [scores] = run_scores(store, run_id, ks=[1, row["n"]], iters=50)["datasets"]
    assert scores[f"average@{row['n']}"]["value"] == pytest.approx(row["average_at_n"], abs=1e-12)
    assert scores[f"pass@{row['n']}"]["value"] == pytest.approx(row["pass_at_n"], abs=1e-12)


def test_a_problem_with_fewer_samples_still_agrees(evaluated, tmp_path):
    """A run in progress has problems with fewer samples: average@n per problem is c / its own n in both."""
    store, run_id = evaluated
    copy = Store(str(tmp_path / "partial.duckdb"))
    with store.read() as con:
        rows = con.execute("select * from samples where run_id = ? order by all", [run_id]).fetchall()
        names = [d[0] for d in con.description]
    keep = [dict(zip(names, r)) for i, r in enumerate(rows) if not (i % 7 == 3)]  # drop some samples
    copy.execute("upsert_run", run_id=run_id, kind="eval", model="m", status="running", config={}, manifest={},
                 parent_run_id=None, train_step=None)
    copy.insert_samples(keep)
    outcomes = _python_outcomes(copy, run_id)
    assert len({n for n, _ in outcomes.values()}) > 1
    view = {(r["dataset"], r["problem_id"]): r for r in _sql(copy, run_id, "problem_outcomes")}
    keys = sorted(outcomes)
    n = torch.tensor([outcomes[k][0] for k in keys])
    c = torch.tensor([outcomes[k][1] for k in keys], dtype=torch.float64)
    assert average_at_k(c, n).tolist() == pytest.approx([view[k]["average"] for k in keys], abs=1e-15)
    [row] = _sql(copy, run_id, "dataset_metrics")
    assert float(average_at_k(c, n).mean()) == pytest.approx(row["average_at_n"], abs=1e-12)
    k = int(n.min())
    assert pass_at_k(c, n, k).tolist() == [float(pass_at_k(c[i:i + 1], int(n[i]), k)[0]) for i in range(len(keys))]
