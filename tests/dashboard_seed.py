"""A small store with known numbers for the dashboard tests (pages, charts, the browser check)."""

from __future__ import annotations

import json
from pathlib import Path

from prl.data.datasets import Problem
from prl.store.db import Store

SCRIPT = "<script>document.title='pwned'</script><b>bold</b> **not markdown** \\boxed{7}"

# correct samples out of 4 per problem
OUTCOMES = {
    "base": {("math500", "math500/0"): 1, ("math500", "math500/1"): 0, ("math500", "math500/2"): 0,
             ("amc23", "amc23/0"): 0, ("amc23", "amc23/1"): 4},
    "prl": {("math500", "math500/0"): 4, ("math500", "math500/1"): 2, ("math500", "math500/2"): 0,
            ("amc23", "amc23/0"): 4, ("amc23", "amc23/1"): 4},
}
# by hand: base math500 average@4 = (1/4 + 0 + 0)/3 = 8.3 %, amc23 = (0 + 1)/2 = 50.0 %
#          prl  math500 = (1 + 1/2 + 0)/3 = 50.0 %,       amc23 = 100.0 %
#          micro base = (1/4 + 4/4)/5 = 25.0 %, prl = (4 + 2 + 0 + 4 + 4)/20 = 70.0 %
#          gained by prl (solved at least once): math500/1, amc23/0; lost: none


def seed(path) -> str:
    s = Store(path)
    problems = [Problem("math500", f"math500/{i}", f"What is {i} + 7? <i>html in a problem</i>", str(i + 7),
                        json.dumps(str(i + 7)), {}) for i in range(3)]
    problems += [Problem("amc23", f"amc23/{i}", f"Compute {i} times 9.", str(9 * i), json.dumps(float(9 * i)),
                         {"gold_raw_only": True, "gold_flag": "raw_only"} if i == 0 else {}) for i in range(2)]
    s.insert_problems(problems)
    for run_id, outcomes in OUTCOMES.items():
        s.execute("upsert_run", run_id=run_id, kind="eval", model=f"/models/{run_id}", status="finished",
                  config={"datasets": ["math500", "amc23"], "n": 4}, manifest={"seed": 0, "sampling": {"n": 4}},
                  parent_run_id=None, train_step=None)
        rows = []
        for (dataset, pid), c in outcomes.items():
            for i in range(4):
                ok = i < c
                response = SCRIPT if (run_id == "base" and pid == "math500/1" and i == 0) else (
                    f"We add the numbers and get \\boxed{{{'right' if ok else 'wrong'}}}")
                verdict = "correct" if ok else ("no_answer" if (run_id == "base" and pid == "math500/2" and i == 3)
                                                else "wrong")
                rows.append(dict(run_id=run_id, dataset=dataset, problem_id=pid, sample_idx=i, response=response,
                                 extracted_answer="7" if ok else "3", verdict=verdict, score=float(ok), n_tokens=20 + i,
                                 finish_reason="stop", verify_ms=1.0,
                                 relevance=0.05 if (run_id == "prl" and pid == "amc23/0" and i == 0) else 0.8,
                                 answer_only=False))
        s.insert_samples(rows)
    # a training run with metrics, segments, rollouts and one evaluation during training
    s.execute("upsert_run", run_id="train-prl", kind="train", model="/models/base", status="finished",
              config={"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n"},
                      "train": {"temperature": 1.0, "max_tokens": 96}},
              manifest={"seed": 0}, parent_run_id=None, train_step=5)
    s.insert_rows("train_metrics", ({"run_id": "train-prl", "step": step, "name": name, "value": value}
                                           for step in range(1, 6)
                                           for name, value in (("reward/mean", 0.1 * step), ("actor/kl_ref", 0.01 * step),
                                                               ("actor/entropy", 1.0 - 0.1 * step))))
    # the in-training evaluation's pass@k at step 5 and one alert of the run's monitors at step 4
    s.insert_rows("train_metrics", [{"run_id": "train-prl", "step": 5, "name": n, "value": v}
                                    for n, v in (("eval/average", 0.75), ("eval/pass@1", 0.75), ("eval/pass@4", 1.0))])
    s.insert_rows("train_alerts", [{"run_id": "train-prl", "step": 4, "monitor": "entropy_collapse",
                                    "metric": "actor/entropy", "value": 0.6, "threshold": 0.7,
                                    "message": "actor/entropy fell to 0.6 <b>seeded</b>", "action": "warn"}])
    s.insert_rows("prl_segments", ({"run_id": "train-prl", "step": 5, "rollout_idx": 0, "segment_idx": j,
                                           "start_tok": 3 * j, "end_tok": 3 * j + 2, "kl_to_go": 0.3 - 0.1 * j,
                                           "rho": 0.5 - 0.4 * j} for j in range(3)))
    s.insert_rows("train_rollouts", [dict(run_id="train-prl", step=5, rollout_idx=0, problem="What is 2 + 2?", gold="4",
                                          response="2 + 2\n\n= 4\n\n\\boxed{4}", reward=1.0,
                                          tokens=["2", " +", " 2", "\n\n", "=", " 4", "\n\n", "\\boxed{", "4}"])])
    s.execute("upsert_run", run_id="train-prl@step5", kind="eval", model="/runs/train-prl/policy", status="finished",
              config={"datasets": ["math500"], "n": 4}, manifest={"seed": 0}, parent_run_id="train-prl", train_step=5)
    s.insert_samples([dict(run_id="train-prl@step5", dataset="math500", problem_id="math500/0", sample_idx=i,
                           response="\\boxed{7}", extracted_answer="7", verdict="correct" if i < 3 else "wrong",
                           score=float(i < 3), n_tokens=5, finish_reason="stop", verify_ms=1.0, relevance=0.0,
                           answer_only=True) for i in range(4)])
    return str(path)


