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
           "Regenerate all with `python bench/run_all.py` (`--full` adds the 10 M-sample store and 20 kills per",
           "fault chain), one with `python bench/<name>.py`; raw numbers are in `bench/results/*.json`.", ""]
    out += summary_lines()
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
    for extra in ("generation.md", "verify.md", "store.md", "store_10m.md", "relevance.md", "train_step.md",
                  "dashboard.md", "load.md", "faults.md", "demo.md"):
        notes_file = RESULTS_DIR.parent / "notes" / extra
        if notes_file.exists():
            out += [notes_file.read_text().strip(), ""]
    path = RESULTS_DIR.parent / "RESULTS.md"
    path.write_text("\n".join(out) + "\n")
    return path


def _load(name: str) -> dict | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _faults() -> list[dict]:
    """The kill chains' records, as bench/run_all.py collected them from artifacts/faults/."""
    path = RESULTS_DIR / "faults.json"
    return json.loads(path.read_text())["chains"] if path.exists() else []


def summary_lines() -> list[str]:
    """One table: each target of DESIGN §6 and issue 8, the measured figure, its baseline, met or not."""
    rows: list[tuple[str, str, str, str]] = []

    def met(ok: bool | None) -> str:
        return "—" if ok is None else ("**met**" if ok else "**missed**")

    adv = _load("advantages")
    if adv:
        c = adv["allocators"]["default"]["cases"]["fixed:256"]
        rows.append(("PRL advantages, B=640, L=3072: ≥ 20× a per-sample loop",
                     f"{c['speedup_vs_loop']:.0f}×", "per-token Python loop (authors' shape)", met(c["meets_loop_target_20x"])))
        rows.append(("… and ≤ 3× one `torch.cumsum`", f"{c['ratio_to_cumsum']:.2f}×", "one torch.cumsum",
                     met(c["meets_cumsum_target_3x"])))
    ts = _load("train_step")
    if ts:
        worst = max(v["ratio_to_grpo"] for k, v in ts["cases"].items() if k != "grpo")
        rows.append(("PRL training step within 5% of GRPO's", f"{worst:.3f}×", "GRPO step, same rollouts", met(worst <= 1.05)))
    gen = _load("generation")
    if gen:
        r = gen["ratio_summary"]
        best = max(v["in_process"] for v in r.values())
        rows.append(("vLLM ≥ 3× `transformers.generate`", f"{best:.2f}× (in-process, best workload)",
                     "transformers, best batch size", met(best >= 3.0)))
    ver = _load("verify")
    if ver:
        rows.append(("Verify 12,136 responses: pool + cache ≥ 2× sequential", f"{ver['speedup']:.2f}×",
                     "sequential uncached loop", met(ver["meets_target_2x"])))
    for name, label in (("store", "1 M"), ("store_10m", "10 M")):
        st = _load(name)
        if st:
            worst = max(q["p95_ms"] for q in st["queries"].values())
            target = st.get("target_ingest_s", 10.0)
            rows.append((f"Store {label} samples: ingest < {target:.0f} s", f"{st['ingest_s']:.1f} s "
                         f"({st['ingest_ratio_to_parquet']:.0f}× Parquet)", "Parquet write of the same rows",
                         met(st["meets_ingest_target"])))
            rows.append((f"… every dashboard query < 300 ms at {label}", f"p95 ≤ {worst:.0f} ms",
                         f"count(*) {st['count_baseline_ms']:.2f} ms", met(worst < 300)))
    dash = _load("dashboard")
    if dash:
        worst = max(p["median_s"] for p in dash["pages"].values())
        rows.append(("Every dashboard page < 1 s at 1 M samples", f"≤ {worst:.2f} s",
                     f"empty page {dash['baseline_s']:.2f} s", met(worst < 1.0)))
    load = _load("load")
    if load:
        w = load["with_writer"]
        fresh = w["monotonic"] and w["seen_last"] == w["writer"]["samples_added"]
        rows.append((f"{w['clients']} dashboard clients while `prl eval` writes: no errors, fresh rows seen",
                     f"{len(w['errors'])} errors; p50 {w['p50_ms']:.0f} ms, p95 {w['p95_ms']:.0f} ms "
                     f"({load['p95_ratio_to_quiet']:.2f}× quiet p95); rows seen {w['seen_first']} → {w['seen_last']}; "
                     f"the writer {load['writer_slowdown']:.2f}× its time alone", "same clients, no writer; same eval, no clients", met(not w["errors"] and fresh)))
    faults = _faults()
    if faults:
        kills = sum(f["kills"] for f in faults)
        lost = sum(f.get("rows_lost", 0) for f in faults)
        per_chain = ", ".join(f"{f['name']} {f['kills']}" for f in faults)
        rows.append(("kill -9 at random points (eval, train, pipeline): nothing lost",
                     f"{kills} kills ({per_chain}), {sum(f['recovered'] for f in faults)} recovered, {lost} rows lost",
                     "an uninterrupted run's rows", met(lost == 0)))
    demo = _load("demo")
    if demo:
        rows.append(("Demo: fresh install → dashboard < 15 min on 2 cores", f"{demo['fresh_install_to_dashboard_min']:.1f} min",
                     "—", met(demo["fresh_install_to_dashboard_min"] < 15)))
        rows.append(("… PRL beats the warm start by more than its CI", demo["prl_vs_warm_start"], "warm start, paired",
                     met(demo["prl_beats_warm_start"])))
    if not rows:
        return []
    fault_lines = []
    if faults:
        fault_lines = ["### Kill chains (`tests/faults`, collected by `bench/run_all.py`)", "",
                       "| chain | kills | recovered | runs | rows expected | lost | extra | duplicates | time |",
                       "|---|---|---|---|---|---|---|---|---|"]
        for f in faults:
            fault_lines.append(f"| {f['name']} | {f['kills']} | {f['recovered']} | {f.get('segments', 1)} | "
                               f"{f.get('rows_expected', '—')} | {f.get('rows_lost', 0)} | {f.get('rows_extra', 0)} | "
                               f"{f.get('duplicates', 0)} | {f['seconds'] / 60:.1f} min |")
        fault_lines.append("")
    m = (adv or ts or ver or {}).get("machine", machine())
    lines = ["## Summary of targets", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, no GPU, torch {m['torch']}, Python {m['python']}. "
             "Each benchmark's own section below gives its date and commit.", "",
             "| target | measured | baseline (same run) | |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines + [""] + fault_lines
