"""``prl demo``: the main job — the ``pipeline`` flow on the embedded default, then a summary.

synthetic task → tiny model (from a seed) → SFT warm start → PRL and its GRPO twin on DeepSpeed
→ evaluation of the warm start, GRPO and PRL (held-out synthetic set + a slice of each benchmark)
→ micro/macro tables, paired comparisons, the store's location and the dashboard command.

Rerunning continues where an interrupted run stopped (cached model and warm start, training
checkpoints, evaluations resumed from the store).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

from flows.config import PipelineConfig, small

from prl.evaluation.config import TASK_RUNNERS
from prl.generation.engines.base import ENGINE_KINDS
from prl.options import add_config_arguments, config_kwargs

from prl_cli.common import OutputOptions, check_store, run_flow, show_progress


@dataclass
class DemoOptions:
    """`prl demo`'s switches beside the pipeline's config."""

    small: bool = False
    """A smoke-test budget (minutes; flows.config.small): 60 warm-start steps, 3 RL steps, 12 synthetic problems + 2 per benchmark; options given as well override it."""


def _cmd_demo(args: argparse.Namespace) -> int:
    return main_args(args)


def demo_config(args: argparse.Namespace) -> PipelineConfig:
    """The demo's config: the default budget (or --small's), with every option given on the command line."""
    given = config_kwargs(args, PipelineConfig)
    base = small(given.pop("out_dir", PipelineConfig.out_dir)) if args.small else PipelineConfig()
    return replace(base, **given)


def main_args(args) -> int:
    from flows.pipeline import pipeline  # prefect: imported when the command runs

    cfg = demo_config(args)
    check_store(cfg.store, write=True)
    return run_flow(Path(cfg.out_dir) / "demo.log", lambda: pipeline(cfg, progress=show_progress(args)), args=args,
                    show=run_summary)


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
    add_config_arguments(p, PipelineConfig, overrides=True, aliases={"out_dir": ("--out",),
                         "eval_task_runner": ("--task-runner",)},
                         choices={"engine": ENGINE_KINDS, "eval_task_runner": TASK_RUNNERS})
    add_config_arguments(p, DemoOptions)
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_demo)
