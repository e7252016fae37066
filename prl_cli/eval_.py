"""``prl eval``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from prl.store.db import DEFAULT_STORE


def _cmd_eval(args: argparse.Namespace) -> int:
    from prl.evaluation.config import EvalConfig

    cfg = EvalConfig(
        model=args.model, datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()), n=args.n,
        db=args.db, run_id=args.run_id, engine=args.engine, limit=args.limit, max_tokens=args.max_tokens,
        temperature=args.temperature, top_p=args.top_p, seed=args.seed, chunk_problems=args.chunk,
        verifier_workers=args.verifier_workers, strict=not args.lenient, max_model_len=args.max_model_len,
        task_runner=args.task_runner, shard_problems=args.shard_problems, shard_dir=args.shard_dir,
        ray_address=args.ray_address, ray_cpus=args.ray_cpus,
    )
    from prl.evaluation.steps import preflight

    preflight(cfg)  # input errors as one line, before Prefect starts
    from pathlib import Path

    from prl import logs

    logs.log_to(Path(cfg.db).parent / "logs" / f"{cfg.resolved_run_id()}.log")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.evaluate import evaluate_flow

    flow = evaluate_flow(cfg)  # refuses --task-runner ray without prefect-ray, before anything starts
    with contextlib.redirect_stdout(sys.stderr):  # libraries print progress to stdout; it carries the result
        summary = flow(cfg, progress=not args.no_progress)
    print(json.dumps(summary, indent=2))
    print(f"next: prl report --db {cfg.db} --runs {summary['run_id']}", file=sys.stderr)
    return 0


def register(sub) -> None:
    """Add ``eval`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "eval",
        help="evaluate a model on benchmarks into a store (Prefect flow, resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Generate --n samples per problem with the evaluation prompt of DESIGN §3 (the model's own chat
template), verify each with Math-Verify in worker processes (verdicts correct / wrong /
no_answer / timeout / gold_unparsable / error), and store every sample in the DuckDB store
--db with the run's reproducibility manifest (config, seed, engine and versions, template hash,
git commit). Runs as the Prefect flow 'evaluate' with a progress bar.

Resumable: the same command (the run id is derived from model and sampling settings) skips
problems already stored and finishes the rest; a killed run loses at most the chunk in flight.
Resuming an existing --run-id with other sampling settings is refused.

Data sets: math500, minerva_math, olympiad_bench, aime24, amc23 (bundled), synth_test (the
synthetic task's held-out split), or paths to .jsonl/.parquet files with problem and answer.

Beyond one process: --task-runner ray cuts the problems into shards of --shard-problems that
run on Ray workers (prefect-ray; a local Ray runtime of --ray-cpus CPUs unless --ray-address
names a cluster). Each shard starts its own engine and writes one Parquet file under
--shard-dir; this process stores each file as it arrives. On a cluster, --shard-dir must be a
directory every node sees and PREFECT_API_URL a Prefect server every node reaches.

examples:
  prl eval --model runs/demo/models/tiny-sft --datasets math500,amc23,synth_test --n 8 \\
           --limit 20 --max-tokens 256 --db runs/store.duckdb
  prl eval --model runs/demo/models/tiny-sft --datasets math500 --n 8 --max-tokens 256 \\
           --task-runner ray --ray-cpus 2 --shard-problems 50 --db runs/store.duckdb
  prl report --db runs/store.duckdb
""")
    p.add_argument("--model", required=True, help="model directory (Hugging Face layout)")
    p.add_argument("--datasets", default="math500", help="comma-separated data sets or files (default math500)")
    p.add_argument("--n", type=int, default=8, help="samples per problem (default 8, as the paper)")
    p.add_argument("--db", default=DEFAULT_STORE, help=f"store file, created if missing (default {DEFAULT_STORE})")
    p.add_argument("--run-id", default=None, help="run id (default: model name + hash of the settings)")
    p.add_argument("--engine", choices=("vllm", "hf"), default="vllm", help="generation engine (default vllm)")
    p.add_argument("--limit", type=int, default=None, help="only the first K problems of each data set")
    p.add_argument("--max-tokens", type=int, default=3072, help="max new tokens per sample (default 3072, as the paper)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--chunk", type=int, default=32, help="problems per generate/verify/store transaction (default 32)")
    p.add_argument("--verifier-workers", type=int, default=2, help="Math-Verify worker processes (default 2)")
    p.add_argument("--max-model-len", type=int, default=None, help="engine context length (default: the model's)")
    p.add_argument("--lenient", action="store_true", help="skip bad rows of user data files (counted) instead of failing")
    p.add_argument("--task-runner", choices=("local", "ray"), default="local",
                   help="local: chunks in this process (default); ray: shards on Ray workers (needs the ray extra)")
    p.add_argument("--shard-problems", type=int, default=64, help="problems per shard with --task-runner ray (default 64)")
    p.add_argument("--shard-dir", default=None, help="shard files' directory (default: <store dir>/shards)")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join, e.g. auto (default: start a local runtime)")
    p.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the local Ray runtime (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_eval)
