"""Benchmark: PRL's training step against GRPO's (docs/architecture.md §Targets: within 5%), measured two ways in one run.

1. **Same rollouts** (the target's measurement). One Trainer (DeepSpeed, fp32 on CPU) on the warm-started
   tiny model draws one batch of rollouts, verifies them and computes the old-policy and reference
   log-probs. Then, alternating on that same batch, it times the part of a step that differs between
   estimators — advantages, the step's diagnostics and the PPO update (``ppo_epochs`` of mini-batch
   forward/backward/optimizer steps), each timed on its own — for GRPO (the baseline) and for PRL with a
   ``fixed:8`` split and with a ``text:\\n\\n`` split (which decodes every response token to find the
   delimiter). Rollout generation, verification and log-probs are the same for every estimator and are
   reported once for scale.
2. **Whole steps, as bench/peers.py's RL step runs them** (its settings: 16 prompts × 5, ≤ 96 tokens,
   optimizer batch 8 × 2, lr 1e-5, the reference pass on; PRL with ``text:\\n\\n``, η = 20). Two Trainers,
   GRPO and PRL, in this one process, step alternately from the same seed, each on its own rollouts (as
   two training runs do). Per step and side: every phase's time as the trainer records it (``time/*``;
   ``time/update`` is advantages + diagnostics + the update), the responses' token count, whether the two
   sides' responses were the same texts, and the time Python's garbage collector took in each phase. The
   ratios of the two ways, and of bench/peers.py's run, are compared in bench/RESULTS.md.

    python bench/train_step.py --model DIR [--prompts 16] [--repeats 9] [--steps 7]

Writes bench/results/train_step.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine_info, render_all, write_json  # noqa: E402

from prl_core.config import AlgorithmConfig  # noqa: E402
from prl_core.estimators import get_estimator  # noqa: E402

CODE = ("bench/train_step.py", "bench/peers.py", "prl/training", "prl_core", "prl/generation", "prl/grading/verifier.py",
        "prl/data/synthetic.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

TARGET = 1.05
PHASES = ("generate", "verify", "logprobs", "update", "sync", "step")


class GcClock:
    """Seconds spent in Python's garbage collector (``gc.callbacks``), cumulative."""

    def __init__(self) -> None:
        self.total = 0.0
        self.collections = 0
        self._t = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._t
            self.collections += 1

    def close(self) -> None:
        gc.callbacks.remove(self._cb)


