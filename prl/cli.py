"""The ``prl`` command line. Each subcommand's --help explains it."""

from __future__ import annotations

import argparse
import errno
import contextlib
import json
import math
import os
import sys

DESCRIPTION = """\
PRL pipeline: Process Reward Learning and its baselines (GRPO, Dr.GRPO, RAFT) for math
reasoning. Subcommands available in this version:

  selfcheck        recompute the worked example of the PRL math and the core invariants
  config check     validate an algorithm config file and print it with defaults resolved
  data synth       write the synthetic arithmetic task (train/test JSONL)
  model build-tiny build the embedded tiny model (tokenizer + Llama weights) from a seed
  model sft        warm-start a model on the synthetic task, reporting accuracy before/after
  generate         sample n responses per problem with the vllm or hf engine
  eval             evaluate a model on benchmarks into a store (Prefect flow, resumable)
  train            train with PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (Prefect flow, resumable)
  report           scores of stored runs with CIs, a paired comparison, the paper's rows
  sql              run one read-only SQL query on a store
  dashboard        browse, compare and inspect the store in a web app (Streamlit, localhost)
  verify           verify one response against a gold answer and print why (JSON)
  demo             the main job: warm start -> PRL + GRPO training -> evaluation -> report -> dashboard
"""


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    import torch

    from prl_core import worked_example
    from prl_core.advantages import group_advantages, prl_advantages
    from prl_core.steps import step_boundaries

    got = worked_example.compute()
    width = max(map(len, got))
    failures = 0
    print("Worked example (DESIGN §2): paths 00/01/10/11, reference 1/4 each, R=1 only for 11, eta=1")
    for key, value in got.items():
        want = worked_example.DOCUMENTED[key]
        ok = abs(value - want) < 5e-7
        failures += not ok
        print(f"  {key:<{width}}  {value:.6f}   documented {want:.6f}   {'ok' if ok else 'MISMATCH'}")

    gen = torch.Generator().manual_seed(args.seed)
    B, T = 40, 64
    rewards = torch.randint(0, 2, (B,), generator=gen).double()
    groups = torch.arange(B) // 5
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T) < lengths[:, None]
    old = torch.randn(B, T, generator=gen, dtype=torch.float64)
    ref = torch.randn(B, T, generator=gen, dtype=torch.float64)
    grpo = group_advantages(rewards, groups)[:, None].expand(B, T) * mask
    checks = {
        "eta=inf equals GRPO exactly": torch.equal(
            prl_advantages(rewards, groups, old, ref, mask, eta=math.inf), grpo
        ),
        "fixed:8 segments share their boundary value": _segments_constant(
            prl_advantages(rewards, groups, old, ref, mask, eta=2.0, boundaries=step_boundaries(mask, "fixed:8")),
            step_boundaries(mask, "fixed:8"), mask,
        ),
    }
    print(f"Invariants on a random batch (B={B}, T={T}, seed {args.seed}):")
    for name, ok in checks.items():
        failures += not ok
        print(f"  {name:<45} {'ok' if ok else 'FAILED'}")
    print("selfcheck: " + ("all checks passed" if failures == 0 else f"{failures} check(s) FAILED"))
    return 0 if failures == 0 else 1


def _segments_constant(rho, boundaries, mask) -> bool:
    for b in range(rho.shape[0]):
        cols = mask[b].nonzero().squeeze(1).tolist()
        value = None
        for c in reversed(cols):
            if boundaries[b, c]:
                value = rho[b, c]
            elif rho[b, c] != value:
                return False
    return True


def _cmd_config_check(args: argparse.Namespace) -> int:
    from prl_core.config import AlgorithmConfig, ConfigError

    try:
        cfg = AlgorithmConfig.from_yaml(args.file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.to_dict(), indent=2))
    return 0


