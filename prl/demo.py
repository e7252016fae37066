"""``prl demo``: the main job — the ``pipeline`` flow on the embedded default, then a summary.

synthetic task → tiny model (from a seed) → SFT warm start → PRL and its GRPO twin on DeepSpeed
→ evaluation of the warm start, GRPO and PRL (held-out synthetic set + a slice of each benchmark)
→ micro/macro tables, paired comparisons, the store's location and the dashboard command.

Rerunning continues where an interrupted run stopped (cached model and warm start, training
checkpoints, evaluations resumed from the store).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main_args(args) -> int:
    import contextlib

    from flows.pipeline import PipelineConfig, pipeline, small

    if args.small:
        cfg = small(args.out, seed=args.seed, engine=args.engine, eval_task_runner=args.task_runner)
    else:
        cfg = PipelineConfig(out_dir=args.out, seed=args.seed, sft_steps=args.sft_steps, direct_frac=args.direct_frac,
                             train_steps=args.train_steps,
                             eval_n=args.eval_n, synth_limit=args.synth_limit, bench_limit=args.bench_limit,
                             engine=args.engine, eval_task_runner=args.task_runner)
    with contextlib.redirect_stdout(sys.stderr):  # library chatter to stderr; the summary below to stdout
        result = pipeline(cfg, progress=not args.no_progress)
    run_summary(result)
    return 0


def run_summary(result: dict) -> None:
    print(result["text"])
    print()
    for label, d in result["synthetic_paired"].items():
        if d:
            diff = d["diff"]
            verdict = "beyond its 95% CI" if diff["lo"] > 0 else ("below" if diff["hi"] < 0 else "within noise")
            print(f"held-out synthetic, {label}: {100 * d['average_a']:.1f}% -> {100 * d['average_b']:.1f}% "
                  f"(delta {100 * diff['diff']:+.1f} pp, 95% CI [{100 * diff['lo']:+.1f}, {100 * diff['hi']:+.1f}]: "
                  f"{verdict})")
    print()
    print(f"store: {Path(result['store']).resolve()}  (pipeline {result['seconds']:.0f} s)")
    print(f"open the dashboard:  prl dashboard --db {result['store']}")
    print(json.dumps({"runs": result["runs"], "store": result["store"], "seconds": result["seconds"]}))
