"""Shared benchmark helpers: robust timing, a description of the machine, the results writer."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

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


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key = line.split(":", 1)[0].strip()
            if key in ("model name", "Hardware", "Processor", "cpu model"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _affinity_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)  # kB → GiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cpu_times() -> list[int] | None:
    """The aggregate ``cpu`` line of /proc/stat: user nice system idle iowait irq softirq steal (jiffies)."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu "):
                fields = [int(x) for x in line.split()[1:9]]
                return fields if len(fields) == 8 else None
    except (OSError, ValueError):
        pass
    return None


def steal_share(window_s: float = 0.5) -> float | None:
    """Share of CPU time stolen by the hypervisor over ``window_s`` (from /proc/stat read twice); None if unreadable."""
    a = _cpu_times()
    if a is None:
        return None
    time.sleep(window_s)
    b = _cpu_times()
    if b is None:
        return None
    total = sum(b) - sum(a)
    return round((b[7] - a[7]) / total, 4) if total > 0 else None


def machine_info(steal_window_s: float = 0.5) -> dict[str, object]:
    """The machine a result was measured on; every results file records it under ``"machine"``.

    ``cpu`` (model name), ``cores`` (logical CPUs), ``affinity_cores`` (CPUs this process may run on),
    ``memory_gib``, ``steal_share`` (hypervisor steal over a ``steal_window_s`` window; None where
    /proc/stat is unreadable), ``gpu`` (None without one), then the software and the run: torch and its
    threads, Python, git commit and date. bench/render.py shows ``cpu`` and cores beside every figure and
    flags a table whose figures come from different machines.
    """
    torch_version, torch_threads, gpu = None, None, None
    try:
        import torch

        torch_version, torch_threads = torch.__version__, torch.get_num_threads()
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "affinity_cores": _affinity_cores(),
        "memory_gib": _memory_gib(),
        "steal_share": steal_share(steal_window_s),
        "gpu": gpu,
        "torch_threads": torch_threads,
        "torch": torch_version,
        "python": platform.python_version(),
        "git_commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def write_json(name: str, payload: dict) -> Path:
    """Write bench/results/<name>.json; a payload without ``"machine"`` gets :func:`machine_info` first."""
    if "machine" not in payload:
        payload = {"machine": machine_info(), **payload}
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


def render_all() -> list[Path]:
    """Re-render the figures of README.md and bench/RESULTS.md from bench/results/*.json (bench/render.py)."""
    import render

    return render.write_all()