def _cmd_data_synth(args: argparse.Namespace) -> int:
    from . import task

    for split, n in (("train", args.train), ("test", args.test)):
        path = task.write_jsonl(task.generate(split, n, seed=args.seed), f"{args.out}/synth_{split}.jsonl")
        print(f"wrote {n} {split} problems to {path}")
    return 0


def _cmd_build_tiny(args: argparse.Namespace) -> int:
    from .tiny_model import build_tiny, file_hashes

    out = build_tiny(args.out, seed=args.seed)
    for name, digest in file_hashes(out).items():
        print(f"  {digest[:16]}  {name}")
    print(f"built the tiny model in {out} (seed {args.seed}); AutoTokenizer round trip verified")
    return 0


def _cmd_sft(args: argparse.Namespace) -> int:
    from .sft import SFTConfig, run_sft

    cfg = SFTConfig(steps=args.steps, max_minutes=args.minutes, batch_size=args.batch_size, lr=args.lr,
                    seed=args.seed, eval_size=args.eval_size, direct_frac=args.direct_frac)
    report = run_sft(args.model, args.out, cfg)
    print(json.dumps({k: report[k] for k in ("steps", "train_seconds", "accuracy_before_greedy",
                                             "accuracy_after_greedy", "accuracy_after_sampled")}, indent=2))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main_args

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return main_args(args)


def _cmd_verify(args: argparse.Namespace) -> int:
    from .datasets import normalize_gold
    from .verifier import verify_one

    gold = normalize_gold(args.dataset, args.gold) if args.dataset else args.gold
    v = verify_one(args.response, gold, timeout_s=args.timeout)
    print(json.dumps({"verdict": v.verdict, "extracted_answer": v.extracted, "gold_normalized": gold,
                      "gold_raw": args.gold, "score": v.score, "ms": round(v.ms, 2), "detail": v.detail}, indent=2))
    return 0


