"""Benchmark: a PRL training step vs the GRPO step on the same rollouts (docs/architecture.md §Targets: within 5%).

One Trainer (DeepSpeed, fp32 on CPU) on the warm-started tiny model draws one batch of rollouts,
verifies them and computes the old-policy and reference log-probs. Then, alternating on that same
batch, it times the part of a step that differs between estimators — advantages + the PPO update
(``ppo_epochs`` of mini-batch forward/backward/optimizer steps) — for GRPO (the baseline) and for
PRL with a ``fixed:8`` split and with a ``text:\\n\\n`` split (which decodes every response token to
find the delimiter). Rollout generation, verification and log-probs are the same for every
estimator and are reported once for scale.

    python bench/train_step.py --model DIR [--prompts 16] [--repeats 9]

Writes bench/results/train_step.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

from prl_core.config import AlgorithmConfig  # noqa: E402
from prl_core.estimators import get_estimator  # noqa: E402

CODE = ("bench/train_step.py", "prl/training", "prl_core", "prl/generation", "prl/grading/verifier.py",
        "prl/data/synthetic.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

TARGET = 1.05


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a warm-started model (prl model sft)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    from prl.training.train import Trainer
    from prl.training.config import RunConfig, TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        algos = {
            "grpo": AlgorithmConfig(estimator="grpo", n_samples=5),
            "prl fixed:8": AlgorithmConfig(estimator="prl", eta=20, step_split="fixed:8", n_samples=5),
            "prl text:\\n\\n": AlgorithmConfig(estimator="prl", eta=20, step_split="text:\n\n", n_samples=5),
        }
        t = TrainConfig(model=args.model, out_dir=f"{tmp}/out", db=f"{tmp}/s.duckdb", steps=1,
                        prompts_per_step=args.prompts, max_tokens=args.max_tokens, engine="hf", lr=1e-5,
                        mini_batch_size=args.prompts * 5 // 2, micro_batch_size=args.prompts * 5 // 2,
                        eval_datasets=())
        tr = Trainer(RunConfig(algos["grpo"], t), log=lambda _m: None, progress=False)
        tr.open()
        t0 = time.perf_counter()
        ro = tr.rollout()
        t1 = time.perf_counter()
        r = tr.verify(ro)
        t2 = time.perf_counter()
        lp = tr.logprobs(r)
        t3 = time.perf_counter()

        def timed(name: str) -> float:
            tr.algo = algos[name]
            tr.split = tr.algo.step_split or "token"
            tr.estimator = get_estimator(tr.algo.estimator)
            s = time.perf_counter()
            adv = tr.advantages(r, lp)
            tr.update(r, lp, adv)
            return (time.perf_counter() - s) * 1e3

        for name in algos:  # warm-up
            timed(name)
        times: dict[str, list[float]] = {name: [] for name in algos}
        for _ in range(args.repeats):
            for name in algos:
                times[name].append(timed(name))
        tr.close()
    base = statistics.median(times["grpo"])
    cases = {name: {"median_ms": statistics.median(v), "ratio_to_grpo": statistics.median(
        a / b for a, b in zip(v, times["grpo"])), } for name, v in times.items()}
    for c in cases.values():
        c["meets_target"] = c["ratio_to_grpo"] <= TARGET
    shape = {"rollouts": int(r.mask.shape[0]), "max_response_tokens": int(r.mask.shape[1]),
             "mean_response_tokens": float(r.mask.sum(1).float().mean())}
    results = {"machine": machine_info(), "shape": shape, "cases": cases, "repeats": args.repeats,
               "once_ms": {"generate": (t1 - t0) * 1e3, "verify": (t2 - t1) * 1e3, "logprobs": (t3 - t2) * 1e3}}
    write_json("train_step", results, code=CODE)
    for name, c in cases.items():
        print(f"{name:<16} {c['median_ms']:8.1f} ms  {c['ratio_to_grpo']:.3f}x GRPO")
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
