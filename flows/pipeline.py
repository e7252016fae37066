"""The ``pipeline`` flow — the main job, from nothing to a populated store:

    prepare data → build the tiny model → SFT warm start → train PRL and its GRPO twin (same
    seeds, data and budget) → evaluate the warm start, GRPO and PRL on the synthetic test set and
    a slice of each benchmark → report (micro/macro tables, PRL vs warm start and PRL vs GRPO)

Every step is idempotent, so a pipeline killed at any point and rerun picks up where it
stopped: data, model and warm start are Prefect tasks cached on their inputs, and recomputed
(cache refreshed) when their output no longer exists (``_cached`` below); training resumes from its last DeepSpeed
checkpoint (a training the store holds as finished is not relaunched); evaluations resume from the store (the run id and the weights' fingerprint say
which samples are already there). Nothing is written twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.config import PipelineConfig
from flows.run_log import log as _log
from flows.train import finished_run, train_run

from prl.data.datasets import SYNTHETIC
from prl.manifest import run_manifest
from prl.training.config import WARM_START_BASE, WARM_START_MARKERS, WARM_START_MODEL


def _inputs_key(*fields: str):
    """Cache key over the task's name, the output directory and the config fields it depends on."""
    def key(context, parameters) -> str:
        cfg = parameters["cfg"]
        inputs = json.dumps({"out_dir": str(Path(cfg.out_dir).resolve()),
                             **{f: getattr(cfg, f) for f in fields}}, sort_keys=True)
        return hashlib.sha256(f"{context.task.name}:{inputs}".encode()).hexdigest()
    return key


def _models(cfg: PipelineConfig) -> Path:
    return Path(cfg.out_dir) / "models"


def _marker(stage: str) -> str:
    """A warm-start stage's marker file under OUT_DIR."""
    return f"models/{stage}/{WARM_START_MARKERS[stage]}"


def _cached(step, marker: str, cfg: PipelineConfig, *args):
    """Run a cached task; if its output (``OUT/marker``) no longer exists, recompute and refresh the cache
    entry instead of returning a result whose files are gone."""
    missing = not (Path(cfg.out_dir) / marker).exists()
    if missing:
        _log(f"{step.name}: {marker} is missing, (re)building it")
    return step.with_options(refresh_cache=missing)(cfg, *args)


@task(name="prepare-data", cache_key_fn=_inputs_key("seed"), persist_result=True, retries=1)
def prepare_data(cfg: PipelineConfig) -> dict[str, str]:
    """The synthetic task's splits as JSONL (the training loop draws the same problems from the seed)."""
    from prl.data import synthetic

    out = Path(cfg.out_dir) / "data"
    test = synthetic.write_jsonl(synthetic.generate("test", synthetic.TEST_SIZE, seed=cfg.seed), out / "synth_test.jsonl")
    train = synthetic.write_jsonl(synthetic.generate("train", synthetic.TRAIN_SIZE, seed=cfg.seed), out / "synth_train.jsonl")
    _log(f"data: {train} and {test}")
    return {"train": str(train), "test": str(test)}


@task(name="build-model", cache_key_fn=_inputs_key("seed"), persist_result=True, retries=1)
def build_model(cfg: PipelineConfig) -> str:
    from prl.training.sft import build_warm_start_base

    return str(build_warm_start_base(_models(cfg), cfg.warm_start(), log=_log))


@task(name="warm-start", cache_key_fn=_inputs_key("seed", "sft_steps", "sft_eval_size", "direct_frac"),
      persist_result=True)
def warm_start(cfg: PipelineConfig, model: str, progress: bool = True) -> str:
    from prl.training.sft import run_warm_start

    return str(run_warm_start(_models(cfg), cfg.warm_start(), log=_log, progress=progress))


