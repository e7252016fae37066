"""The monitors, the in-training evaluation metrics and the off-policy metrics on runs the pipeline trains itself
(docs/architecture.md §Runs that say when they go wrong): a run with a learning rate 100× the demo's trips the KL
alert and stops cleanly after a checkpoint; the demo's own runs trip none (tests/test_demo.py); eval/pass@k at a step is what
`prl report` gives that step's eval run."""

from __future__ import annotations

import pytest
import yaml

from prl.evaluation.report import run_scores
from prl.store.db import Store
from prl.training.config import RunConfig
from prl.training.monitors import MonitorConfig, alerts

DEMO_LR = 2e-5  # configs/train/tiny_prl.yaml


def _config(model, tmp_path, name, *, lr, steps, monitors=None, **train):
    data = {"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n", "n_samples": 4},
            "train": {"model": str(model), "out_dir": str(tmp_path / name), "db": str(tmp_path / "store.duckdb"),
                      "steps": steps, "prompts_per_step": 4, "max_tokens": 48, "engine": "hf", "lr": lr,
                      "mini_batch_size": 16, "micro_batch_size": 8, "checkpoint_every": 1, "eval_datasets": [],
                      "export_checkpoints": False, "segments_per_step": 1, "seed": 0, **train},
            "monitors": monitors or {}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return RunConfig.from_yaml(path)


def _history(store: Store, run_id: str) -> list[dict[str, float]]:
    by: dict[int, dict[str, float]] = {}
    for r in store.records("train_metrics_for_runs", run_ids=[run_id]):
        by.setdefault(r["step"], {})[r["name"]] = float("nan") if r["value"] is None else r["value"]
    return [by[s] for s in sorted(by)]


def test_a_learning_rate_100x_too_high_trips_the_kl_alert_and_stops_after_a_checkpoint(warm_model, tmp_path):
    from prl.training.train import Trainer

    model, _ = warm_model
    cfg = _config(model, tmp_path, "planted", lr=100 * DEMO_LR, steps=6, monitors={"on_alert": "stop"})
    lines: list[str] = []
    result = Trainer(cfg, log=lines.append, progress=False).run()
    store = Store(cfg.train.db, create=False)
    stored = store.records("alerts_for_runs", run_ids=["planted"])
    assert result["stopped_at_step"] == result["steps"] < 6
    assert [(a["monitor"], a["action"]) for a in stored][-1][1] == "stop"
    assert {a["monitor"] for a in stored} & {"kl_acceleration", "entropy_blowup", "entropy_collapse"}
    assert store.records("get_run", run_id="planted")[0]["status"] == "stopped"
    assert (tmp_path / "planted" / "policy").is_dir()
    alert_lines = [x for x in lines if x.startswith("[alert]")]
    assert len(alert_lines) == len(stored) and all(a["message"] in x for a, x in zip(stored, alert_lines))
    # the stored alerts are what the monitors compute from the stored history (the same pure functions)
    hist = _history(store, "planted")
    assert [(a.step, a.monitor) for a in alerts(hist, MonitorConfig(on_alert="stop"))] == \
        [(a["step"], a["monitor"]) for a in stored]
    # KL to the reference and the drift are logged every step, with the off-policy metrics
    for name in ("actor/kl_ref", "actor/drift", "rollout/is_weight_mean", "rollout/mismatch_kl"):
        assert all(name in h for h in hist), name
    assert hist[-1]["actor/kl_ref"] > 0.05  # what fired
    # --resume continues the stopped run; the alert of the stop step is not stored twice
    cfg2 = _config(model, tmp_path, "planted", lr=100 * DEMO_LR, steps=result["steps"] + 1)
    again = Trainer(cfg2, log=lines.append, progress=False).run(resume=True)
    assert again["resumed_from_step"] == result["steps"] and again["steps"] == result["steps"] + 1
    after = store.records("alerts_for_runs", run_ids=["planted"])
    assert [(a["step"], a["monitor"]) for a in after][:len(stored)] == [(a["step"], a["monitor"]) for a in stored]
    assert store.records("get_run", run_id="planted")[0]["status"] == "finished"


def test_in_training_pass_at_k_is_what_prl_report_gives_the_eval_run(warm_model, tmp_path):
    from prl.training.train import Trainer

    model, _ = warm_model
    cfg = _config(model, tmp_path, "evals", lr=DEMO_LR, steps=2, eval_every=1, eval_datasets=["synth_test"],
                  eval_n=4, eval_limit=12, eval_k=[1, 2, 4], heldout_problems=4)
    Trainer(cfg, log=lambda _m: None, progress=False).run()
    store = Store(cfg.train.db, create=False)
    hist = _history(store, "evals")
    for step in (1, 2):  # the periodic evaluation and the final one
        scores = run_scores(store, f"evals@step{step}", ks=[1, 2, 4], iters=10)
        micro = scores["aggregates"]["micro"]
        assert hist[step - 1]["eval/average"] == pytest.approx(micro["average@4"]["value"], abs=1e-12)
        for k in (1, 2, 4):
            assert hist[step - 1][f"eval/pass@{k}"] == pytest.approx(micro[f"pass@{k}"]["value"], abs=1e-12)
            assert hist[step - 1][f"eval/synth_test/pass@{k}"] == pytest.approx(
                scores["datasets"][0][f"pass@{k}"]["value"], abs=1e-12)
        assert hist[step - 1]["heldout/entropy"] > 0 and "heldout/drift" in hist[step - 1]
    assert store.records("alerts_for_runs", run_ids=["evals"]) == []
