"""``prl demo``: the main job — the ``pipeline`` flow on the embedded default, then a summary.

synthetic task → tiny model (from a seed) → SFT warm start → PRL and its GRPO twin on DeepSpeed
→ evaluation of the warm start, GRPO and PRL (held-out synthetic set + a slice of each benchmark)
→ micro/macro tables, paired comparisons, the store's location and the dashboard command.

Rerunning continues where an interrupted run stopped (cached model and warm start, training
checkpoints, evaluations resumed from the store).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path


def _cmd_demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return main_args(args)


def main_args(args) -> int:
    from flows.pipeline import PipelineConfig, pipeline, small  # prefect: imported when the command runs

    if args.small:
        cfg = small(args.out, seed=args.seed, engine=args.engine, eval_task_runner=args.task_runner)
    else:
        cfg = PipelineConfig(out_dir=args.out, seed=args.seed, sft_steps=args.sft_steps, direct_frac=args.direct_frac,
                             train_steps=args.train_steps,
                             eval_n=args.eval_n, synth_limit=args.synth_limit, bench_limit=args.bench_limit,
                             engine=args.engine, eval_task_runner=args.task_runner)
    from prl import logs

    logs.log_to(Path(cfg.out_dir) / "demo.log")
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


def register(sub) -> None:
    """Add ``demo`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "demo",
        help="the main job: warm start -> PRL and GRPO training -> evaluation -> report (Prefect 'pipeline')",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run the 'pipeline' flow on the embedded default: write the synthetic task, build the tiny model
from --seed, warm-start it with SFT, train PRL and its GRPO twin (same seeds, data and budget) on
DeepSpeed, evaluate the warm start, GRPO and PRL on the 400 held-out synthetic problems and a
slice of each benchmark, and print the micro/macro tables, PRL vs warm start and PRL vs GRPO
paired comparisons, where the store is, and the command that opens the dashboard.

Interrupted? Run the same command again: finished steps are reused (cached model and warm start,
training checkpoints, evaluations resumed from the store).

example:
  prl demo                      # ~12 min on 2 cores the first time
  prl dashboard --db runs/demo/store.duckdb
""")
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sft-steps", type=int, default=600, help="warm-start steps (default 600, ~4 min)")
    p.add_argument("--direct-frac", type=float, default=0.5,
                   help="share of warm-start solutions without the working (default 0.5: RL then has a behaviour "
                        "to learn; 0: the warm start always shows it)")
    p.add_argument("--train-steps", type=int, default=100, help="RL steps of PRL and of GRPO (default 100)")
    p.add_argument("--eval-n", type=int, default=4, help="samples per problem in the evaluations (default 4)")
    p.add_argument("--synth-limit", type=int, default=None, help="held-out synthetic problems (default all 400)")
    p.add_argument("--bench-limit", type=int, default=20, help="problems of each benchmark (default 20)")
    p.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    p.add_argument("--task-runner", choices=("local", "ray"), default="local",
                   help="where the evaluations run: local (default) or ray (shards on a local Ray runtime)")
    p.add_argument("--small", action="store_true",
                   help="a smoke-test budget (minutes): 60 warm-start steps, 3 RL steps, 12 synthetic + 2 per benchmark")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_demo)
