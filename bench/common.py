"""Shared benchmark helpers: robust timing and a description of the machine."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn`` in milliseconds over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def machine() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "git_commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def write_json(name: str, payload: dict) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def paired_ms(fn_a: Callable[[], object], fn_b: Callable[[], object], repeats: int, warmup: int = 2) -> tuple[float, float, float]:
    """Time ``fn_a`` and ``fn_b`` alternately; returns (median a ms, median b ms, median of a/b ratios).

    Alternating keeps both under the same machine load, so the ratio is stable on noisy hosts.
    """
    for _ in range(warmup):
        fn_a()
        fn_b()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn_a()
        t1 = time.perf_counter()
        fn_b()
        t2 = time.perf_counter()
        ta.append((t1 - t0) * 1e3)
        tb.append((t2 - t1) * 1e3)
    return statistics.median(ta), statistics.median(tb), statistics.median(a / b for a, b in zip(ta, tb))


def render_results_md() -> Path:
    """Regenerate bench/RESULTS.md from every results/*.json (each benchmark renders its own section)."""
    out = ["# Benchmark results", "",
           "Every figure is a ratio against a baseline measured in the same run (these machines are noisy).",
           "Regenerate with `python bench/<name>.py`; raw numbers are in `bench/results/*.json`.", ""]
    adv = RESULTS_DIR / "advantages.json"
    if adv.exists():
        r = json.loads(adv.read_text())
        m = r["machine"]
        first = next(iter(r["allocators"].values()))
        out += [
            "## PRL advantages (`bench/advantages.py`)", "",
            f"B = {first['shape']['B']}, L = {first['shape']['T']}, η = {first['shape']['eta']}; {m['cpu']}, "
            f"{m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads), commit {m['git_commit']}, {m['date']}.",
            "Each ratio is a median over runs that alternate the two sides. *fixed:256* is the split string (the",
            "trainer's call, chunked fast path on right-padded rows); *boundary mask* is an explicit bool mask (the",
            "general path every split can take). Allocator: *default* glibc, or *steady* (large blocks reused, as in",
            "a long-running trainer) — see the note below.", "",
            "| allocator | split | prl_advantages | × one torch.cumsum (target ≤ 3×) | per-token Python loop (authors' shape) "
            "| speed-up (target ≥ 20×) | per-sample torch loop speed-up | max abs diff vs loops |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode, res in r["allocators"].items():
            for name, c in res["cases"].items():
                out.append(
                    f"| {mode} | {name} | {c['prl_advantages_ms']:.2f} ms | **{c['ratio_to_cumsum']:.2f}×** "
                    f"{'(met)' if c['meets_cumsum_target_3x'] else '(missed)'} | {c['loop_ms']:.0f} ms "
                    f"| **{c['speedup_vs_loop']:.0f}×** {'(met)' if c['meets_loop_target_20x'] else '(missed)'} "
                    f"| {c['speedup_vs_per_sample_torch_loop']:.1f}× | {c['max_abs_diff_vs_loop']:.1e} |"
                )
        out += ["", f"`step_boundaries(mask, 'fixed:256')`: {first['step_boundaries_fixed256_ms']:.2f} ms per batch "
                "(not in the timings).", ""]
        notes = RESULTS_DIR.parent / "notes" / "advantages.md"
        if notes.exists():
            out += [notes.read_text().strip(), ""]
    for extra in ("generation.md", "verify.md", "store.md", "relevance.md", "train_step.md", "dashboard.md"):
        notes_file = RESULTS_DIR.parent / "notes" / extra
        if notes_file.exists():
            out += [notes_file.read_text().strip(), ""]
    path = RESULTS_DIR.parent / "RESULTS.md"
    path.write_text("\n".join(out) + "\n")
    return path
