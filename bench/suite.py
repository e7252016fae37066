"""The test suite's wall time on this machine, as CI runs it (issue 14: at most 20 min here, because
CI's machines of this kind run up to ~3x slower and CI stops at 90 min).

    python bench/suite.py              # `.venv/bin/python -m pytest`, then bench/results/suite.json
    python bench/suite.py -- -k store  # extra pytest arguments: recorded, and the run is marked partial

Records the wall time, the children's CPU time (user, system), the counts, the slowest tests (setup,
call and teardown together, from pytest's JUnit XML) and the test time per file, each with the CPU time
its processes used (tests/conftest.py's PRL_TEST_CPU_LOG), the pytest-xdist workers, beside the machine.
Run it on an otherwise idle machine: anything else running slows the suite and the figure says so
only through the CPU time. RESULTS.md and README.md render it (bench/render.py, regions ``suite`` and
``suite_time``).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from common import machine_info, render_all, write_json

ROOT = Path(__file__).resolve().parents[1]

CODE = ("bench/suite.py", "tests", "prl", "prl_core", "flows", "prl_cli", "dashboard", "sql", "configs", "scripts",
        "pyproject.toml")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""
TARGET_S = 20 * 60
"""Issue 14's bound for the whole suite on a development machine (2 cores)."""


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def parse_junit(path: Path) -> tuple[dict[str, int], list[tuple[str, float]], list[dict[str, str]]]:
    """(counts, [(test id, seconds)], [{test, reason}] of the skipped tests) from pytest's JUnit XML (``time`` =
    setup + call + teardown; a skip's reason is its ``<skipped message=…>``)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    cases: list[tuple[str, float]] = []
    skipped: list[dict[str, str]] = []
    for s in suites:
        for k in counts:
            counts[k] += int(s.get(k, 0))
        for case in s.iter("testcase"):
            module = case.get("classname", "")
            file = module.split(".")
            # classname is "tests.test_x" or "tests.test_x.TestClass": the file is the first part that starts with test_
            n = next((i for i, part in enumerate(file) if part.startswith("test_")), len(file) - 1)
            name = case.get("name", "")
            test_id = "/".join(file[: n + 1]) + ".py::" + "::".join(file[n + 1:] + [name])
            cases.append((test_id, float(case.get("time", 0.0))))
            skip = case.find("skipped")
            if skip is not None:
                skipped.append({"test": test_id, "reason": skip.get("message", "")})
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts, cases, skipped


def read_cpu_log(path: Path) -> tuple[dict[str, float], int]:
    """({test id: CPU seconds}, number of pytest-xdist workers, 1 without xdist) from tests/conftest.py's per-test
    lines; test ids as JUnit's (``tests/test_x.py::test_y[param]``)."""
    import json

    cpu: dict[str, float] = {}
    workers: set[str | None] = set()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            cpu[rec["test"]] = cpu.get(rec["test"], 0.0) + rec["cpu_s"]
            workers.add(rec["worker"])
    return cpu, max(len(workers), 1)


def pytest_env(environ, cpu_log: Path) -> dict[str, str]:
    """The environment of the timed pytest: the caller's without PYTEST_ADDOPTS (the suite as CI runs it), with
    the per-test CPU log, and with this record named as being re-recorded (bench/render.py's RECORDING_ENV), so
    that the suite's own staleness check does not fail on the suite record this run replaces."""
    env = {k: v for k, v in environ.items() if k != "PYTEST_ADDOPTS"}
    return {**env, "PRL_TEST_CPU_LOG": str(cpu_log), "PRL_RECORDING": "suite"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --); the run is then partial")
    args = ap.parse_args(argv)
    machine = machine_info()  # before the run: the steal share of an idle machine
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cpu_log = Path(tmp) / "cpu.jsonl"
        cmd = [python(), "-m", "pytest", "-q", f"--junitxml={junit}", *args.pytest_args]
        env = pytest_env(os.environ, cpu_log)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if not junit.exists():
            print(f"pytest wrote no report (exit {rc}); nothing recorded", file=sys.stderr)
            return rc or 1
        counts, cases, skipped = parse_junit(junit)
        cpu, workers = read_cpu_log(cpu_log)
    by_file: dict[str, float] = {}
    cpu_by_file: dict[str, float] = {}
    for test_id, s in cases:
        f = test_id.split("::", 1)[0]
        by_file[f] = by_file.get(f, 0.0) + s
        cpu_by_file[f] = cpu_by_file.get(f, 0.0) + cpu.get(test_id, 0.0)
    slowest = sorted(cases, key=lambda c: -c[1])[:15]
    doc = {
        "machine": machine,
        "command": "python -m pytest" + "".join(f" {a}" for a in args.pytest_args),
        "partial": bool(args.pytest_args),
        "returncode": rc,
        "seconds": round(seconds, 1),
        "target_s": TARGET_S,
        "within_target": seconds <= TARGET_S,
        "cpu_user_s": round(after.ru_utime - before.ru_utime, 1),
        "cpu_sys_s": round(after.ru_stime - before.ru_stime, 1),
        "counts": counts,
        "skipped": skipped,
        "workers": workers,
        "test_seconds": round(sum(s for _, s in cases), 1),
        "slowest": [{"test": t, "seconds": round(s, 1), "cpu_s": round(cpu.get(t, 0.0), 1)} for t, s in slowest],
        "by_file": [{"file": f, "seconds": round(s, 1), "cpu_s": round(cpu_by_file[f], 1)}
                    for f, s in sorted(by_file.items(), key=lambda kv: -kv[1])],
    }
    path = write_json("suite", doc, code=CODE)
    print(f"suite: {counts['passed']} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} "
          f"skipped in {seconds / 60:.1f} min (target {TARGET_S // 60} min) -> {path}")
    render_all()
    return rc


if __name__ == "__main__":
    sys.exit(main())
