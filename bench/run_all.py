"""Run every benchmark in one go, then re-render every figure of README.md and bench/RESULTS.md.

    python bench/run_all.py            # the standard set (~15 min on 2 cores)
    python bench/run_all.py --full     # + the 10 M-sample store and the full (20-kill) fault suite
    python bench/run_all.py --only store,load

Each benchmark runs as its own process (so one's threads and memory do not colour the next) and
writes bench/results/<name>.json; every figure there is a ratio to a baseline measured in the
same run. The fault suite's kill chains write artifacts/faults/*.json, collected into
bench/results/faults.json. At the end, bench/render.py renders README.md's and RESULTS.md's figure
regions from bench/results/*.json (the one home for rendering).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import RESULTS_DIR, render_all, write_json  # noqa: E402


def _warm_model() -> str:
    """A warm-started tiny model for the training-step benchmark (built once, cached under runs/)."""
    out = ROOT / "runs" / "bench" / "tiny-sft"
    if not (out / "model.safetensors").exists():
        tiny = ROOT / "runs" / "bench" / "tiny"
        _run([sys.executable, "-m", "prl_cli", "model", "build-tiny", "--out", str(tiny)])
        _run([sys.executable, "-m", "prl_cli", "model", "sft", "--model", str(tiny), "--out", str(out), "--steps", "300"])
    return str(out)


BENCHES = {
    "advantages": lambda full: [sys.executable, str(HERE / "advantages.py")] + ([] if full else ["--quick"]),
    "generation": lambda full: [sys.executable, str(HERE / "generation.py")],
    "verify": lambda full: [sys.executable, str(HERE / "verify.py")],
    "store": lambda full: [sys.executable, str(HERE / "store.py")],
    "store_10m": lambda full: [sys.executable, str(HERE / "store.py"), "--rows", "10000000", "--repeats", "7",
                               "--name", "store_10m"] if full else None,
    "relevance": lambda full: [sys.executable, str(HERE / "relevance.py")],
    "train_step": lambda full: [sys.executable, str(HERE / "train_step.py"), "--model", _warm_model()],
    "memory": lambda full: [sys.executable, str(HERE / "memory.py")],
    "dashboard": lambda full: [sys.executable, str(HERE / "dashboard.py")],
    "load_test": lambda full: [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_load.py",
                               "-s"],
    "load": lambda full: [sys.executable, str(HERE / "load.py")],
    "faults": lambda full: [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/faults",
                            "-s"],  # one process (-n 0): the chains are timed, and -s shows their lines
    "demo": lambda full: [sys.executable, str(HERE / "demo.py")] if full else None,
}


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, float, str]:
    t = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, env=env or os.environ.copy(), capture_output=True, text=True)
    return r.returncode, time.monotonic() - t, (r.stdout + r.stderr)[-3000:]


FAULTS_CODE = ("tests/faults", "tests/conftest.py", "flows", "prl_cli", "prl/training", "prl/evaluation", "prl/store",
               "prl/generation", "prl/grading", "prl/models", "prl_core", "sql/schema.sql", "sql/queries.sql")
"""The code the fault suite's kill chains measure (bench/results/faults.json's provenance): the chains themselves
(tests/faults) and everything they kill and recover — training, evaluation, the pipeline's flows, the store."""

RUN_ALL_CODE = ("bench/run_all.py",)
"""bench/results/run_all.json (each benchmark's exit status and time in the last run; no figure comes from it)."""


def collect_faults() -> None:
    """Copy the kill chains' records (artifacts/faults/*.json, written by tests/faults) into results/faults.json, and
    the same-seed comparisons (artifacts/reproducibility/*.json, written by tests/faults too) into
    results/reproducibility.json."""
    chains = [json.loads(p.read_text()) for p in sorted((ROOT / "artifacts" / "faults").glob("*.json"))]
    write_json("faults", {"chains": chains}, code=FAULTS_CODE)
    same = [json.loads(p.read_text()) for p in sorted((ROOT / "artifacts" / "reproducibility").glob("*.json"))]
    write_json("reproducibility", {"comparisons": same}, code=FAULTS_CODE)


def _render() -> None:
    changed = render_all()
    print("[run_all] re-rendered the figures: " + (", ".join(str(p.relative_to(ROOT)) for p in changed) or "already current"),
          file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also the 10 M-sample store and 20 kills per fault chain")
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(BENCHES))
    ap.add_argument("--collect-faults", action="store_true",
                    help="only collect the records of a fault-suite run made with pytest, and re-render the figures")
    args = ap.parse_args()
    if args.collect_faults:
        collect_faults()
        _render()
        return 0
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHES)}")
    status = {}
    for name in names:
        cmd = BENCHES[name](args.full or name in (args.only or "").split(","))
        if cmd is None:
            continue
        env = os.environ.copy()
        if name == "load_test":
            env["PRL_LOAD_TEST"] = "1"
        if name == "faults":
            env["PRL_FAULT_KILLS"] = "20" if args.full else env.get("PRL_FAULT_KILLS", "3")
            for old in [*(ROOT / "artifacts" / "faults").glob("*.json"), *(ROOT / "artifacts" / "reproducibility").glob("*.json")]:
                old.unlink()  # only this run's records are collected
        print(f"[run_all] {name}: {' '.join(cmd[1:3])} …", file=sys.stderr, flush=True)
        rc, secs, tail = _run(cmd, env)
        status[name] = {"returncode": rc, "seconds": round(secs, 1)}
        print(f"[run_all] {name}: {'ok' if rc == 0 else 'FAILED'} in {secs:.0f} s", file=sys.stderr, flush=True)
        if rc != 0:
            print(tail, file=sys.stderr)
        if name == "faults":
            collect_faults()
    previous = json.loads((RESULTS_DIR / "run_all.json").read_text()) if (RESULTS_DIR / "run_all.json").exists() else {}
    status = {**previous.get("benchmarks", {}), **status}  # a partial run (--only) keeps the others' status
    write_json("run_all", {"full": args.full, "benchmarks": status}, code=RUN_ALL_CODE)
    _render()
    return 0 if all(s["returncode"] == 0 for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
