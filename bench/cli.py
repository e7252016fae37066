"""Benchmark: how fast the ``prl`` command answers (docs/architecture.md §The command line; issue 29).

Measured as a user runs them, each a fresh process (``python -m prl_cli``), ``--repeats`` times:

  prl --help            target < 1 s
  prl sql               one query on a store, target < 1 s
  prl report, prl verify  measured (they load torch and Math-Verify to compute; no target)
  python -c "import torch"  the baseline, in the same run: what building the parser used to import

and Ctrl-C during ``prl eval`` (the tiny model, vLLM, Prefect's temporary server, two verifier workers):
SIGINT to the whole process group once the first chunk is stored, as a terminal sends it; the time from the
signal to the process's exit (target < 2 s), its exit status, whether its last line is the "interrupted" one,
whether a helper process outlived it, and the stored samples before and after (none lost).

The store is made here by ``prl import`` of the lighteval file under tests/data/external (30 samples).
The machine's load average is recorded beside the figures: on a shared 2-core machine the times grow with it.

    python bench/cli.py [--repeats 7] [--interrupts 3]

Writes bench/results/cli.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRL = [sys.executable, "-m", "prl_cli"]
AIME = next((ROOT / "tests" / "data" / "external" / "lighteval-saturn-1.5b").glob("details_*.parquet"))


CODE = ("bench/cli.py", "prl_cli", "prl/signals.py", "prl/evaluation/evaluate.py", "flows/evaluate.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The commands' environment: Python's bytecode cache on, as an installed package has it (the warm-up run writes
it; without it every run compiles each module again)."""


def timed(cmd: list[str], repeats: int, cwd: Path) -> dict:
    """Wall seconds of ``cmd`` as a fresh process, ``repeats`` times (after one warm-up run: the OS file cache and
    the bytecode cache)."""
    def once() -> float:
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
        elapsed = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
        return elapsed

    once()
    times = [once() for _ in range(repeats)]
    return {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
            "runs": [round(t, 3) for t in times]}


def interrupt_eval(model: Path, work: Path) -> dict:
    """One `prl eval` interrupted as a terminal does, once its first chunk is stored."""
    import psutil

    from prl.store.db import Store

    db = work / "store.duckdb"
    cmd = [*PRL, "eval", "--model", str(model), "--dataset", "synth_test:40", "--n", "2", "--max-tokens", "32",
           "--chunk", "4", "--db", str(db), "--run", "interrupted"]
    env = {k: v for k, v in ENV.items() if k != "PREFECT_API_URL"}  # Prefect's temporary server, as users get it

    def stored() -> int:
        try:
            return Store(db, create=False).rows("count_samples")[0][0] if db.exists() else 0
        except Exception:  # the store is being created
            return 0

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        while proc.poll() is None and stored() == 0:
            time.sleep(0.05)
        if proc.poll() is not None:
            raise SystemExit(f"prl eval ended before a chunk was stored: {proc.stderr.read()[-2000:]}")
        helpers = psutil.Process(proc.pid).children(recursive=True)
        before = stored()
        t0 = time.perf_counter()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=300)
        exit_s = time.perf_counter() - t0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _, alive = psutil.wait_procs(helpers, timeout=30)
    return {"exit_s": round(exit_s, 3), "status": proc.returncode,
            "last_line": err.rstrip("\n").splitlines()[-1] if err.strip() else "",
            "traceback": "Traceback" in err, "stderr_lines": len(err.splitlines()),
            "helpers": len(helpers), "helpers_left": len(alive), "stored_before": before, "stored_after": stored()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="runs of each quick command (default 7)")
    ap.add_argument("--interrupts", type=int, default=3, help="interrupted evaluations (default 3)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prl-bench-cli-") as tmp:
        work = Path(tmp)
        db = work / "store.duckdb"
        subprocess.run([*PRL, "import", str(AIME), "--dataset", "aime24", "--db", str(db), "--quiet"], cwd=ROOT,
                       check=True, capture_output=True, timeout=600)
        load_before = os.getloadavg()
        commands = {
            "help": timed([*PRL, "--help"], args.repeats, work),
            "sql": timed([*PRL, "sql", "--db", str(db), "select dataset, count(*) from samples group by 1"],
                         args.repeats, work),
            "report": timed([*PRL, "report", "--db", str(db), "--no-paper"], args.repeats, work),
            "verify": timed([*PRL, "verify", "--gold", "\\frac{1}{2}", "--response", "so \\boxed{0.5}"],
                            args.repeats, work),
            "import_torch": timed([sys.executable, "-c", "import torch"], args.repeats, work),
        }
        from prl.models.tiny import build_tiny

        model = build_tiny(work / "tiny", seed=0)
        interrupts = []
        for i in range(args.interrupts):
            (work / f"eval{i}").mkdir()
            interrupts.append(interrupt_eval(model, work / f"eval{i}"))
        load_after = os.getloadavg()
    exits = [r["exit_s"] for r in interrupts]
    result = {
        "machine": {**machine_info(), "load_average_1min": [round(load_before[0], 2), round(load_after[0], 2)],
                    "niceness": os.nice(0)},
        "bytecode_cache": True,
        "repeats": args.repeats,
        "commands": commands,
        "targets": {"help_s": 1.0, "sql_s": 1.0, "interrupt_exit_s": 2.0},
        "help_met": commands["help"]["median_s"] < 1.0,
        "sql_met": commands["sql"]["median_s"] < 1.0,
        "interrupts": interrupts,
        "interrupt_exit_median_s": round(statistics.median(exits), 3) if exits else None,
        "interrupt_met": bool(exits) and statistics.median(exits) < 2.0 and all(
            r["status"] == 130 and not r["traceback"] and r["helpers_left"] == 0
            and r["stored_after"] >= r["stored_before"] for r in interrupts),
    }
    path = write_json("cli", result, code=CODE)
    print(f"wrote {path}")
    for name, c in commands.items():
        print(f"  {name:<13} median {c['median_s']:.2f} s (max {c['max_s']:.2f} s)")
    for r in interrupts:
        print(f"  Ctrl-C: exit {r['status']} after {r['exit_s']:.2f} s, last line {r['last_line']!r}, "
              f"{r['helpers_left']} of {r['helpers']} helpers left, stored {r['stored_before']} -> {r['stored_after']}")
    render_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
