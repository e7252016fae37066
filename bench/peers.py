"""Side by side with the peers: the same work in the project and in the tool a researcher would use
instead, in one run, as ratios (issue 18). Each peer runs in its own environment under bench/.envs/,
made on first use by the script in bench/peers/<tool>/ (pinned versions, never the project's .venv):

    python bench/peers.py [--part advantages|verification|rl_step|analysis|all] [--model DIR]

    bench/peers/verl/make_fixture.sh --env-only   verl 0.9.1 (numpy<2, omegaconf's antlr4 4.9.3)
    bench/peers/trl/make_env.sh                   TRL 1.16.0 on the project's torch/transformers pins
    bench/peers/lighteval/make_env.sh             lighteval 0.8.1 (its latex2sympy2_extended 1.0.6, numpy<2)

Parts:

* ``advantages``: verl 0.9.1's ``compute_grpo_outcome_advantage`` (its reference GRPO, a Python loop
  over the batch) and ``compute_grpo_vectorized_outcome_advantage`` against ``prl_core``'s GRPO,
  Dr.GRPO and PRL at η = ∞ on the same tensors (B = 640, L = 3,072, the paper's batch; and a small
  case), results checked equal where the definitions coincide. Conventions that differ are stated in
  the results file: a group of one response gets R / (1 + eps) in verl (mean 0, std 1) and R itself
  here (no baseline; prl_core.advantages._group_normalize); both add eps = 1e-6 to the unbiased std. verl has no process-reward path
  that PRL's coincides with (its KL-in-reward penalty shifts the outcome score), so only the outcome
  path is compared. The small case's inputs and verl's outputs are committed under tests/data/peers/
  and checked in CI by tests/test_peers.py without installing verl.

* ``verification``: lighteval 0.8.1's ``extractive_match`` (the metric and release that labelled the
  Saturn AIME file: it reproduces that file's labels row for row) against our verifier on the 613 real
  outside responses of tests/data/external/ (bench/peers/lighteval/make_input.py): responses per second
  (our verify_one in one process, as lighteval's metric runs, and the VerifierPool the pipeline uses)
  and agreement per file, each disagreement listed. Their verdicts are committed as
  tests/data/peers/lighteval_verdicts.json and checked in CI against our verifier.

* ``rl_step``: TRL's ``GRPOTrainer`` (bench/peers/trl/grpo_step.py) configured as our GRPO step (the
  mapping of every setting is in its output) against our trainer's GRPO step with the hf engine (the
  same generation backend as TRL's), with vLLM (our default) and our PRL step, on the embedded tiny
  model warm-started once (300 SFT steps), the same prompts at every step: time per step and its
  phases, completion lengths, peak RSS. What cannot be made equal is listed in the results file.

* ``analysis``: the questions a researcher asks after an evaluation, answered from a 1 M-sample store
  (``prl.evaluation.report`` and the store's named queries) and from the same samples as one JSONL
  file per run with pandas, each side in a fresh process (cold: its time includes reading the data;
  peak RSS from /proc/self/status VmHWM): average@n and pass@k per data set with 95% bootstrap CIs for
  one run, the success-set diff of two runs (problems solved by one run's n samples and not the
  other's), and the run's suspicious passes. The answers are checked equal.

Writes bench/results/peers.json (the parts run; the others kept) and re-renders RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from common import machine_info, median_ms, provenance, render_all, write_json  # noqa: E402

PARTS = ("advantages", "analysis", "verification", "rl_step")
"""The parts of bench/results/peers.json, each measured (and re-measured with ``--part``) on its own, each with its
own machine and provenance."""

CODE = ("bench/peers.py", "bench/peers", "prl_core", "prl/training", "prl/generation", "prl/grading", "prl/store",
        "prl/evaluation/report.py", "prl/data", "sql/schema.sql", "sql/queries.sql", "tests/data/external")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

# torch and the project are imported where they are used: the pandas side of the analysis runs in a
# process that imports neither (its peak memory is the notebook's, not ours)

FIXTURE = ROOT / "tests" / "data" / "peers" / "verl_grpo_small.json"


ENV_SCRIPTS = {"verl": ["bench/peers/verl/make_fixture.sh", "--env-only"], "trl": ["bench/peers/trl/make_env.sh"],
               "lighteval": ["bench/peers/lighteval/make_env.sh"]}
"""The script that makes each peer's environment under bench/.envs/<tool> (pinned, never the project's)."""


def peer_python(tool: str) -> Path:
    """The peer's interpreter, its environment made first by its script when it is missing."""
    py = HERE / ".envs" / tool / "bin" / "python"
    if not py.exists():
        print(f"[peers] making {tool}'s environment: {' '.join(ENV_SCRIPTS[tool])}", file=sys.stderr)
        subprocess.run(["bash", *ENV_SCRIPTS[tool]], check=True, cwd=ROOT)
    return py