def same_rollouts(model: str, prompts: int, max_tokens: int, repeats: int, tmp: str) -> dict:
    from prl.training.config import RunConfig, TrainConfig
    from prl.training.train import Trainer

    algos = {
        "grpo": AlgorithmConfig(estimator="grpo", n_samples=5),
        "prl fixed:8": AlgorithmConfig(estimator="prl", eta=20, step_split="fixed:8", n_samples=5),
        "prl text:\\n\\n": AlgorithmConfig(estimator="prl", eta=20, step_split="text:\n\n", n_samples=5),
    }
    t = TrainConfig(model=model, out_dir=f"{tmp}/out", db=f"{tmp}/s.duckdb", steps=1, prompts_per_step=prompts,
                    max_tokens=max_tokens, engine="hf", lr=1e-5, mini_batch_size=prompts * 5 // 2,
                    micro_batch_size=prompts * 5 // 2, eval_datasets=())
    tr = Trainer(RunConfig(algos["grpo"], t), log=lambda _m: None, progress=False)
    tr.open()
    t0 = time.perf_counter()
    ro = tr.rollout()
    t1 = time.perf_counter()
    r = tr.verify(ro)
    t2 = time.perf_counter()
    lp = tr.logprobs(r)
    t3 = time.perf_counter()

    def timed(name: str) -> dict[str, float]:
        tr.algo = algos[name]
        tr.split = tr.algo.step_split or "token"
        tr.estimator = get_estimator(tr.algo.estimator)
        a = time.perf_counter()
        adv = tr.advantages(r, lp)
        b = time.perf_counter()
        tr.diagnostics(r, lp, adv)
        c = time.perf_counter()
        tr.update(r, lp, adv)
        d = time.perf_counter()
        return {"advantages": (b - a) * 1e3, "diagnostics": (c - b) * 1e3, "update": (d - c) * 1e3,
                "total": (d - a) * 1e3}

    for name in algos:  # warm-up
        timed(name)
    times: dict[str, list[dict[str, float]]] = {name: [] for name in algos}
    for _ in range(repeats):
        for name in algos:
            times[name].append(timed(name))
    tr.close()
    grpo = [x["total"] for x in times["grpo"]]
    cases = {}
    for name, v in times.items():
        total = [x["total"] for x in v]
        cases[name] = {"median_ms": statistics.median(total),
                       "ratio_to_grpo": statistics.median(a / b for a, b in zip(total, grpo)),
                       **{f"{k}_ms": statistics.median(x[k] for x in v) for k in ("advantages", "diagnostics", "update")}}
        cases[name]["meets_target"] = cases[name]["ratio_to_grpo"] <= TARGET
    shape = {"rollouts": int(r.mask.shape[0]), "max_response_tokens": int(r.mask.shape[1]),
             "mean_response_tokens": float(r.mask.sum(1).float().mean())}
    return {"shape": shape, "cases": cases, "repeats": repeats,
            "once_ms": {"generate": (t1 - t0) * 1e3, "verify": (t2 - t1) * 1e3, "logprobs": (t3 - t2) * 1e3}}


def whole_steps(model: str, steps: int, warmup: int, tmp: str) -> dict:
    """GRPO and PRL trainers stepping alternately in this process (bench/peers.py's settings), see the module doc."""
    from peers import RL, rl_train_config

    from prl.training.config import RunConfig
    from prl.training.train import Trainer

    algos = {"grpo": AlgorithmConfig(estimator="grpo", n_samples=RL["group"]),
             "prl": AlgorithmConfig(estimator="prl", eta=20, step_split="text:\n\n", n_samples=RL["group"])}
    clock = GcClock()
    trainers, texts, gc_s = {}, {}, {}
    for name, algo in algos.items():
        Path(tmp, name).mkdir()
        tr = Trainer(RunConfig(algo, rl_train_config(Path(model), Path(tmp, name), "hf", steps)), log=lambda _m: None,
                     progress=False)
        tr.open()
        trainers[name], texts[name], gc_s[name] = tr, [], {}

        def wrap(phase: str, fn, name=name):  # gc seconds per phase; the responses' texts
            def call(*a, **kw):
                before = clock.total
                out = fn(*a, **kw)
                gc_s[name][phase] = gc_s[name].get(phase, 0.0) + clock.total - before
                if phase == "rollout":
                    texts[name].append([s.text for s in out["samples"]])
                return out
            return call

        for phase in ("rollout", "verify", "logprobs", "advantages", "diagnostics", "update", "finish_step"):
            setattr(tr, phase, wrap(phase, getattr(tr, phase)))
    rows = {name: [] for name in algos}
    for i in range(steps):
        for name, tr in trainers.items():
            gc_s[name] = {}
            t = time.perf_counter()
            m = tr.step()
            rows[name].append({"step": i, "warmup": i < warmup, "wall_s": time.perf_counter() - t,
                               **{f"{p}_s": m[f"time/{p}"] for p in PHASES},
                               "response_tokens": m["response/length"],
                               "gc_s": {k: round(v, 4) for k, v in gc_s[name].items()}})
    for tr in trainers.values():
        tr.close()
    clock.close()
    same = [sum(a == b for a, b in zip(x, y)) for x, y in zip(texts["grpo"], texts["prl"])]
    for i, n in enumerate(same):
        for name in algos:
            rows[name][i]["responses_same_as_other_side"] = n
    measured = {name: [r for r in rs if not r["warmup"]] for name, rs in rows.items()}
    med = {name: {f"{p}_s": statistics.median(r[f"{p}_s"] for r in rs) for p in PHASES + ("wall",)}
           | {"response_tokens": statistics.median(r["response_tokens"] for r in rs),
              "gc_s": statistics.median(sum(r["gc_s"].values()) for r in rs)}
           for name, rs in measured.items()}
    paired = {p: statistics.median(a[f"{p}_s"] / b[f"{p}_s"] for a, b in zip(measured["prl"], measured["grpo"])
                                   if b[f"{p}_s"] > 0) for p in PHASES}
    return {"settings": RL, "steps": steps, "warmup_steps": warmup, "responses_per_step": len(texts["grpo"][0]),
            "median": med, "prl_over_grpo_paired": paired,
            "prl_over_grpo_without_generation": (sum(med["prl"][f"{p}_s"] for p in ("verify", "logprobs", "update"))
                                                 / sum(med["grpo"][f"{p}_s"] for p in ("verify", "logprobs", "update"))),
            "steps_with_identical_responses": sum(n == len(texts["grpo"][0]) for n in same[warmup:]),
            "rows": rows}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a warm-started model (prl model sft)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--steps", type=int, default=7, help="whole steps per side, the first one a warm-up")
    args = ap.parse_args()
    sft = Path(args.model) / "sft_report.json"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a").mkdir()
        part1 = same_rollouts(args.model, args.prompts, args.max_tokens, args.repeats, str(Path(tmp, "a")))
        for name, c in part1["cases"].items():
            print(f"{name:<16} {c['median_ms']:8.1f} ms  {c['ratio_to_grpo']:.3f}x GRPO (advantages {c['advantages_ms']:.1f}, "
                  f"diagnostics {c['diagnostics_ms']:.1f}, update {c['update_ms']:.1f} ms)", flush=True)
        Path(tmp, "b").mkdir()
        part2 = whole_steps(args.model, args.steps, 1, str(Path(tmp, "b")))
    for p in PHASES:
        print(f"whole steps, {p:<9} GRPO {part2['median']['grpo'][f'{p}_s']:.3f} s, PRL {part2['median']['prl'][f'{p}_s']:.3f} s, "
              f"PRL/GRPO {part2['prl_over_grpo_paired'][p]:.3f} (median of pairs)")
    print(f"identical responses on {part2['steps_with_identical_responses']} of {args.steps - 1} measured steps")
    results = {"machine": machine_info(), "model": {"dir": args.model, "sft_steps": json.loads(sft.read_text())["steps"]
                                                    if sft.exists() else None},
               **part1, "whole_steps": part2}
    write_json("train_step", results, code=CODE)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