REPEATED = "2 + 2 = 4\n\n" * 150  # the tiny model repeats itself: long (folded) and the same in every rollout


def add_repeating_run(path, run_id: str = "train-rep", step: int = 2) -> str:
    """A training run whose two inspected rollouts at ``step`` are identical: same problem, same
    response, same reward, same tokens and same segments (only the rollout index differs)."""
    s = Store(path, create=False)
    s.execute("upsert_run", run_id=run_id, kind="train", model="/models/tiny", status="finished",
              config={"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n"}},
              manifest={"seed": 0}, parent_run_id=None, train_step=step)
    s.insert_rows("train_metrics", ({"run_id": run_id, "step": t, "name": "reward/mean", "value": 0.5}
                                           for t in range(1, step + 1)))
    tokens = json.dumps([t for _ in range(150) for t in ("2", " +", " 2", " =", " 4", "\n\n")])
    for idx in range(2):
        s.insert_rows("train_rollouts", [dict(run_id=run_id, step=step, rollout_idx=idx, problem="What is 2 + 2?",
                                              gold="4", response=REPEATED, reward=0.0, tokens=tokens)])
        s.insert_rows("prl_segments", ({"run_id": run_id, "step": step, "rollout_idx": idx, "segment_idx": j,
                                               "start_tok": 6 * j, "end_tok": 6 * j + 5, "kl_to_go": 0.1,
                                               "rho": 0.0} for j in range(3)))
    return str(path)


def add_study(db) -> str:
    """A finished study 'st' of two cells (grpo, prl) × two seeds with given outcomes: n = 2 samples of 3
    problems each, correct counts below; two training steps of reward and KL per run."""
    store = Store(db)
    # correct counts c per (cell, seed) for problems p0, p1, p2
    counts = {("grpo", 0): [0, 1, 2], ("grpo", 1): [1, 1, 2], ("prl", 0): [1, 2, 2], ("prl", 1): [2, 1, 2]}
    cells = [{"name": "grpo", "varied": ["algorithm.estimator"]}, {"name": "prl", "varied": ["algorithm.estimator",
                                                                                             "algorithm.eta"]}]
    config = {"study": {"id": "st", "seeds": [0, 1], "baseline": "grpo"}, "cells": cells,
              "claims": [{"id": "avg", "text": "PRL scores higher than GRPO <b>on average</b>", "metric": "average@2",
                          "higher": True, "cell": "prl", "against": ["grpo"], "source": "seeded"}]}
    store.execute("upsert_study", study_id="st", status="finished", config=config, manifest={})
    store.insert_problems([])
    for (cell, seed), cs in counts.items():
        train, ev = f"st.{cell}.s{seed}", f"st.{cell}.s{seed}@step2"
        algo = {"estimator": cell, "eta": 10.0 if cell == "prl" else None}
        store.execute("upsert_run", run_id=train, kind="train", model="m", status="finished",
                      config={"algorithm": algo, "train": {"lr": 1e-5, "seed": seed, "run_id": train}}, manifest={},
                      parent_run_id=None, train_step=None)
        store.execute("upsert_run", run_id=ev, kind="eval", model="m", status="finished", config={}, manifest={},
                      parent_run_id=train, train_step=2)
        store.execute("upsert_study_cell", study_id="st", cell=cell, seed=seed, train_run_id=train, eval_run_id=None,
                      varied=[], status="pending")
        store.execute("finish_study_cell", study_id="st", cell=cell, seed=seed, eval_run_id=ev)
        rows = []
        for p, c in enumerate(cs):
            for i in range(2):
                ok = i < c
                rows.append({"run_id": ev, "dataset": "synth_test", "problem_id": f"p{p}", "sample_idx": i,
                             "response": "r", "extracted_answer": "1", "verdict": "correct" if ok else "wrong",
                             "score": 1.0 if ok else 0.0, "n_tokens": 3, "finish_reason": "stop", "verify_ms": 1.0})
        store.insert_samples(rows)
        store.insert_rows("train_metrics", [{"run_id": train, "step": step, "name": name, "value": v}
                                                   for step in (1, 2)
                                                   for name, v in (("reward/mean", 0.1 * step), ("actor/kl_ref", 0.01 * step))])
    return str(db)


# ─── a store of one real import, for the Appendix-C case view and the judgement write ──────────────

R1ZERO = Path(__file__).resolve().parent / "data" / "external" / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"
R1ZERO_LINES = (1, 6, 178, 470)
"""Lines of the R1-Zero MATH-500 file (tests/data/external): 6 prealgebra/1622 and 470 algebra/435 are listed by
fits_another (both read as false flags, bench/suspicious_readings.csv), 178 geometry/65 by answer_only ('Find OE'),
1 is listed by nothing."""
R1ZERO_RUN = "r1zero-part"


def import_r1zero_part(db) -> str:
    """Import those lines with ``prl import``'s code (verified by our verifier) into the store ``db``; returns it."""
    from prl.imports.run import ImportConfig, run_import

    lines = R1ZERO.read_text(encoding="utf-8").splitlines()
    part = Path(str(db)).with_name("r1zero_part.jsonl")
    part.write_text("\n".join(lines[i - 1] for i in R1ZERO_LINES) + "\n", encoding="utf-8")
    run_import(ImportConfig(files=(str(part),), dataset="math500", db=str(db), run_id=R1ZERO_RUN, format="json",
                            fields="problem=prompt,response=response,label=metrics.answer_reward,gold=ground_truth",
                            verify_timeout_s=30),  # a loaded machine must not turn a listed pass into a timeout
               progress=False, log=lambda *_: None)
    return str(db)
