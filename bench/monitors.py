"""Benchmark: the online monitors on runs the pipeline trains, and what the off-policy correction plus the
monitors cost per step (issue 35; docs/architecture.md §Runs that say when they go wrong).

From one warm start (the demo's tiny model on the synthetic task, hf rollouts), in this one process:

* **healthy** — the demo's RL setting (PRL, η 20, lr 2e-5);
* **planted** — the same with a learning rate 100× too high (2e-3), the classic way a run goes wrong;
* **planted-stop** — the planted run with ``monitors.on_alert: stop``: it must stop cleanly after a checkpoint.

Each run evaluates every ``--eval-every`` steps (the independent task metric eval/average that the reward-hacking
monitor reads). Recorded per run: the alerts as stored in ``train_alerts``, the status, and the cost: the seconds
in the off-policy weights (``time/offpolicy``) and in the monitors (the trainer's ``monitor_seconds``) against
the run's total step time — a ratio within one run (goal ≤ 3%).

    python bench/monitors.py [--model DIR] [--steps 20]

Writes bench/results/monitors.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine_info, render_all, write_json  # noqa: E402

CODE = ("bench/monitors.py", "prl/training", "prl_core/offpolicy.py", "prl/store", "sql/schema.sql", "sql/queries.sql")
"""The code this benchmark measures (bench/common.py's write_json records it)."""

GOAL = 0.03
HEALTHY_LR = 2e-5  # configs/train/tiny_prl.yaml, the demo's


def run_config(model: Path, out: Path, name: str, *, lr: float, steps: int, eval_every: int, on_alert: str = "warn",
               eval_limit: int = 50) -> Path:
    data = {"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n", "n_samples": 5},
            "train": {"model": str(model), "out_dir": str(out / name), "db": str(out / "store.duckdb"), "seed": 0,
                      "steps": steps, "prompts_per_step": 8, "max_tokens": 96, "engine": "hf", "lr": lr,
                      "mini_batch_size": 40, "micro_batch_size": 20, "checkpoint_every": 5, "eval_every": eval_every,
                      "eval_datasets": ["synth_test"], "eval_n": 4, "eval_limit": eval_limit, "heldout_problems": 16,
                      "export_checkpoints": False, "segments_per_step": 1},
            "monitors": {"on_alert": on_alert}}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(path: Path) -> dict:
    from prl.store.db import Store
    from prl.training.config import RunConfig
    from prl.training.train import Trainer

    cfg = RunConfig.from_yaml(path)
    lines: list[str] = []
    t0 = time.perf_counter()
    result = Trainer(cfg, log=lines.append, progress=False).run()
    wall = time.perf_counter() - t0
    store = Store(cfg.train.db, create=False)
    rid = cfg.train.resolved_run_id
    alerts = store.records("alerts_for_runs", run_ids=[rid])
    metrics: dict[int, dict[str, float]] = {}
    for r in store.records("train_metrics_for_runs", run_ids=[rid]):
        metrics.setdefault(r["step"], {})[r["name"]] = r["value"]
    steps = sorted(metrics)
    step_s = sum(metrics[s].get("time/step") or 0.0 for s in steps)
    offpolicy_s = sum(metrics[s].get("time/offpolicy") or 0.0 for s in steps)
    run = store.records("get_run", run_id=rid)[0]

    def curve(name: str) -> list[float | None]:
        return [metrics[s].get(name) for s in steps]
    return {"run_id": rid, "lr": cfg.train.lr, "on_alert": cfg.monitors.on_alert, "status": run["status"],
            "steps_done": result["steps"], "stopped_at_step": result["stopped_at_step"], "wall_s": round(wall, 1),
            "alerts": [{k: a[k] for k in ("step", "monitor", "metric", "value", "threshold", "action", "message")}
                       for a in alerts],
            "alert_lines": [x for x in lines if x.startswith("[alert]")],
            "cost": {"step_s": step_s, "offpolicy_s": offpolicy_s, "monitor_s": result["monitor_seconds"],
                     "ratio": (offpolicy_s + result["monitor_seconds"]) / step_s if step_s else None},
            "curves": {name: curve(name) for name in ("actor/entropy", "actor/kl_ref", "actor/drift", "reward/mean",
                                                       "rollout/mismatch_kl", "rollout/is_weight_max", "eval/average",
                                                       "heldout/entropy", "heldout/drift")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="warm-started tiny model directory (default: build one, ~3 min)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prl-monitors-") as tmp:
        out = Path(tmp)
        model = Path(args.model) if args.model else None
        if model is None:
            from prl.models.tiny import build_tiny
            from prl.training.config import SFTConfig
            from prl.training.sft import run_sft

            model = out / "warm"
            run_sft(build_tiny(out / "tiny", seed=0), model, SFTConfig(steps=300, eval_size=100, seed=0),
                    log=lambda *_: None)
        runs = {}
        for name, lr, on_alert in (("healthy", HEALTHY_LR, "warn"), ("planted", 100 * HEALTHY_LR, "warn"),
                                   ("planted-stop", 100 * HEALTHY_LR, "stop")):
            runs[name] = train(run_config(model, out, name, lr=lr, steps=args.steps, eval_every=args.eval_every,
                                          on_alert=on_alert))
            print(f"{name}: {runs[name]['status']} after {runs[name]['steps_done']} steps, "
                  f"{len(runs[name]['alerts'])} alert(s): {[a['monitor'] for a in runs[name]['alerts']]}, "
                  f"cost {100 * runs[name]['cost']['ratio']:.2f}% of step time", flush=True)
    ratios = [r["cost"]["ratio"] for r in runs.values() if r["cost"]["ratio"] is not None]
    payload = {"machine": machine_info(), "settings": {"steps": args.steps, "eval_every": args.eval_every,
                                                       "healthy_lr": HEALTHY_LR, "planted_lr": 100 * HEALTHY_LR},
               "runs": runs, "goal_ratio": GOAL, "max_ratio": max(ratios) if ratios else None,
               "healthy_silent": not runs["healthy"]["alerts"],
               "planted_fires": sorted({a["monitor"] for a in runs["planted"]["alerts"]}),
               "stop_clean": runs["planted-stop"]["status"] == "stopped"}
    write_json("monitors", payload, code=CODE)
    render_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