def _cmd_sql(args: argparse.Namespace) -> int:
    from .sql_cli import QueryRefused, render, run_query

    try:
        cols, rows = run_query(args.db, args.query, timeout_s=args.timeout)
    except QueryRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(cols, rows, args.format))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .paper import load_paper_tables, render_check

    if args.db is None:
        print(render_check(load_paper_tables()))
        return 0
    from .report import report
    from .store import Store

    store = Store(args.db, create=False)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()] if args.runs else None
    ks = [int(k) for k in args.k.split(",")] if args.k else None
    print(report(store, runs, ks, as_json=args.json, include_paper=not args.no_paper))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .train_config import RunConfig

    cfg = RunConfig.from_yaml(args.config, db=args.db, run_id=args.run_id, out_dir=args.out, steps=args.steps,
                              model=args.model)
    cfg.train.validate(cfg.algorithm, int(os.environ.get("WORLD_SIZE", "1")))
    from .engines.base import check_model_dir

    check_model_dir(cfg.train.model)
    if not args.resume:
        from .train import check_fresh_start

        check_fresh_start(cfg.train)  # one line, before Prefect starts
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.train import train

    with contextlib.redirect_stdout(sys.stderr):  # libraries print progress to stdout; it carries the result
        result = train(cfg, resume=args.resume, progress=not args.no_progress)
    print(json.dumps(result, indent=2, default=str))
    print(f"next: prl report --db {cfg.train.db}   (training curves: prl sql --db {cfg.train.db} "
          f"\"select step, name, value from train_metrics where run_id = '{result['run_id']}'\")", file=sys.stderr)
    return 0


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    app = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
    if not Path(args.db).exists():
        print(f"note: {args.db} does not exist yet; the app will say so until a flow creates it", file=sys.stderr)
    if args.host not in ("127.0.0.1", "localhost"):
        print(f"warning: serving on {args.host}: anyone who can reach this address can read the store", file=sys.stderr)
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", args.host, "--server.port",
           str(args.port), "--server.headless", "true", "--browser.gatherUsageStats", "false", "--", "--db", args.db]
    print(f"dashboard for {args.db}: http://{args.host}:{args.port}", file=sys.stderr)
    sys.stderr.flush()
    os.execv(sys.executable, cmd)  # become the server: signals (Ctrl-C, kill) reach it directly


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import EvalConfig

    cfg = EvalConfig(
        model=args.model, datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()), n=args.n,
        db=args.db, run_id=args.run_id, engine=args.engine, limit=args.limit, max_tokens=args.max_tokens,
        temperature=args.temperature, top_p=args.top_p, seed=args.seed, chunk_problems=args.chunk,
        verifier_workers=args.verifier_workers, strict=not args.lenient, max_model_len=args.max_model_len,
        task_runner=args.task_runner, shard_problems=args.shard_problems, shard_dir=args.shard_dir,
        ray_address=args.ray_address, ray_cpus=args.ray_cpus,
    )
    from .evaluate import preflight

    preflight(cfg)  # input errors as one line, before Prefect starts
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.evaluate import evaluate_flow

    flow = evaluate_flow(cfg)  # refuses --task-runner ray without prefect-ray, before anything starts
    with contextlib.redirect_stdout(sys.stderr):  # libraries print progress to stdout; it carries the result
        summary = flow(cfg, progress=not args.no_progress)
    print(json.dumps(summary, indent=2))
    print(f"next: prl report --db {cfg.db} --runs {summary['run_id']}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prl", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "selfcheck",
        help="recompute the worked example and core invariants of prl_core",
        description="Recompute the four-path worked example of DESIGN §2 with prl_core (optimal policy, "
        "net value C, prefix value V, and the reference-policy counter-case), compare with the documented "
        "values, and check eta=inf == GRPO and the segment fill on a random batch. Exit status 1 on any mismatch.",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random invariant batch (default 0)")
    p.set_defaults(func=_cmd_selfcheck)

    p = sub.add_parser("config", help="algorithm config tools")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = csub.add_parser(
        "check",
        help="validate a config file",
        description="Validate the 'algorithm:' section of a YAML config (types, ranges, cross-field rules) "
        "and print it as JSON with every default resolved. Exit status 2 with a message saying how to fix it. "
        "Example: prl config check configs/algorithm/prl.yaml",
    )
    c.add_argument("file", help="YAML file, e.g. configs/algorithm/prl.yaml")
    c.set_defaults(func=_cmd_config_check)

    p = sub.add_parser("data", help="data set tools")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    d = dsub.add_parser(
        "synth",
        help="write the synthetic arithmetic task",
        description="Write DIR/synth_train.jsonl and DIR/synth_test.jsonl: multi-step arithmetic word problems "
        "(levels 1-4 = number of operations) with step-by-step solutions separated by blank lines and a "
        "\\boxed{} answer, in the schema of the bundled benchmarks. Deterministic in --seed; the splits "
        "never share a problem. Example: prl data synth --out data/synth",
    )
    d.add_argument("--out", required=True, help="output directory")
    d.add_argument("--train", type=int, default=20000, help="training problems (default 20000)")
    d.add_argument("--test", type=int, default=400, help="test problems (default 400 = the whole test split)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_cmd_data_synth)

    p = sub.add_parser("model", help="the embedded tiny model")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    m = msub.add_parser(
        "build-tiny",
        help="build the tiny model from a seed",
        description="Train a byte-level BPE tokenizer on the synthetic task, add a chat template, and initialise a "
        "small Llama-architecture model (4 layers, hidden 128, head_dim 32) from --seed; save a standard Hugging "
        "Face directory that transformers, vLLM and DeepSpeed load. Same seed -> byte-identical files. "
        "Example: prl model build-tiny --out models/tiny",
    )
    m.add_argument("--out", required=True, help="output directory")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_cmd_build_tiny)
    m = msub.add_parser(
        "sft",
        help="warm-start a model on the synthetic task",
        description="Supervised fine-tuning on the synthetic task's solutions (loss on the response only), then "
        "save to --out with sft_report.json holding the held-out accuracy before and after (greedy and sampled). "
        "Example: prl model sft --model models/tiny --out models/tiny-sft",
    )
    m.add_argument("--model", required=True, help="model directory to start from (e.g. from build-tiny)")
    m.add_argument("--out", required=True, help="output directory for the fine-tuned model")
    m.add_argument("--steps", type=int, default=600, help="optimizer steps (default 600, ~4 min on 2 cores)")
    m.add_argument("--minutes", type=float, default=15.0, help="wall-clock safety limit (default 15)")
    m.add_argument("--batch-size", type=int, default=64)
    m.add_argument("--lr", type=float, default=2e-3)
    m.add_argument("--eval-size", type=int, default=200, help="held-out problems for the accuracy report")
    m.add_argument("--direct-frac", type=float, default=0.0,
                   help="fraction of training solutions without the working, just the boxed answer "
                        "(default 0; the demo uses 0.5 so that RL has a behaviour to learn)")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_cmd_sft)

    from .generate import add_cli

    add_cli(sub)

    p = sub.add_parser(
        "verify",
        help="verify one response against a gold answer and say why",
        description="Run Math-Verify on one response and print JSON: the verdict (correct, wrong, no_answer, "
        "timeout, gold_unparsable, error), the extracted answer, the normalised gold and the time taken. "
        "With --dataset the gold is normalised as that benchmark's loader does (e.g. minerva's boxed solution). "
        "Example: prl verify --dataset minerva_math --gold 'so $\\boxed{4.5e33}$' --response '\\boxed{4.5\\times10^{33}}'",
    )
    p.add_argument("--gold", required=True, help="gold answer (raw)")
    p.add_argument("--response", required=True, help="model response text")
    p.add_argument("--dataset", default=None, help="normalise the gold as this data set does (e.g. minerva_math)")
    p.add_argument("--timeout", type=int, default=5, help="Math-Verify timeout in whole seconds (default 5)")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "sql",
        help="run one read-only SQL query on a store",
        description="Run one SELECT (or WITH/DESCRIBE/SHOW) statement on a DuckDB store opened read-only, with "
        "external access (files, network, extensions) off and the configuration locked. Writes, ATTACH, COPY, "
        "INSTALL/LOAD and SET are refused; queries longer than --timeout are cut off. Example: prl sql --db "
        "runs/demo/store.duckdb \"select run_id, dataset, average_at_n from dataset_metrics\"",
    )
    p.add_argument("query", help='e.g. "select dataset, avg(score) from samples group by 1"')
    p.add_argument("--db", required=True, help="store file (.duckdb)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before the query is cut off (default 10)")
    p.set_defaults(func=_cmd_sql)

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
    p.add_argument("--db", default="runs/store.duckdb", help="store file, created if missing (default runs/store.duckdb)")
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

    p = sub.add_parser(
        "train",
        help="train with PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (Prefect flow, resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Train a policy as the paper does: per step, n rollouts per prompt (vLLM, weights reloaded in
place), Math-Verify rewards, old-policy and reference log-probs, advantages from prl_core for
the config's estimator, ppo_epochs of mini-batch PPO-clip updates through deepspeed.initialize,
per-step metrics (reward, accuracy, KL to the reference, entropy, clip fraction, rho, grad norm,
phase times) and per-segment S and rho into the store, a DeepSpeed checkpoint, and periodic
evaluations of the current policy stored as eval runs linked to the step.

