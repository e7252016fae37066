"""``prl eval``."""

from __future__ import annotations

import argparse
from pathlib import Path

from prl.evaluation.config import EVAL_DTYPES, TASK_RUNNERS, EvalConfig
from prl.evaluation.stages import preflight
from prl.generation.engines.base import ENGINE_KINDS
from prl.options import add_config_arguments, config_kwargs

from prl_cli.common import OutputOptions, check_store, run_flow, show_progress

HELP = "evaluate a model on benchmarks into a store (Prefect flow, resumable)"


def _cmd_eval(args: argparse.Namespace) -> int:
    cfg = EvalConfig(**config_kwargs(args, EvalConfig))
    check_store(cfg.db, write=True)
    preflight(cfg)  # input errors as one line, before Prefect starts
    if cfg.task_runner != "local":
        from prl.evaluation.shards import check_leftover_shards

        check_leftover_shards(cfg.db, cfg.resolved_run_id(), cfg.shard_dir)
    from flows.evaluate import evaluate_flow

    flow = evaluate_flow(cfg)  # refuses --task-runner ray without prefect-ray, before anything starts
    return run_flow(Path(cfg.db).parent / "logs" / f"{cfg.resolved_run_id()}.log",
                    lambda: flow(cfg, progress=show_progress(args)), args=args,
                    next_hint=lambda summary: f"prl report --db {cfg.db} --run {summary['run_id']}")


def register(sub) -> None:
    """Add ``eval`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "eval",
        help=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Generate --n samples per problem with the evaluation prompt (the model's own chat template;
docs/architecture.md §Evaluation protocol), verify each with Math-Verify in worker
processes (verdicts correct / wrong / no_answer / timeout / gold_unparsable / error), and store
every sample in the DuckDB store --db with the run's reproducibility manifest (config, seed,
engine and versions, template hash, git commit). Runs as the Prefect flow 'evaluate' with a
progress bar.

Resumable: the same command skips problems already stored and finishes the rest; a killed run
loses at most the chunk in flight, and Ctrl-C stops it cleanly (exit status 130). The default
run id names what is evaluated (model directory, data sets, engine, n) and ends in a hash of the
settings and data sets: other data sets are another run. Resuming an existing --run with other
sampling settings is refused.

Precision: --dtype auto (the default) evaluates in the checkpoint's own dtype, the `dtype` (or,
in older files, `torch_dtype`) of its config.json, float32 when it names none: bfloat16 for the
Qwen2.5-Math checkpoints, float32 for the tiny model. It is resolved before the run id is derived,
so the run id and the manifest hold the concrete dtype (--dtype float32 on a float32 model is the
same run). --dtype float32|bfloat16|float16 overrides it.

Data sets: math500, minerva_math, olympiad_bench, aime24, amc23 (bundled), synth_test (the
synthetic task's held-out split), or paths to .jsonl/.parquet files with problem and answer.

Beyond one process: --task-runner ray cuts the problems into shards of --shard-problems that
run on Ray workers (prefect-ray; a local Ray runtime of --ray-cpus CPUs unless --ray-address
names a cluster). Each shard starts its own engine and writes one Parquet file under
--shard-dir; this process stores each file as it arrives. On a cluster, --shard-dir must be a
directory every node sees and PREFECT_API_URL a Prefect server every node reaches.

examples:
  prl eval --model runs/demo/models/tiny-sft --dataset math500,amc23,synth_test --n 8 \\
           --limit 20 --max-tokens 256 --db runs/store.duckdb
  prl eval --model runs/demo/models/tiny-sft --dataset math500 --n 8 --max-tokens 256 \\
           --task-runner ray --ray-cpus 2 --shard-problems 50 --db runs/store.duckdb
  prl report --db runs/store.duckdb
""")
    add_config_arguments(p, EvalConfig, aliases={"chunk_problems": ("--chunk",)},
                         choices={"engine": ENGINE_KINDS, "task_runner": TASK_RUNNERS, "dtype": EVAL_DTYPES},
                         negate={"strict": ("--lenient", "skip bad rows of user data files (counted) instead of failing")})
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_eval)