def make_case(groups: int, n: int, length: int, seed: int) -> dict:
    """Binary outcome scores, ``groups`` prompts × ``n`` responses, response lengths 1..length."""
    import torch

    g = torch.Generator().manual_seed(seed)
    b = groups * n
    lengths = torch.randint(1, length + 1, (b,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    return {"scores": torch.randint(0, 2, (b,), generator=g).float(), "index": torch.arange(groups).repeat_interleave(n),
            "mask": mask}


def ours(case: dict) -> dict:
    import torch

    from prl_core.config import AlgorithmConfig
    from prl_core.estimators import compute_advantages

    mask = case["mask"]
    zeros = torch.zeros(mask.shape, dtype=torch.float32)
    cfgs = {"grpo": AlgorithmConfig(estimator="grpo"), "dr_grpo": AlgorithmConfig(estimator="dr_grpo"),
            "prl_eta_inf": AlgorithmConfig(estimator="prl", eta="inf", step_split="token")}
    return {k: (lambda c=c: compute_advantages(c, case["scores"], case["index"], zeros, zeros, mask))
            for k, c in cfgs.items()}


def advantages(repeats: int) -> dict:
    import torch

    verl_py = peer_python("verl")
    cases = {"paper": make_case(128, 5, 3072, seed=0), "small": make_case(4, 5, 16, seed=1)}
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pt", Path(tmp) / "out.pt"
        torch.save(cases, inp)
        subprocess.run([str(verl_py), str(HERE / "peers" / "verl" / "advantages.py"), str(inp), str(out),
                        "--repeats", str(repeats)], check=True)
        peer = torch.load(out, weights_only=False)
    result = {"verl": peer["verl"], "peer_env": {"torch": peer["torch"], "numpy": peer["numpy"]}, "cases": {}}
    for name, case in cases.items():
        fns = ours(case)
        mine = {k: fn() for k, fn in fns.items()}
        ms = {k: median_ms(fn, repeats if case["mask"].numel() > 1e5 else 3 * repeats) for k, fn in fns.items()}
        v = peer["cases"][name]
        checks = {
            "grpo = verl grpo_loop": _close(mine["grpo"], v["grpo_loop"]["advantages"]),
            "grpo = verl grpo_vectorized": _close(mine["grpo"], v["grpo_vectorized"]["advantages"]),
            "dr_grpo = verl dr_grpo_loop": _close(mine["dr_grpo"], v["dr_grpo_loop"]["advantages"]),
            "prl (eta inf) = verl grpo_loop": _close(mine["prl_eta_inf"], v["grpo_loop"]["advantages"]),
        }
        b, length = case["mask"].shape
        result["cases"][name] = {
            "B": b, "L": length, "checks": checks,
            "ms": {"ours": ms, "verl": {k: x["ms"] for k, x in v.items()}},
            "ratios": {"verl grpo_loop / ours grpo": v["grpo_loop"]["ms"] / ms["grpo"],
                       "verl grpo_vectorized / ours grpo": v["grpo_vectorized"]["ms"] / ms["grpo"],
                       "verl grpo_loop / ours prl (eta inf)": v["grpo_loop"]["ms"] / ms["prl_eta_inf"]}}
        if name == "small":
            write_fixture(case, v, peer)
    result["conventions"] = [
        "both: A = (R - mean_g) / (std_g + 1e-6), std unbiased (n - 1), broadcast over the response mask",
        "a group of one response: verl A = R / (1 + 1e-6) (mean 0, std 1), prl_core A = R (no baseline): equal "
        "within the tolerance; the cases here have groups of 5",
        "verl returns float32 advantages; prl_core returns the log-prob dtype (float32 here)",
    ]
    return result


def _close(a, b) -> dict:
    diff = float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
    return {"max_abs_diff": diff, "equal": diff <= 1e-5}


def write_fixture(case: dict, verl_out: dict, peer: dict) -> None:
    """The small case's inputs and verl's outputs, for tests/test_peers.py (CI runs it without verl)."""
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": {"made_by": "python bench/peers.py --part advantages (bench/peers/verl/advantages.py in "
                                     "bench/.envs/verl)", "verl": peer["verl"], "torch": peer["torch"],
                          "functions": ["verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage",
                                        "verl.trainer.ppo.core_algos.compute_grpo_vectorized_outcome_advantage",
                                        "compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=False)"]},
           "scores": case["scores"].tolist(), "index": case["index"].tolist(),
           "lengths": case["mask"].sum(dim=1).tolist(), "L": case["mask"].shape[1],
           "verl": {k: x["advantages"].tolist() for k, x in verl_out.items()}}
    FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")


RUN_A, RUN_B = "run-3", "run-7"
CI_ITERS = 2000


def analysis_ours(data: Path) -> dict:
    """The project's answers: the report's functions over the store."""
    from prl_core.metrics import bootstrap_ci

    from prl.evaluation.report import compare_runs, load_run, per_problem
    from prl.store.db import Store

    out, t = {}, time.perf_counter()
    store = Store(data / "store.duckdb", create=False)
    run = load_run(store, RUN_A)
    n = run.n
    scores = {}
    for metric, k in (("average", None), ("pass", 1), ("pass", n)):
        for d, v in per_problem(run, metric, k).items():
            lo, hi = bootstrap_ci(v, iters=CI_ITERS)
            scores[f"{d} {metric}@{k or n}"] = [float(v.mean()), lo, hi]
    out["scores"] = {"seconds": time.perf_counter() - t, "answer": scores}
    t = time.perf_counter()
    c = compare_runs(Store(data / "store.duckdb", create=False), RUN_A, RUN_B, k=n)
    out["diff"] = {"seconds": time.perf_counter() - t, "answer": {"gained": sorted(c["gained"]),
                                                                  "lost": sorted(c["lost"])}}
    t = time.perf_counter()
    rows = Store(data / "store.duckdb", create=False).rows("suspicious_passes_for_run", run_id=RUN_A, limit=10**9)
    out["suspicious"] = {"seconds": time.perf_counter() - t,
                         "answer": sorted(f"{r[1]}#{r[2]}" for r in rows)}
    return out


def analysis_pandas(data: Path) -> dict:
    """The notebook a researcher would write instead: pandas over one JSONL file per run."""
    import math

    import numpy as np
    import pandas as pd

    def load(run):
        return pd.read_json(data / f"{run}.jsonl", lines=True)

    def ci(v):
        rng = np.random.default_rng(0)
        means = v[rng.integers(0, len(v), (CI_ITERS, len(v)))].mean(axis=1)
        return [float(v.mean()), *np.quantile(means, [0.025, 0.975]).tolist()]

    out, t = {}, time.perf_counter()
    a = load(RUN_A)
    g = a.assign(ok=a["verdict"] == "correct").groupby(["dataset", "problem_id"])["ok"].agg(["sum", "size"]).reset_index()
    n = int(g["size"].min())
    scores = {}
    for d, x in g.groupby("dataset"):
        c = x["sum"].to_numpy()
        scores[f"{d} average@{n}"] = ci(c / n)
        for k in (1, n):
            scores[f"{d} pass@{k}"] = ci(np.array([1 - math.comb(n - ci_, k) / math.comb(n, k) for ci_ in c]))
    out["scores"] = {"seconds": time.perf_counter() - t, "answer": scores}
    t = time.perf_counter()
    solved = {}
    for run in (RUN_A, RUN_B):
        df = load(run)
        s = df.assign(ok=df["verdict"] == "correct").groupby("problem_id")["ok"].any()
        solved[run] = s
    both = solved[RUN_A].index.intersection(solved[RUN_B].index)
    sa, sb = solved[RUN_A][both], solved[RUN_B][both]
    out["diff"] = {"seconds": time.perf_counter() - t,
                   "answer": {"gained": sorted(both[sb & ~sa]), "lost": sorted(both[sa & ~sb])}}
    t = time.perf_counter()
    a = load(RUN_A)
    ok = a["verdict"] == "correct"
    fit = a["best_fit"] if "best_fit" in a else pd.Series([None] * len(a))
    susp = ok & (a["answer_only"].fillna(False).astype(bool) | (fit.notna() & (fit != a["problem_id"]))
                 | (fit.isna() & (a["relevance"] < 0.15)))
    out["suspicious"] = {"seconds": time.perf_counter() - t,
                         "answer": sorted(f"{p}#{i}" for p, i in zip(a["problem_id"][susp], a["sample_idx"][susp]))}
    return out


def analysis_worker(side: str, data: Path) -> None:
    t = time.perf_counter()
    out = analysis_ours(data) if side == "ours" else analysis_pandas(data)
    out["total_seconds"] = time.perf_counter() - t
    # VmHWM: this process image's peak RSS (getrusage's ru_maxrss survives exec: it would report the parent's)
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    out["peak_rss_mib"] = int(hwm.split()[1]) / 1024
    print(json.dumps(out))


def analysis(rows: int) -> dict:
    """Build the store and the JSONL files once (not timed), then each side in a fresh process."""
    import pyarrow.json  # noqa: F401  (pyarrow writes the JSONL the way a tool's export would)
    from store import N, PROBLEMS, sample_table

    from prl.store.db import Store

    runs = max(8, round(rows / (sum(PROBLEMS.values()) * N)))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        store = Store(data / "store.duckdb")
        store.execute_many("upsert_run", ({"run_id": f"run-{r}", "kind": "eval", "model": "bench", "status": "finished",
                                           "config": {"n": N}, "manifest": {}, "parent_run_id": None,
                                           "train_step": None} for r in range(runs)))
        table = sample_table(runs)
        store.insert_sample_table(table)
        frame = table.to_pandas()
        for run, part in frame.groupby("run_id"):
            part.to_json(data / f"{run}.jsonl", orient="records", lines=True)
        del frame
        sides = {}
        for side in ("ours", "pandas"):
            r = subprocess.run([sys.executable, __file__, "--analysis-worker", side, "--data", str(data)],
                               capture_output=True, text=True, check=True, cwd=ROOT)
            sides[side] = json.loads(r.stdout.strip().splitlines()[-1])
        jsonl_mib = sum(p.stat().st_size for p in data.glob("*.jsonl")) / 2**20
        store_mib = (data / "store.duckdb").stat().st_size / 2**20
    checks = {}
    for q in ("scores", "diff", "suspicious"):
        a, b = sides["ours"][q]["answer"], sides["pandas"][q]["answer"]
        if q == "scores":
            diff = max(abs(x - y) for k in a for x, y in zip(a[k], b[k])) if set(a) == set(b) else math.inf
            checks[q] = {"equal": diff <= 1e-2, "max_abs_diff": diff, "note": "values equal; CI ends within 0.01 "
                         "(the two bootstraps draw different resamples)"}
            checks[q]["values_equal"] = max(abs(a[k][0] - b[k][0]) for k in a) <= 1e-12 if set(a) == set(b) else False
            checks[q]["equal"] = checks[q]["equal"] and checks[q]["values_equal"]
        else:
            checks[q] = {"equal": a == b, "size": len(a) if isinstance(a, list) else {k: len(v) for k, v in a.items()}}
    questions = {q: {"ours_s": sides["ours"][q]["seconds"], "pandas_s": sides["pandas"][q]["seconds"],
                     "pandas / ours": sides["pandas"][q]["seconds"] / sides["ours"][q]["seconds"]}
                 for q in ("scores", "diff", "suspicious")}
    return {"rows": table.num_rows, "runs": runs, "store_mib": store_mib, "jsonl_mib": jsonl_mib,
            "questions": questions, "total": {k: sides[k]["total_seconds"] for k in sides},
            "peak_rss_mib": {k: sides[k]["peak_rss_mib"] for k in sides}, "checks": checks}


RL = {"prompts_per_step": 16, "group": 5, "max_tokens": 96, "lr": 1e-5, "micro_batch": 8, "grad_accum": 2,
      "pool": 2000, "seed": 0}
"""The RL step both sides run: the TrainConfig defaults (16 prompts x 5, 96 tokens, lr 1e-5, optimizer
mini-batch 16 = 2 micro-batches of 8, fp32), from a pool of 2,000 synthetic training problems."""


def warm_model(work: Path) -> Path:
    """The embedded tiny model warm-started on the synthetic task (300 SFT steps), built once under ``work``."""
    warm = work / "warm"
    if (warm / "sft_report.json").exists():
        return warm
    prl = [sys.executable, "-m", "prl_cli"]
    subprocess.run([*prl, "model", "build-tiny", "--out", str(work / "tiny")], check=True, cwd=ROOT)
    subprocess.run([*prl, "model", "sft", "--model", str(work / "tiny"), "--out", str(warm), "--steps", "300"],
                   check=True, cwd=ROOT)
    return warm


def rl_train_config(model: Path, tmp: Path, engine: str, steps: int, ref_kl_metric: bool = True):
    from prl.training.config import TrainConfig

    return TrainConfig(model=str(model), out_dir=str(tmp / "out"), db=str(tmp / "store.duckdb"), run_id="peers",
                       seed=RL["seed"], steps=steps + 1000, checkpoint_every=10**6, export_checkpoints=False,
                       prompts_per_step=RL["prompts_per_step"], train_size=RL["pool"], max_tokens=RL["max_tokens"],
                       engine=engine, lr=RL["lr"], mini_batch_size=RL["micro_batch"] * RL["grad_accum"],
                       micro_batch_size=RL["micro_batch"], eval_datasets=(), threads=2, ref_kl_metric=ref_kl_metric)


def rl_prompts(model: Path, steps: int, out: Path) -> None:
    """The prompts our trainer draws at steps 0..steps-1, in that order, rendered as its engine renders them,
    for TRL (``--in-order``): both sides see the same prompts at every step."""
    from transformers import AutoTokenizer

    from prl.generation.prompts import build_prompt
    from prl.training.train import load_train_problems, prompt_indices

    t = rl_train_config(model, out.parent, "hf", steps)
    problems = load_train_problems(t)
    tok = AutoTokenizer.from_pretrained(model)
    with out.open("w") as f:
        for step in range(steps):
            for i in prompt_indices(len(problems), step, t.prompts_per_step, t.seed):
                f.write(json.dumps({"prompt": build_prompt(tok, problems[i]["problem"]),
                                    "gold": problems[i]["gold"]}) + "\n")


def rl_worker(spec: str, model: Path, steps: int, warmup: int) -> None:
    """One side of the RL step in this fresh process: our Trainer (estimator:engine) for ``steps`` steps.
    ``grpo-noref``: GRPO without the reference (``ref_kl_metric: false``), as TRL's β = 0 runs it."""
    from prl_core.config import AlgorithmConfig

    from prl.training.config import RunConfig
    from prl.training.train import Trainer

    estimator, engine = spec.split(":")
    algo = (AlgorithmConfig(estimator="grpo", n_samples=RL["group"]) if estimator.startswith("grpo") else
            AlgorithmConfig(estimator="prl", eta=20, step_split="text:\n\n", n_samples=RL["group"]))
    with tempfile.TemporaryDirectory() as tmp:
        config = rl_train_config(model, Path(tmp), engine, steps, ref_kl_metric=estimator != "grpo-noref")
        tr = Trainer(RunConfig(algo, config), log=lambda _m: None,
                     progress=False)
        t0 = time.perf_counter()
        tr.open()
        start_s = time.perf_counter() - t0
        rows = []
        try:
            for i in range(steps):
                t = time.perf_counter()
                m = tr.step()
                rows.append({"step": i, "warmup": i < warmup, "wall_s": time.perf_counter() - t,
                             **{k.split("/")[1] + "_s": v for k, v in m.items() if k.startswith("time/")},
                             "mean_reward": m["reward/mean"], "mean_completion_tokens": m["response/length"],
                             "clipped_frac": m["response/clipped_frac"]})
        finally:
            tr.close()
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    print(json.dumps({"spec": spec, "start_s": start_s, "steps": rows, "peak_rss_mib": int(hwm.split()[1]) / 1024}))


RL_ORDER = ("trl", "grpo-noref:hf", "grpo:hf", "prl:hf", "trl", "prl:hf", "grpo:hf", "grpo-noref:hf", "grpo:vllm",
            "trl")
"""The runs of ``--part rl_step``, in order (each in a fresh process)."""


def _median_of(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


def _median(rows: list[dict], key: str) -> float:
    import statistics

    return statistics.median(r[key] for r in rows if not r["warmup"])


def rl_step(model: Path | None, steps: int, warmup: int) -> dict:
    """TRL's GRPOTrainer and our GRPO and PRL steps on the same model and prompts, each in a fresh process."""
    trl_py = peer_python("trl")
    model = model or warm_model(ROOT / "bench" / "out" / "peers")
    sides = {}
    with tempfile.TemporaryDirectory() as tmp:
        prompts, out = Path(tmp) / "prompts.jsonl", Path(tmp) / "trl.json"
        rl_prompts(model, steps, prompts)
        trl_cmd = [str(trl_py), str(HERE / "peers" / "trl" / "grpo_step.py"), "--model", str(model), "--prompts",
                   str(prompts), "--out", str(out), "--steps", str(steps), "--warmup-steps", str(warmup),
                   "--prompts-per-step", str(RL["prompts_per_step"]), "--group", str(RL["group"]), "--max-tokens",
                   str(RL["max_tokens"]), "--lr", str(RL["lr"]), "--micro-batch", str(RL["micro_batch"]),
                   "--grad-accum", str(RL["grad_accum"]), "--threads", "2", "--seed", str(RL["seed"]), "--in-order"]
        trl_runs, runs = [], {}
        # the machine's speed drifts over minutes (cloud cores): TRL runs before, between and after our sides,
        # the hf sides twice, the second time in the reverse order, and each side's steps are pooled
        for spec in RL_ORDER:
            if spec == "trl":
                r = subprocess.run(trl_cmd, capture_output=True, text=True, cwd=ROOT)
                if r.returncode:
                    raise SystemExit(f"TRL's step failed:\n{r.stderr[-3000:]}")
                trl_runs.append(json.loads(out.read_text()))
                continue
            r = subprocess.run([sys.executable, __file__, "--rl-worker", spec, "--model", str(model), "--rl-steps",
                                str(steps), "--rl-warmup", str(warmup)], capture_output=True, text=True, cwd=ROOT)
            if r.returncode:
                raise SystemExit(f"our {spec} step failed:\n{r.stderr[-3000:]}")
            runs.setdefault(spec, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
        for spec, got in runs.items():
            sides[spec] = {"spec": spec, "runs": len(got), "start_s": _median_of([g["start_s"] for g in got]),
                           "steps": [{"run": i, **st} for i, g in enumerate(got) for st in g["steps"]],
                           "peak_rss_mib": max(g["peak_rss_mib"] for g in got)}
    trl = trl_runs[-1]
    trl["peak_rss_mib"] = max(t["peak_rss_mib"] for t in trl_runs)
    trl_steps = [st for t in trl_runs for st in t["steps"]]  # every step of both runs, each with its "warmup" flag
    checks = {f"run {i} step {st['step']}": trl_advantage_check(st) for i, t in enumerate(trl_runs) for st in t["steps"]}
    write_trl_fixture(trl_steps[-1], trl)
    summary = {"trl": {"step_s": _median(trl_steps, "wall_s"), "generate_s": _median(trl_steps, "generate_s"),
                       "logprobs_s": _median(trl_steps, "old_logprob_s"), "reward_s": _median(trl_steps, "reward_s"),
                       "update_s": _median(trl_steps, "optimizer_s"),
                       "completion_tokens": _median(trl_steps, "mean_completion_tokens"),
                       "peak_rss_mib": trl["peak_rss_mib"]}}
    for spec, side in sides.items():
        st = side["steps"]
        summary[spec] = {"step_s": _median(st, "wall_s"), "generate_s": _median(st, "generate_s"),
                         "logprobs_s": _median(st, "logprobs_s"), "reward_s": _median(st, "verify_s"),
                         "update_s": _median(st, "update_s"), "sync_s": _median(st, "sync_s"),
                         "completion_tokens": _median(st, "mean_completion_tokens"), "start_s": side["start_s"],
                         "peak_rss_mib": side["peak_rss_mib"]}
    ratios = {f"trl / ours {spec}": {k: summary["trl"][k] / summary[spec][k] for k in
                                      ("step_s", "generate_s", "logprobs_s", "update_s", "peak_rss_mib")}
              for spec in sides}
    return {"settings": RL, "steps": steps, "warmup_steps": warmup, "order": list(RL_ORDER), "model": str(model),
            "summary": summary,
            "advantage_checks": checks,
            "ratios": ratios, "ours": sides, "trl": {k: trl[k] for k in trl if k not in ("warmup_steps", "steps")},
            "trl_steps": [[st for st in t["steps"]] for t in trl_runs],
            "differences": TRL_DIFFERENCES}


TRL_FIXTURE = ROOT / "tests" / "data" / "peers" / "trl_grpo_advantages.json"
TRL_EPS = 1e-4
"""TRL's scale_rewards='group' divides by std + 1e-4 (prl_core's default eps is 1e-6); with eps = 1e-4 the
two definitions coincide."""


def ours_on_trl(rewards: list[float], groups: list[int]):
    """prl_core's GRPO advantage (one per completion) on TRL's rewards and groups, with TRL's eps."""
    import torch

    from prl_core.config import AlgorithmConfig
    from prl_core.estimators import compute_advantages

    scores, index = torch.tensor(rewards), torch.tensor(groups)
    mask = torch.ones(len(rewards), 1, dtype=torch.bool)
    zeros = torch.zeros(mask.shape)
    return compute_advantages(AlgorithmConfig(estimator="grpo", eps=TRL_EPS), scores, index, zeros, zeros, mask)[:, 0]


def trl_advantage_check(step: dict) -> dict:
    import torch

    return _close(ours_on_trl(step["rewards"], step["group_index"]), torch.tensor(step["advantages"]))


def write_trl_fixture(step: dict, trl: dict) -> None:
    """One generation batch's rewards, groups and TRL's own advantages, for tests/test_peers.py."""
    doc = {"provenance": {"made_by": "python bench/peers.py --part rl_step (bench/peers/trl/grpo_step.py in "
                                     "bench/.envs/trl)", "trl": trl["versions"]["trl"], "torch": trl["versions"]["torch"],
                          "what": "GRPOTrainer._generate_and_score_completions output['advantages'] of one "
                                  "generation batch (scale_rewards='group', num_generations "
                                  f"{trl['config']['num_generations']}), in generation order", "step": step["step"]},
           "eps": TRL_EPS, "rewards": step["rewards"], "group_index": step["group_index"],
           "advantages": step["advantages"]}
    TRL_FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")


TRL_DIFFERENCES = [
    "generation: TRL samples with transformers' generate (use_vllm=False, its CPU path); ours with the engine the "
    "run names: 'hf' (transformers' generate too: like for like) and 'vllm' (vLLM's CPU build, our default)",
    "reference model: with KL 0 TRL loads none; ours still computes reference log-probs for the actor/kl_ref diagnostic "
    "(one extra no-grad forward pass per micro-batch, inside logprobs_s)",
    "reward: TRL's reward function is a string match of the last \\boxed{} (~0.1 ms a step); ours is the "
    "Math-Verify verifier pool (reward_s)",
    "engine: ours runs the update under DeepSpeed (ZeRO-0, its AdamW) and syncs the new weights into the rollout "
    "engine (sync_s); TRL uses the transformers Trainer with torch AdamW on the same model object (nothing to sync)",
    "advantage: TRL divides by std + 1e-4, ours by std + 1e-6 (both the unbiased group std)",
    "sampling: the same prompts at every step (TRL --in-order), but each side draws its own completions, so the "
    "completion lengths (which set the generation and update cost) differ; both are recorded",
]


VERIFY_DATASET = {"aime24": "aime24", "amc": "amc23", "math500": "math500"}
"""The bundled data set whose gold normalisation each outside file's golds get on our side."""


def verify_worker(inp: Path) -> None:
    """Our side of the verification in this fresh process: verify_one in a loop (one process, as lighteval's
    metric runs) and the VerifierPool the pipeline uses (2 workers, worker start included), same rows."""
    from prl.data.datasets import normalize_gold
    from prl.grading.verifier import VerifierPool, verify_one

    rows = [json.loads(line) for line in inp.read_text().splitlines()]
    pairs = [(r["response"], normalize_gold(VERIFY_DATASET[r["source"]], r["gold"])) for r in rows]
    verify_one("The answer is $\\boxed{2}$.", "2")  # warm-up: imports and the first parse, as lighteval's side
    t = time.perf_counter()
    seq = [verify_one(resp, gold) for resp, gold in pairs]
    seq_s = time.perf_counter() - t
    t = time.perf_counter()
    with VerifierPool(2) as pool:
        pooled = pool.verify(pairs)
    pool_s = time.perf_counter() - t
    print(json.dumps({"sequential_s": seq_s, "pool_s": pool_s, "pool_workers": 2,
                      "scores": {r["id"]: int(v.verdict == "correct") for r, v in zip(rows, seq)},
                      "verdicts": {r["id"]: v.verdict for r, v in zip(rows, seq)},
                      "pool_equal": [v.verdict for v in seq] == [v.verdict for v in pooled]}))


LIGHTEVAL_FIXTURE = ROOT / "tests" / "data" / "peers" / "lighteval_verdicts.json"


def write_lighteval_fixture(peer: dict, rows: list[dict]) -> None:
    """lighteval's verdict on each outside response (by the id make_input.py gives it), for tests/test_peers.py."""
    doc = {"provenance": {"made_by": "python bench/peers.py --part verification (bench/peers/lighteval/verify.py in "
                                     "bench/.envs/lighteval on bench/peers/lighteval/make_input.py's rows of "
                                     "tests/data/external/)", "lighteval": peer["lighteval_version"],
                          "versions": peer["versions"], "how": peer["how"]},
           "lighteval": {r["id"]: int(peer["scores"][r["id"]]) for r in rows},
           "file_labels": {r["id"]: int(r["label"]) for r in rows}}
    LIGHTEVAL_FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")


def disagreement_cause(response: str, lighteval_predictions: list[str]) -> str:
    """Why the two graders differ on one response, from what each read (our verifier takes the final
    ``<answer>`` tag's content when there is one; lighteval searches the whole response, first match)."""
    import re

    from prl.grading.verifier import answer_tag

    tag = answer_tag(response)
    if tag is None:
        return "no answer tag: the two extractions pick different expressions"
    if not re.search(r"\d", tag):
        return "the answer tag holds no answer (a template placeholder): lighteval scores an expression of the reasoning"
    if len(re.findall(r"[A-Za-z]{2,}", tag)) >= 4:
        return "the answer tag holds a sentence: we parse its content, lighteval the whole response"
    if any(p and p != tag.strip() and re.search(rf"(?<![\d.]){re.escape(p)}(?![\d.])", tag)
           for p in lighteval_predictions[1:]):
        return "both read the tag's equation; our verifier does not take its right-hand side"
    return "a bare answer in the tag: lighteval's first match is an expression of the reasoning"


def verification() -> dict:
    """lighteval 0.8.1's extractive_match (the metric that labelled the Saturn AIME file) against our
    verifier on the 613 real outside responses of tests/data/external/, each side in a fresh process."""
    lighteval_py = peer_python("lighteval")
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.jsonl", Path(tmp) / "lighteval.json"
        subprocess.run([sys.executable, str(HERE / "peers" / "lighteval" / "make_input.py"), str(inp)], check=True,
                       cwd=ROOT, capture_output=True)
        subprocess.run([str(lighteval_py), str(HERE / "peers" / "lighteval" / "verify.py"), str(inp), str(out)],
                       check=True, cwd=ROOT, capture_output=True)
        r = subprocess.run([sys.executable, __file__, "--verify-worker", str(inp)], capture_output=True, text=True,
                           check=True, cwd=ROOT)
        ours = json.loads(r.stdout.strip().splitlines()[-1])
        peer = json.loads(out.read_text())
        rows = [json.loads(line) for line in inp.read_text().splitlines()]
    n = len(rows)
    by_source: dict[str, dict] = {}
    for row in rows:
        src, i = row["source"], row["id"]
        d = by_source.setdefault(src, {"rows": 0, "ours_correct": 0, "lighteval_correct": 0, "agree": 0,
                                       "file_label_correct": 0, "disagree": []})
        a, b = ours["scores"][i], int(peer["scores"][i])
        d["rows"] += 1
        d["ours_correct"] += a
        d["lighteval_correct"] += b
        d["file_label_correct"] += int(row["label"])
        d["agree"] += a == b
        if a != b:
            extracted = peer["extracted"].get(i) or {}
            d["disagree"].append({"id": i, "ours": a, "lighteval": b, "our_verdict": ours["verdicts"][i],
                                  "gold": row["gold"], "lighteval_extracted": extracted,
                                  "cause": disagreement_cause(row["response"], extracted.get("predictions") or [])})
    write_lighteval_fixture(peer, rows)
    lighteval_s = peer["timing"]["first_pass_s"]
    return {"responses": n, "lighteval": {"version": peer["lighteval_version"], "versions": peer["versions"],
                                          "metric": peer["metric"], "how": peer["how"], "first_pass_s": lighteval_s,
                                          "provenance_check": peer["agreement_with_source_labels"]["aime24"]},
            "ours": {"sequential_s": ours["sequential_s"], "pool_s": ours["pool_s"],
                     "pool_workers": ours["pool_workers"], "pool_equal_sequential": ours["pool_equal"]},
            "responses_per_s": {"lighteval": n / lighteval_s, "ours_sequential": n / ours["sequential_s"],
                                "ours_pool": n / ours["pool_s"]},
            "ratios": {"ours sequential / lighteval (responses/s)": lighteval_s / ours["sequential_s"],
                       "ours pool / lighteval (responses/s)": lighteval_s / ours["pool_s"]},
            "agreement": by_source, "agree_total": sum(d["agree"] for d in by_source.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("advantages", "analysis", "rl_step", "verification", "all"), default="all")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rows", type=int, default=1_000_000, help="analysis: sample rows (default 1,000,000)")
    ap.add_argument("--model", type=Path, help="rl_step: a warm-started model (default: built once under "
                                               "bench/out/peers with prl model build-tiny and prl model sft)")
    ap.add_argument("--rl-steps", type=int, default=6, help="rl_step: steps per side, warm-up included (default 6)")
    ap.add_argument("--rl-warmup", type=int, default=1, help="rl_step: first steps left out of the medians")
    ap.add_argument("--analysis-worker", choices=("ours", "pandas"), help=argparse.SUPPRESS)
    ap.add_argument("--rl-worker", help=argparse.SUPPRESS)
    ap.add_argument("--verify-worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analysis_worker:
        analysis_worker(args.analysis_worker, Path(args.data))
        return 0
    if args.verify_worker:
        verify_worker(args.verify_worker)
        return 0
    if args.rl_worker:
        rl_worker(args.rl_worker, args.model, args.rl_steps, args.rl_warmup)
        return 0
    import torch

    torch.set_num_threads(2)
    path = ROOT / "bench" / "results" / "peers.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["machine"] = machine_info()
    ok = True
    if args.part in ("advantages", "all"):
        doc["advantages"] = advantages(args.repeats)
        for name, c in doc["advantages"]["cases"].items():
            print(f"[peers] advantages {name} (B {c['B']}, L {c['L']}): "
                  + ", ".join(f"{k} {v:.1f}x" for k, v in c["ratios"].items()) + "; checks "
                  + ", ".join(f"{k}: {'equal' if v['equal'] else 'DIFFER'}" for k, v in c["checks"].items()),
                  file=sys.stderr)
            ok &= all(v["equal"] for v in c["checks"].values())
        doc["advantages"]["machine"] = machine_info()
        doc["advantages"]["provenance"] = provenance(CODE)  # each part: the code as it was when it ran
        write_json("peers", doc, code=CODE, parts=PARTS)  # each part as soon as it is measured, with its machine and time
    if args.part in ("analysis", "all"):
        doc["analysis"] = a = analysis(args.rows)
        print(f"[peers] analysis of {a['rows']:,} samples: " + ", ".join(
            f"{q} pandas/ours {x['pandas / ours']:.1f}x" for q, x in a["questions"].items())
              + f"; peak RSS ours {a['peak_rss_mib']['ours']:.0f} MiB, pandas {a['peak_rss_mib']['pandas']:.0f} MiB; "
              + "checks " + ", ".join(f"{q}: {'equal' if c['equal'] else 'DIFFER'}" for q, c in a["checks"].items()),
              file=sys.stderr)
        ok &= all(c["equal"] for c in a["checks"].values())
        a["machine"] = machine_info()
        a["provenance"] = provenance(CODE)  # each part: the code as it was when it ran
        write_json("peers", doc, code=CODE, parts=PARTS)
    if args.part in ("verification", "all"):
        doc["verification"] = v = verification()
        print(f"[peers] verification of {v['responses']} outside responses: "
              + ", ".join(f"{k} {x:.1f}x" for k, x in v["ratios"].items())
              + f"; agreement {v['agree_total']}/{v['responses']}", file=sys.stderr)
        v["machine"] = machine_info()
        v["provenance"] = provenance(CODE)  # each part: the code as it was when it ran
        write_json("peers", doc, code=CODE, parts=PARTS)
    if args.part in ("rl_step", "all"):
        doc["rl_step"] = rl = rl_step(args.model, args.rl_steps, args.rl_warmup)
        print("[peers] rl step: " + ", ".join(f"{k} {v['step_s']:.2f}x" for k, v in rl["ratios"].items()),
              file=sys.stderr)
        ok &= all(c["equal"] for c in rl["advantage_checks"].values())
        rl["machine"] = machine_info()
        rl["provenance"] = provenance(CODE)  # each part: the code as it was when it ran
        write_json("peers", doc, code=CODE, parts=PARTS)
    render_all()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
