"""Side by side with the peers: the same work in the project and in the tool a researcher would use
instead, in one run, as ratios (issue 18). Each peer runs in its own environment under bench/.envs/,
made by the script that bench/peers/<tool>/ holds, never in the project's.

    python bench/peers.py [--part advantages] [--repeats 7]

Parts measured so far:

* ``advantages``: verl 0.9.1's ``compute_grpo_outcome_advantage`` (its reference GRPO, a Python loop
  over the batch) and ``compute_grpo_vectorized_outcome_advantage`` against ``prl_core``'s GRPO,
  Dr.GRPO and PRL at η = ∞ on the same tensors (B = 640, L = 3,072, the paper's batch; and a small
  case), results checked equal where the definitions coincide. Conventions that differ are stated in
  the results file: a group of one response gets A = R in verl (mean 0, std 1) and A = 0 here (no
  baseline to compare with); both add eps = 1e-6 to the unbiased std. verl has no process-reward path
  that PRL's coincides with (its KL-in-reward penalty shifts the outcome score), so only the outcome
  path is compared. The small case's inputs and verl's outputs are committed under tests/data/peers/
  and checked in CI by tests/test_peers.py without installing verl.

* ``analysis``: the questions a researcher asks after an evaluation, answered from a 1 M-sample store
  (``prl.evaluation.report`` and the store's named queries) and from the same samples as one JSONL
  file per run with pandas, each side in a fresh process (cold: its time includes reading the data;
  peak RSS from ``resource.getrusage``): average@n and pass@k per data set with 95% bootstrap CIs for
  one run, the success-set diff of two runs (problems solved by one run's n samples and not the
  other's), and the run's suspicious passes. The answers are checked equal.

Writes bench/results/peers.json.
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

from common import machine_info, median_ms, render_all, write_json  # noqa: E402

# torch and the project are imported where they are used: the pandas side of the analysis runs in a
# process that imports neither (its peak memory is the notebook's, not ours)

VERL_PY = HERE / ".envs" / "verl" / "bin" / "python"
FIXTURE = ROOT / "tests" / "data" / "peers" / "verl_grpo_small.json"


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

    if not VERL_PY.exists():
        raise SystemExit(f"{VERL_PY}: verl's environment is missing; make it with bench/peers/verl/make_fixture.sh "
                         "(it builds bench/.envs/verl from bench/peers/verl/requirements.lock)")
    cases = {"paper": make_case(128, 5, 3072, seed=0), "small": make_case(4, 5, 16, seed=1)}
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pt", Path(tmp) / "out.pt"
        torch.save(cases, inp)
        subprocess.run([str(VERL_PY), str(HERE / "peers" / "verl" / "advantages.py"), str(inp), str(out),
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
        "a group of one response: verl A = R (mean 0, std 1); prl_core A = 0 (no baseline); the cases here have "
        "groups of 5, where the definitions coincide",
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("advantages", "analysis", "all"), default="all")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rows", type=int, default=1_000_000, help="analysis: sample rows (default 1,000,000)")
    ap.add_argument("--analysis-worker", choices=("ours", "pandas"), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analysis_worker:
        analysis_worker(args.analysis_worker, Path(args.data))
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
    if args.part in ("analysis", "all"):
        doc["analysis"] = a = analysis(args.rows)
        print(f"[peers] analysis of {a['rows']:,} samples: " + ", ".join(
            f"{q} pandas/ours {x['pandas / ours']:.1f}x" for q, x in a["questions"].items())
              + f"; peak RSS ours {a['peak_rss_mib']['ours']:.0f} MiB, pandas {a['peak_rss_mib']['pandas']:.0f} MiB; "
              + "checks " + ", ".join(f"{q}: {'equal' if c['equal'] else 'DIFFER'}" for q, c in a["checks"].items()),
              file=sys.stderr)
        ok &= all(c["equal"] for c in a["checks"].values())
    write_json("peers", doc)
    render_all()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
