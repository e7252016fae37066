"""Shared benchmark helpers: robust timing, a description of the machine, the results writer.

Every results file says what it measured and at which state of the code (its ``"provenance"``,
written by :func:`write_json`): the commit, the paths of the code it measures (the bench script and
the modules under test, declared by each script as ``CODE``), and whether any of those paths had
uncommitted changes when it ran. ``python bench/render.py --check`` fails when one of those paths
changed after the recorded commit (bench/render.py, :func:`render.stale_results`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages now (None where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _git(*args: str) -> subprocess.CompletedProcess | None:
    """``git ARGS`` in the checkout holding bench/ (``--no-optional-locks``: a killed call leaves no index.lock)."""
    try:
        return subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def _head() -> str | None:
    r = _git("rev-parse", "HEAD")
    return r.stdout.strip() if r is not None and r.returncode == 0 and r.stdout.strip() else None


def _uncommitted(*paths: str) -> list[str] | None:
    """Paths (under ``paths``, or anywhere) with uncommitted changes or untracked; None when git cannot say."""
    r = _git("status", "--porcelain", "--untracked-files=all", "--", *paths)
    if r is None or r.returncode != 0:
        return None
    return sorted({line[3:].split(" -> ")[-1].strip('"') for line in r.stdout.splitlines() if line.strip()})


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


# When the benchmark started (this module is imported by every bench script before it measures anything).
_START_LOAD = load_average()
_START_COMMIT = _head()
_START_UNCOMMITTED = _uncommitted() if _START_COMMIT else None


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
    /proc/stat is unreadable), ``load_average`` (``start``: when the benchmark started, i.e. when this
    module was imported; ``end``: now; each the 1-, 5- and 15-minute averages: a machine shared with other
    work shows here), ``gpu`` (None without one), then the software and the run: torch and its threads,
    Python, git commit and date. bench/render.py shows ``cpu`` and cores beside every figure and flags a
    table whose figures come from different machines.
    """
    torch_version, torch_threads, gpu = None, None, None
    try:
        import torch

        torch_version, torch_threads = torch.__version__, torch.get_num_threads()
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    commit = (_START_COMMIT or "")[:7]
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "affinity_cores": _affinity_cores(),
        "memory_gib": _memory_gib(),
        "steal_share": steal_share(steal_window_s),
        "load_average": {"start": _START_LOAD, "end": load_average()},
        "gpu": gpu,
        "torch_threads": torch_threads,
        "torch": torch_version,
        "python": platform.python_version(),
        "git_commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def provenance(code: Sequence[str]) -> dict[str, object]:
    """What a results file measured and at which state of the code.

    ``code``: the paths (files or folders, relative to the repository root) of the code the benchmark
    measures: its own script and the modules under test. Returns ``commit`` (the full hash of HEAD when
    the benchmark started), ``code`` (the paths, sorted), ``dirty`` (True when any of those paths had
    uncommitted changes, staged or not, or untracked files, when the benchmark started or when it wrote
    its results, or when a commit that landed in between changed them;
    None outside a git checkout), ``dirty_paths`` (what was uncommitted), ``content`` (each path's git object
    id at that commit: a file's blob, a folder's tree; content-addressed, so a clone that lacks the commit —
    a squash, a rebase, a history rewritten — can still tell whether the measured code is the code it has)
    and ``command`` (the command line that ran it). A path that does not exist
    is an error: a misspelt declaration would otherwise cover nothing.
    """
    paths = sorted(dict.fromkeys(str(Path(c)).rstrip("/") for c in code))
    if not paths:
        raise ValueError("provenance: no code paths declared (the bench script and the modules it measures)")
    missing = [c for c in paths if Path(c).is_absolute() or ".." in Path(c).parts or not (ROOT / c).exists()]
    if missing:
        raise ValueError(f"provenance: declared code paths that are not in the repository: {', '.join(missing)}")
    commit = _START_COMMIT
    if commit is None:
        return {"commit": None, "dirty": None, "dirty_paths": [], "code": paths, "command": command()}
    end = _uncommitted(*paths)
    if end is None or _START_UNCOMMITTED is None:
        return {"commit": commit, "dirty": None, "dirty_paths": [], "code": paths, "command": command()}
    dirty = sorted(set(end) | {p for p in _START_UNCOMMITTED if _under(p, paths)})  # at the start or at the end
    now = _head()
    if now != commit:  # a commit landed while it ran: the code measured is one commit's only if it left the paths alone
        moved = _git("diff", "--name-only", commit, now or "HEAD", "--", *paths) if now else None
        if moved is None or moved.returncode != 0 or moved.stdout.strip():
            changed = sorted(moved.stdout.split()) if moved is not None and moved.returncode == 0 else ["?"]
            dirty.append(f"HEAD moved from {commit[:12]} to {(now or '?')[:12]} during the run, changing "
                         + ", ".join(changed))
    return {"commit": commit, "dirty": bool(dirty), "dirty_paths": dirty, "code": paths,
            "content": content_ids(commit, paths), "command": command()}


def content_ids(commit: str, paths: Sequence[str]) -> dict[str, str | None]:
    """Each path's git object id at ``commit`` (``git rev-parse COMMIT:PATH``: a blob for a file, a tree for a
    folder); None for a path that commit lacks."""
    ids: dict[str, str | None] = {}
    for path in paths:
        r = _git("rev-parse", "--verify", "-q", f"{commit}:{path}")
        ids[path] = r.stdout.strip() if r is not None and r.returncode == 0 and r.stdout.strip() else None
    return ids


def command() -> str:
    """The command line that ran this benchmark (``python bench/x.py ARGS``), to re-record its results."""
    import shlex
    import sys

    argv = list(sys.argv) or ["?"]
    try:
        argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    except ValueError:
        pass
    return "python " + " ".join(shlex.quote(a) for a in argv)


def write_json(name: str, payload: dict, *, code: Sequence[str], parts: Sequence[str] = ()) -> Path:
    """Write bench/results/<name>.json with its :func:`provenance` (``code``: the paths the benchmark measures).

    A payload without ``"machine"`` gets :func:`machine_info` first; a machine recorded by :func:`machine_info`
    gets its load average's ``end`` set to now (the benchmark's end). ``parts``: keys of a payload whose parts are
    measured at different times (bench/peers.py ``--part``); each present part must carry its own
    ``"provenance"`` (the file's own then says which run wrote it last), and the provenance lists them."""
    if "machine" not in payload:
        payload = {"machine": machine_info(), **payload}
    m = payload["machine"]
    if isinstance(m, dict) and isinstance(m.get("load_average"), dict):
        m["load_average"]["end"] = load_average()
    prov = provenance(code)
    present = [k for k in parts if k in payload]
    unproven = [k for k in present if not isinstance(payload[k], dict) or "provenance" not in payload[k]]
    if unproven:
        raise ValueError(f"{name}: parts without their own provenance: {', '.join(unproven)}")
    if present:
        prov["parts"] = present
    payload = {**payload, "provenance": prov}
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