def train_config(cfg: PipelineConfig, estimator: str, model: str):
    """The RL run of one estimator; PRL and GRPO differ only in the algorithm section."""
    from prl.training.config import RunConfig, TrainConfig
    from prl_core.config import AlgorithmConfig

    algo = (AlgorithmConfig(estimator="prl", eta=cfg.eta, step_split=cfg.step_split, n_samples=cfg.n_samples)
            if estimator == "prl" else AlgorithmConfig(estimator=estimator, n_samples=cfg.n_samples))
    rollouts = cfg.prompts_per_step * cfg.n_samples
    t = TrainConfig(model=model, out_dir=str(Path(cfg.out_dir) / "train" / estimator), db=cfg.store,
                    run_id=f"{Path(cfg.out_dir).name}-train-{estimator}", seed=cfg.seed, steps=cfg.train_steps,
                    prompts_per_step=cfg.prompts_per_step, max_tokens=cfg.max_tokens, engine=cfg.engine, lr=cfg.lr,
                    mini_batch_size=rollouts // cfg.updates_per_step,
                    micro_batch_size=rollouts // cfg.updates_per_step,
                    checkpoint_every=max(1, cfg.train_steps // 10), eval_every=0, eval_datasets=(),
                    verifier_workers=1)  # as the evaluations: one worker beside the trainer on 2 cores
    return RunConfig(algo, t)


def eval_config(cfg: PipelineConfig, name: str, model: str):
    from prl.evaluation.config import EvalConfig

    return EvalConfig(model=model, datasets=cfg.eval_datasets(), n=cfg.eval_n, db=cfg.store,
                      run_id=f"{Path(cfg.out_dir).name}-eval-{name}", engine=cfg.engine, max_tokens=cfg.max_tokens,
                      seed=cfg.seed, verifier_workers=1, task_runner=cfg.eval_task_runner)


def render_styles(styles: dict[str, dict | None]) -> str:
    """Held-out synthetic samples by answer style: how often each model shows its working, and how well
    each style scores (RL's gain on this task is mostly the move to worked answers)."""
    def pct(x):
        return "   -  " if x is None else f"{100 * x:5.1f}%"

    lines = ["held-out synthetic answers by style", f"{'model':<12} {'shows working':>13} {'worked avg':>10} {'direct avg':>10}"]
    for name, s in styles.items():
        if s:
            lines.append(f"{name:<12} {pct(s['working_share']):>13} {pct(s['working_average']):>10} "
                         f"{pct(s['direct_average']):>10}")
    return "\n".join(lines)


@task(name="report", cache_policy=NO_CACHE)
def report(cfg: PipelineConfig, runs: dict[str, str]) -> dict[str, Any]:
    """Scores of the three models and the paired comparisons on the held-out synthetic set."""
    from prl.evaluation.report import compare_runs, render_comparison, render_scores, run_scores
    from prl.store.db import Store

    store = Store(cfg.store, create=False)
    scores = {name: run_scores(store, run_id) for name, run_id in runs.items()}
    prl_vs_base = compare_runs(store, runs["warm_start"], runs["prl"])
    prl_vs_grpo = compare_runs(store, runs["grpo"], runs["prl"])
    grpo_vs_base = compare_runs(store, runs["warm_start"], runs["grpo"])
    synth = {c["run_b"] + " vs " + c["run_a"]: next((d for d in c["datasets"] if d["dataset"] == SYNTHETIC), None)
             for c in (prl_vs_base, grpo_vs_base, prl_vs_grpo)}
    styles = {name: next(({k: style[k] for k in ("samples", "working_share", "working_average", "direct_average")}
                          for style in store.records("answer_styles_for_run", run_id=run_id)
                          if style["dataset"] == SYNTHETIC), None) for name, run_id in runs.items()}
    text = "\n\n".join([*(render_scores(s) for s in scores.values()), render_comparison(prl_vs_base),
                        render_comparison(prl_vs_grpo), render_styles(styles)])
    result = {"runs": runs, "store": cfg.store, "synthetic_paired": synth, "answer_styles": styles, "text": text,
              "scores": {k: {"aggregates": v["aggregates"], "datasets": v["datasets"]} for k, v in scores.items()}}
    (Path(cfg.out_dir) / "pipeline_report.json").write_text(json.dumps(result, indent=2, default=float))
    return result


def _train_unless_finished(rc) -> None:
    """The training run, unless an earlier invocation finished it (``flows.train.finished_run``)."""
    if finished_run(rc):
        _log(f"training {rc.train.resolved_run_id}: finished with this config in {rc.train.db}; not relaunched")
        return
    train_run.with_options(name=f"train-{rc.algorithm.estimator}")(rc)


@flow(name="pipeline", log_prints=False)
def pipeline(cfg: PipelineConfig = PipelineConfig(), progress: bool = True) -> dict[str, Any]:
    """The main job; rerunning it after an interruption continues where it stopped."""
    from flows.evaluate import evaluate_flow

    t0 = time.perf_counter()
    phases: dict[str, float] = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        phases[name] = round(time.perf_counter() - t, 1)
        return out

    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    _log(f"pipeline → {cfg.out_dir} (store {cfg.store})")
    timed("data", _cached, prepare_data, "data/synth_test.jsonl", cfg)
    tiny = timed("build_model", _cached, build_model, _marker(WARM_START_BASE), cfg)
    warm = timed("warm_start", _cached, warm_start, _marker(WARM_START_MODEL), cfg, tiny, progress)
    policies = {}
    for estimator in ("prl", "grpo"):
        rc = train_config(cfg, estimator, warm)
        timed(f"train_{estimator}", _train_unless_finished, rc)
        policies[estimator] = str(Path(rc.train.out_dir) / "policy")
    runs = {}
    for name, model in (("warm_start", warm), ("grpo", policies["grpo"]), ("prl", policies["prl"])):
        ec = eval_config(cfg, name, model)
        summary = timed(f"eval_{name}", lambda c: evaluate_flow(c)(c, progress=progress), ec)
        runs[name] = summary["run_id"]
    result = timed("report", report, cfg, runs)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["result_file"] = str(write_demo_result(cfg, result, phases))
    return result


def write_demo_result(cfg: PipelineConfig, result: dict[str, Any], phases: dict[str, float]) -> Path:
    """``OUT/demo_result.json``: what the README's demo table is rendered from (bench/demo.py copies it to
    bench/results/demo.json): the run manifest (commit, machine, versions), each phase's time in this
    invocation (a phase reused from an earlier, interrupted invocation takes ~0 s), the held-out
    synthetic average@n of each model with its bootstrap CI and answer style, and the paired comparisons."""
    held_out = {}
    for name, scores in result["scores"].items():
        row = next((d for d in scores["datasets"] if d["dataset"] == SYNTHETIC), None)
        if row is None:
            continue
        avg = next(v for k, v in row.items() if k.startswith("average@"))
        styles = result["answer_styles"].get(name) or {}
        held_out[name] = {"average": avg["value"], "lo": avg["lo"], "hi": avg["hi"], "problems": row["problems"],
                          "n": row["n"], "working_share": styles.get("working_share"),
                          "working_average": styles.get("working_average"),
                          "direct_average": styles.get("direct_average")}
    paired = {label: {"diff": d["diff"]["diff"], "lo": d["diff"]["lo"], "hi": d["diff"]["hi"],
                      "average_a": d["average_a"], "average_b": d["average_b"]}
              for label, d in result["synthetic_paired"].items() if d}
    manifest = run_manifest("demo", config=asdict(cfg), seed=cfg.seed)
    doc = {**manifest, "commit": manifest["git"]["commit"], "phases": phases,
           "seconds": result["seconds"], "held_out": held_out, "paired": paired}
    path = Path(cfg.out_dir) / "demo_result.json"
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return path