The config file has an 'algorithm:' and a 'train:' section (configs/train/*.yaml); contradictory
settings are refused before anything starts. --resume continues from the last checkpoint with
the same step count and data order. Several processes: deepspeed --num_gpus N --module prl.train --config FILE.

example:
  prl train --config configs/train/tiny_prl.yaml --db runs/store.duckdb --steps 20
  prl train --config configs/train/tiny_prl.yaml --resume
""")
    p.add_argument("--config", required=True, help="YAML with algorithm: and train: sections")
    p.add_argument("--model", default=None, help="starting model directory (default: the config's train.model)")
    p.add_argument("--db", default=None, help="store file (default: the config's train.db)")
    p.add_argument("--run-id", default=None, help="run id (default: the config's, else the out dir's name)")
    p.add_argument("--out", default=None, help="output directory for checkpoints and weights (default: the config's)")
    p.add_argument("--steps", type=int, default=None, help="total steps (default: the config's)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the out directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser(
        "dashboard",
        help="browse, compare and inspect the store in a web app (Streamlit, localhost)",
        description="Start the Streamlit dashboard over a store: Runs (with manifests and the paper's reference "
        "rows), Scores (average@n, pass@k with CIs, micro/macro, pass@k curves), Compare (paired deltas, problems "
        "gained/lost), Problem (every sample of a problem, text shown as text), Failures (verdict categories, "
        "suspicious passes), Training (metric curves, eval points, segments shaded by rho) and a read-only SQL box. "
        "It reads the store per query, so it shows fresh data while flows write. Bound to 127.0.0.1 unless --host "
        "says otherwise. example: prl dashboard --db runs/store.duckdb",
    )
    p.add_argument("--db", default="runs/store.duckdb", help="store file (default runs/store.duckdb)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.set_defaults(func=_cmd_dashboard)

    p = sub.add_parser(
        "report",
        help="scores of stored runs with CIs, a paired comparison, and the paper's reference rows",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
With --db: for each run (default: every run with samples), per data set average@n, unbiased
pass@k and maj@n with 95% bootstrap CIs over problems; micro (size-weighted, the paper's
"5 Avg") and macro (mean of data sets) aggregates labelled with sizes; the suspicious passes
(correct answer, reasoning that hardly refers to the problem). Runs are compared only when
named: with --runs A,B (the first two named), B is compared against A on their common problems:
difference of average@n with a paired bootstrap CI, McNemar's exact test on pass@k success,
problems gained and lost. If they share no problem (different data sets), both runs' tables are
printed and the report says there is nothing in common to compare.

Always: the paper's Tables 1 and 3 as reference rows, with each row's "5 Avg" recomputed from
its columns (sizes 500/272/675/40/30) and the row that does not match flagged.

example:
  prl report --db runs/store.duckdb --runs base-run,prl-run --k 1,8
""")
    p.add_argument("--db", default=None, help="store file; without it only the paper's rows are checked")
    p.add_argument("--runs", default=None,
                   help="comma-separated run ids (default: every run with samples, none compared; A,B: B is "
                        "compared against A)")
    p.add_argument("--k", default=None, help="comma-separated k for pass@k (default 1,2,4,8,… up to n)")
    p.add_argument("--json", action="store_true", help="machine-readable JSON instead of tables")
    p.add_argument("--no-paper", action="store_true", help="leave out the paper's reference rows")
    p.set_defaults(func=_cmd_report)

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
    return parser


def main(argv: list[str] | None = None) -> int:
    # vLLM logs every engine step at INFO; users see our own progress lines instead.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries results (JSON, tables)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Prefect's temporary API server gets 20 s to start by default; on a loaded 2-core machine (eight
    # dashboard clients beside an evaluation, measured) that was too short and the run failed.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except Exception as e:  # known input errors: one line, no traceback
        if _is_user_error(e):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise


def _is_user_error(e: Exception) -> bool:
    from prl_core.config import ConfigError

    from .datasets import DatasetError
    from .engines.base import EngineError
    from .evaluate import EvalError
    from .prompts import PromptError
    from .report import ReportError
    from .store import StoreError

    from .train import CheckpointError

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True  # a full disk or quota: "error: [Errno 28] No space left on device: 'PATH'"
    return isinstance(e, (ConfigError, DatasetError, EngineError, EvalError, PromptError, ReportError, StoreError,
                          CheckpointError))


if __name__ == "__main__":
    sys.exit(main())
