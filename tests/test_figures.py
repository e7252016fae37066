"""Figures that cannot drift (issue 14): every figure of README.md and bench/RESULTS.md is rendered
from bench/results/*.json by bench/render.py, and a committed figure that differs from its results
file fails here. Figures that cannot go stale (issue 28): every results file records its commit, a
dirty flag and the code it measures, and the check fails once that code changes (tested on git
repositories the tests build). The tests never touch the committed files: they work on copies under
tmp_path."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


render = _load("render")


def _check_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "render.py"), "--check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(RESULTS, out)
    return out


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """A checkout-shaped copy of the two Markdown files (for tests that write)."""
    root = tmp_path / "tree"
    (root / "bench").mkdir(parents=True)
    for rel in render.FILES:
        shutil.copy(ROOT / rel, root / rel)
    return root


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def test_committed_figures_match_their_results_files():
    r = _check_cli()
    assert r.returncode == 0, r.stdout + r.stderr
    assert render.check(ROOT, RESULTS) == []


def test_every_expected_region_is_present_in_the_committed_files():
    for rel, names in render.EXPECTED.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        for name in names:
            assert f"<!-- figures:{name} -->" in text and f"<!-- /figures:{name} -->" in text, (rel, name)


def test_a_changed_number_fails_the_check_naming_the_file_and_the_figure(results_copy):
    before = {rel: (ROOT / rel).read_bytes() for rel in render.FILES}
    _edit(results_copy / "verify.json", lambda d: d.update(speedup=3.14159))
    r = _check_cli("--results", str(results_copy))
    assert r.returncode == 1
    out = r.stdout
    assert "bench/results/verify.json" in out
    for rel, name in (("bench/RESULTS.md", "verify"), ("bench/RESULTS.md", "summary"), ("README.md", "performance")):
        assert any(line.startswith(f"{rel}: figure '{name}' differs") for line in out.splitlines()), (rel, name, out)
    assert "3.14×" in out  # the rendered side of the difference is shown
    assert "figure 'store'" not in out and "figure 'load'" not in out  # regions that do not read verify.json pass
    assert {rel: (ROOT / rel).read_bytes() for rel in render.FILES} == before  # --check writes nothing


def test_a_changed_number_deep_in_a_table_is_caught_too(results_copy):
    queries = json.loads((results_copy / "store_10m.json").read_text())["queries"]
    query = next(iter(queries))  # made the worst query, so every region quoting the worst p95 changes too
    worst = max(q["p95_ms"] for q in queries.values())
    _edit(results_copy / "store_10m.json", lambda d: d["queries"][query].update(p95_ms=worst + 281.0))
    messages = render.check(ROOT, results_copy, stale=False)
    names = {m.split("figure '")[1].split("'")[0] for m in messages if "figure '" in m}
    assert names == {"store_10m", "summary", "performance", "reliability"}
    assert all("bench/results/store_10m.json" in m for m in messages)


def test_rendering_is_deterministic_and_idempotent(tree_copy):
    texts = [(ROOT / rel).read_text(encoding="utf-8") for rel in render.FILES]
    for text, rel in zip(texts, render.FILES):
        once, _ = render.render_text(text, RESULTS, render.EXPECTED[rel])
        twice, _ = render.render_text(once, RESULTS, render.EXPECTED[rel])
        assert once == twice == text  # committed text is the rendering, and rendering it again changes nothing
    # a stale region is rewritten in place, and only the region
    readme = tree_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    figure = re.search(r"p95 ≤ \d+ ms", text).group(0)  # a figure inside a region (the store's worst query)
    readme.write_text(text.replace(figure, "p95 ≤ 99999 ms"), encoding="utf-8")
    assert render.check(tree_copy, RESULTS, stale=False)
    assert render.write_all(tree_copy, RESULTS) == [readme]
    assert readme.read_bytes() == (ROOT / "README.md").read_bytes()
    assert render.check(tree_copy, RESULTS, stale=False) == []


def test_a_missing_or_unclosed_region_is_reported(tree_copy):
    readme = tree_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text.replace("<!-- /figures:demo -->", ""), encoding="utf-8")
    messages = render.check(tree_copy, RESULTS, stale=False)
    assert any("'demo' is missing" in m for m in messages)
    assert any("'demo' has no closing" in m for m in messages)
    with pytest.raises(SystemExit):
        render.write_all(tree_copy, RESULTS)
    assert (tree_copy / "bench/RESULTS.md").read_bytes() == (ROOT / "bench/RESULTS.md").read_bytes()  # nothing written


def test_figures_from_different_machines_are_flagged(results_copy):
    _edit(results_copy / "store_10m.json", lambda d: d["machine"].update(cpu="Other CPU", cores=64))
    res = render.Results(results_copy)
    perf = render.region_performance(res)
    assert "Mixed machines" in perf and re.search(r"Other CPU, [^:;]*\b64 cores: store_10m\.json", perf), perf
    assert "| machine |" in perf.splitlines()[2]  # the table gains a machine column
    assert "Mixed machines" in render.region_reliability(render.Results(results_copy))
    assert "Mixed machines" not in render.region_store(render.Results(results_copy))  # one file, one machine
    # on the committed results the flag fires exactly when the files in the table name different CPUs
    real = render.region_performance(render.Results(RESULTS))
    cited = set(re.findall(r"([a-z_0-9]+)\.json", perf.splitlines()[0]))  # the copy's warning names every file
    cpus = {(d["machine"]["cpu"], d["machine"]["cores"]) for d in
            (json.loads((RESULTS / f"{name}.json").read_text()) for name in cited if (RESULTS / f"{name}.json").exists())}
    assert ("Mixed machines" in real) == (len(cpus) > 1)


def test_machine_label_shows_cpu_cores_affinity_steal_and_load():
    m = {"cpu": "X CPU", "cores": 8, "affinity_cores": 2, "memory_gib": 31.2, "steal_share": 0.125, "gpu": None,
         "git_commit": "abc1234", "date": "2026-12-01 00:00:00"}
    assert render.machine_label(m) == "X CPU, 2 of 8 cores"
    assert render.machine_detail(m) == "X CPU, 2 of 8 cores, 12.5% CPU steal, commit abc1234, 2026-12-01 00:00:00"
    m["load_average"] = {"start": [3.04, 2.0, 1.0], "end": [0.46, 1.0, 1.0]}
    assert render.machine_detail(m) == ("X CPU, 2 of 8 cores, 12.5% CPU steal, load average 3.0 at the start, 0.5 at "
                                        "the end, commit abc1234, 2026-12-01 00:00:00")
    assert render.machine_label({"cpu": "AMD EPYC", "cores": 2}) == "AMD EPYC, 2 cores"  # results from before issue 14


DEMO = {
    "machine": {"cpu": "AMD EPYC", "cores": 2, "affinity_cores": 2, "memory_gib": 7.8, "steal_share": 0.02},
    "commit": "0123abc",
    "phases": {"data": 1.0, "warm start": 240.0, "train": 300.0, "evaluate": 60.0, "report": 4.0},
    "pipeline_seconds": 605.0,
    "span": "fresh_clone", "span_label": "fresh clone → dashboard's first page (install included)",
    "end_to_end": {"clone": 1.0, "install": 113.0, "demo": 610.0, "dashboard_first_page": 10.0},
    "seconds": 734.0, "pip_cache_mib": 2048.0,
    "held_out": {"warm start": {"average": 0.079, "lo": 0.065, "hi": 0.094, "working_share": 0.542,
                                "working_average": 0.1, "direct_average": 0.05},
                 "PRL": {"average": 0.112, "lo": 0.095, "hi": 0.13, "working_share": 0.847}},
    "paired": {"PRL vs warm start": {"diff": 0.034, "lo": 0.018, "hi": 0.051},
               "PRL vs GRPO": {"diff": 0.002, "lo": -0.014, "hi": 0.019}},
}


def test_the_demo_region_says_it_is_unrecorded_until_demo_json_exists(results_copy):
    (results_copy / "demo.json").unlink(missing_ok=True)
    text = render.region_demo(render.Results(results_copy))
    assert "has not been recorded yet" in text and "`python bench/demo.py`" in text
    assert "not recorded yet" in render.region_status(render.Results(results_copy))


def test_the_demo_region_renders_demo_json(results_copy):
    (results_copy / "demo.json").write_text(json.dumps(DEMO))
    text = render.region_demo(render.Results(results_copy))
    assert ("Time measured fresh clone → dashboard's first page (install included): clone 1 s, install 1 min 53 s, "
            "demo 10 min 10 s, dashboard first page 10 s; **12 min 14 s in all** (target < 15 min: **met**); pip's "
            "cache held 2,048 MiB before the install.") in text
    assert "The pipeline flow inside it, data → report: data 1 s, warm start 4 min, train 5 min, evaluate 1 min, " \
           "report 4 s; 10 min 5 s in all." in text
    assert "commit 0123abc" in text and "AMD EPYC, 2 cores, 2.0% CPU steal" in text
    assert "| warm start | 7.9% | [6.5%, 9.4%] | 54.2% | 10.0% | 5.0% |" in text
    assert "| PRL | 11.2% | [9.5%, 13.0%] | 84.7% | — | — |" in text
    assert "| PRL vs warm start | +3.4 pp | [+1.8 pp, +5.1 pp] | the CI excludes 0 |" in text
    assert "| PRL vs GRPO | +0.2 pp | [−1.4 pp, +1.9 pp] | within noise: the CI includes 0 |" in text
    assert "12 min 14 s fresh clone → dashboard's first page" in render.region_status(render.Results(results_copy))
    assert any(r[4] == "demo" for r in render.target_rows(render.Results(results_copy)))


def test_a_demo_record_of_the_flow_alone_cannot_meet_the_fresh_clone_target(results_copy):
    """A record without a span (the flow alone, data → report) is labelled so, and its time is not held against
    the fresh-clone target, however short it is."""
    old = {k: v for k, v in DEMO.items() if k not in ("span", "span_label", "end_to_end", "pipeline_seconds")}
    old["seconds"] = 300.0
    (results_copy / "demo.json").write_text(json.dumps(old))
    res = render.Results(results_copy)
    assert "Time measured data → report, the pipeline flow alone: data 1 s" in render.region_demo(res)
    assert "5 min data → report, the pipeline flow alone (target < 15 min fresh clone → dashboard: not measured" \
        in render.region_status(res)
    row = next(r for r in render.target_rows(res) if r[4] == "demo")
    assert "**met**" not in row[3] and "not measured" in row[3]


def test_the_demo_region_refuses_percentages_where_fractions_are_expected(results_copy):
    demo = json.loads(json.dumps(DEMO))
    demo["held_out"]["PRL"]["average"] = 11.2
    (results_copy / "demo.json").write_text(json.dumps(demo))
    with pytest.raises(ValueError, match=r"held_out\.PRL\.average = 11\.2 is not a fraction"):
        render.region_demo(render.Results(results_copy))


def test_machine_info_records_the_machine():
    common = _load("common")
    m = common.machine_info(steal_window_s=0.2)
    for key in ("cpu", "cores", "affinity_cores", "memory_gib", "steal_share", "load_average", "gpu", "torch", "python",
                "git_commit", "date"):
        assert key in m, key
    assert isinstance(m["cpu"], str) and m["cpu"]
    assert isinstance(m["cores"], int) and m["cores"] >= 1
    assert m["affinity_cores"] is None or 1 <= m["affinity_cores"] <= m["cores"]
    assert m["memory_gib"] is None or m["memory_gib"] > 0
    assert m["steal_share"] is None or 0.0 <= m["steal_share"] <= 1.0
    if Path("/proc/stat").exists():  # Linux: every field is readable here
        assert m["affinity_cores"] is not None and m["memory_gib"] is not None and m["steal_share"] is not None
        assert m["load_average"]["end"] == pytest.approx(list(os.getloadavg()), abs=5.0)
        assert len(m["load_average"]["start"]) == 3
    json.dumps(m)  # goes into a results file as is


def test_write_json_adds_the_machine_and_the_provenance(tmp_path, monkeypatch):
    common = _load("common")
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(common, "steal_share", lambda window_s=0.5: None)
    path = common.write_json("x", {"figure": 1}, code=["bench/render.py", "bench/common.py"])
    data = json.loads(path.read_text())
    assert data["figure"] == 1 and data["machine"]["cores"] >= 1 and "steal_share" in data["machine"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    prov = data["provenance"]
    assert prov["commit"] == head and prov["code"] == ["bench/common.py", "bench/render.py"]
    assert isinstance(prov["dirty"], bool)
    with pytest.raises(ValueError, match="not in the repository: prl/no_such_module.py"):
        common.write_json("y", {}, code=["bench/common.py", "prl/no_such_module.py"])
    with pytest.raises(ValueError, match="no code paths"):
        common.write_json("y", {}, code=[])
    with pytest.raises(ValueError, match="parts without their own provenance: b"):
        common.write_json("y", {"a": {"provenance": {}}, "b": {}}, code=["bench/common.py"], parts=["a", "b"])


def test_the_suite_record_reads_pytests_own_junit_report(tmp_path):
    """bench/suite.py's counts and test ids come from a JUnit report pytest itself wrote."""
    sys.path.insert(0, str(BENCH))
    try:
        suite = _load("suite")
    finally:
        sys.path.remove(str(BENCH))
    pkg = tmp_path / "tests"
    (pkg / "faults").mkdir(parents=True)
    (pkg / "test_a.py").write_text("import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert False\n\n"
                                   "@pytest.mark.skip(reason='r')\ndef test_skipped():\n    pass\n\n"
                                   "class TestGroup:\n    def test_in_class(self):\n        pass\n")
    (pkg / "faults" / "test_b.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.3)\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    f"--rootdir={tmp_path}", f"--junitxml={junit}", "tests"], cwd=tmp_path, capture_output=True,
                   timeout=120)
    counts, cases, skipped = suite.parse_junit(junit)
    assert counts == {"tests": 5, "failures": 1, "errors": 0, "skipped": 1, "passed": 3}
    assert skipped == [{"test": "tests/test_a.py::test_skipped", "reason": "r"}]  # which test, and why
    ids = dict(cases)
    assert set(ids) == {"tests/test_a.py::test_ok", "tests/test_a.py::test_bad", "tests/test_a.py::test_skipped",
                        "tests/test_a.py::TestGroup::test_in_class", "tests/faults/test_b.py::test_slow"}
    assert max(ids, key=ids.get) == "tests/faults/test_b.py::test_slow"


def test_the_suite_record_reads_xdist_workers_and_the_per_test_cpu_time(tmp_path):
    """Under pytest-xdist (two workers, tests/conftest.py's scheduler: a module whole on one worker) the JUnit ids
    are the tests', and the per-test lines of tests/conftest.py's PRL_TEST_CPU_LOG hook give each test's CPU time
    and worker: a test that spins has about its wall time in CPU, one that sleeps almost none."""
    import shutil

    sys.path.insert(0, str(BENCH))
    try:
        suite = _load("suite")
    finally:
        sys.path.remove(str(BENCH))
    pkg = tmp_path / "tests"
    pkg.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", pkg / "conftest.py")  # the hook under test, as the suite loads it
    (pkg / "test_a.py").write_text(
        "import time\n\n"
        "def test_spins():\n    t = time.process_time()\n    while time.process_time() - t < 0.6:\n        pass\n\n"
        "def test_sleeps():\n    time.sleep(0.6)\n")
    (pkg / "test_b.py").write_text("def test_other():\n    pass\n")
    junit, log = tmp_path / "junit.xml", tmp_path / "cpu.jsonl"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-n", "2",
                        "--no-loadscope-reorder", f"--rootdir={tmp_path}", f"--junitxml={junit}", "tests"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PRL_TEST_CPU_LOG": str(log)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    counts, cases, _ = suite.parse_junit(junit)
    ids = {"tests/test_a.py::test_spins", "tests/test_a.py::test_sleeps", "tests/test_b.py::test_other"}
    assert counts["passed"] == 3 and {t for t, _ in cases} == ids
    cpu, workers = suite.read_cpu_log(log)
    assert set(cpu) == ids and workers == 2  # two modules, one to each worker
    by_worker = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        by_worker.setdefault(rec["test"].split("::")[0], set()).add(rec["worker"])
    assert all(len(w) == 1 for w in by_worker.values()), by_worker  # a module whole on one worker
    assert cpu["tests/test_a.py::test_spins"] >= 0.5 and cpu["tests/test_a.py::test_sleeps"] < 0.3, cpu


# ─── figures that cannot go stale (issue 28) ──────────────────────────────────────────────────────

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

BENCH_SCRIPT = """import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json

CODE = ("bench/x.py", "pkg")
# a machine of its own: machine_info (torch, a steal window) is tested on its own
write_json("x", {"machine": {"cpu": "test", "load_average": {"start": [0, 0, 0], "end": None}}, "value": 1}, code=CODE)
"""


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a measured package, a bench script that records it with the real bench/common.py,
    and an unrelated document; results go to bench/results (ignored, as results of a run not yet committed)."""
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"pkg/mod.py": "X = 1\n", "docs/notes.md": "notes\n", "bench/x.py": BENCH_SCRIPT,
                "bench/common.py": (BENCH / "common.py").read_text(), ".gitignore": "bench/results/\n__pycache__/\n"},
            "first")
    return r


def _record(repo: Path) -> dict:
    subprocess.run([sys.executable, "bench/x.py"], cwd=repo, check=True, timeout=120)
    return json.loads((repo / "bench/results/x.json").read_text())


def _stale(repo: Path, names=("x",)) -> tuple[list[str], list[str]]:
    return render.stale_results(repo, repo / "bench" / "results", list(names))


def test_a_results_file_records_its_commit_dirty_flag_and_code(repo):
    data = _record(repo)
    prov = data["provenance"]
    assert prov["commit"] == _git(repo, "rev-parse", "HEAD") and prov["dirty"] is False and prov["dirty_paths"] == []
    assert prov["code"] == ["bench/x.py", "pkg"] and prov["command"] == "python bench/x.py"
    assert data["machine"]["load_average"]["end"] is not None
    assert _stale(repo) == ([], [])
    # an uncommitted change to a measured path: the recording says so, and the check refuses it
    (repo / "pkg" / "mod.py").write_text("X = 2\n")
    (repo / "pkg" / "new.py").write_text("Y = 1\n")  # untracked counts too
    prov = _record(repo)["provenance"]
    assert prov["dirty"] is True and prov["dirty_paths"] == ["pkg/mod.py", "pkg/new.py"]
    failures, _ = _stale(repo)
    assert len(failures) == 1 and failures[0].startswith("bench/results/x.json: recorded with uncommitted changes")
    assert "pkg/mod.py, pkg/new.py" in failures[0]
    # an uncommitted change to an unrelated path is not the measured code's
    _git(repo, "checkout", "-q", "--", "pkg/mod.py")
    (repo / "pkg" / "new.py").unlink()
    (repo / "docs" / "notes.md").write_text("edited\n")
    assert _record(repo)["provenance"]["dirty"] is False and _stale(repo) == ([], [])


MOVING_SCRIPT = BENCH_SCRIPT.replace("write_json(", """import os, subprocess
root = Path(__file__).resolve().parents[1]
path = root / os.environ["COMMIT_DURING_RUN"]
path.write_text(path.read_text() + "# changed during the run\\n")
subprocess.run(["git", "commit", "-q", "-am", "a commit lands while the benchmark runs"], cwd=root, check=True)
write_json(""", 1)


def test_a_commit_during_the_run_is_dirty_only_when_it_changes_the_measured_code(repo):
    _commit(repo, {"bench/x.py": MOVING_SCRIPT}, "a bench script that commits while it runs")
    start = _git(repo, "rev-parse", "HEAD")
    env = {**os.environ, **GIT_ENV}
    subprocess.run([sys.executable, "bench/x.py"], cwd=repo, check=True, timeout=120,
                   env={**env, "COMMIT_DURING_RUN": "docs/notes.md"})
    prov = json.loads((repo / "bench/results/x.json").read_text())["provenance"]
    assert prov["commit"] == start and _git(repo, "rev-parse", "HEAD") != start  # HEAD did move
    assert prov["dirty"] is False and prov["dirty_paths"] == [] and _stale(repo) == ([], [])
    start = _git(repo, "rev-parse", "HEAD")
    subprocess.run([sys.executable, "bench/x.py"], cwd=repo, check=True, timeout=120,
                   env={**env, "COMMIT_DURING_RUN": "pkg/mod.py"})
    prov = json.loads((repo / "bench/results/x.json").read_text())["provenance"]
    assert prov["dirty"] is True and len(prov["dirty_paths"]) == 1
    assert prov["dirty_paths"][0].startswith(f"HEAD moved from {start[:12]}") and prov["dirty_paths"][0].endswith("pkg/mod.py")
    assert _stale(repo)[0]


def test_a_change_to_a_measured_path_after_the_recorded_commit_fails_the_check(repo):
    _record(repo)
    _commit(repo, {"docs/notes.md": "more notes\n"}, "an unrelated change")
    assert _stale(repo) == ([], [])  # nothing it measures changed
    (repo / "pkg" / "mod.py").write_text("X = 3\n")
    failures, _ = _stale(repo)
    assert failures and "bench/results/x.json: stale" in failures[0] and "pkg/mod.py (uncommitted)" in failures[0]
    _commit(repo, {}, "change the measured module")
    failures, _ = _stale(repo)
    assert len(failures) == 1 and failures[0].startswith("bench/results/x.json: stale: the code it measures changed")
    assert "pkg/mod.py" in failures[0] and "(uncommitted)" not in failures[0] and "python bench/x.py" in failures[0]
    _commit(repo, {"pkg/mod.py": "X = 1\n"}, "change it back")  # the content measured is the content here again
    assert _stale(repo) == ([], [])
    _commit(repo, {"bench/x.py": BENCH_SCRIPT + "# edited\n"}, "edit the bench script")
    assert "bench/x.py" in _stale(repo)[0][0]  # the script is part of what it measured


def test_only_the_record_being_rewritten_is_exempt_while_the_suite_runs(repo, monkeypatch):
    _record(repo)
    _commit(repo, {"pkg/mod.py": "X = 4\n"}, "change the measured module")
    assert _stale(repo)[0]
    monkeypatch.setenv(render.RECORDING_ENV, "other, names")  # another record being rewritten: x is still judged
    assert _stale(repo)[0]
    monkeypatch.setenv(render.RECORDING_ENV, "x")
    assert _stale(repo) == ([], ["bench/results/x.json: being re-recorded by the run under way (PRL_RECORDING); "
                                 "not judged here"])
    sys.path.insert(0, str(BENCH))
    try:
        suite = _load("suite")
    finally:
        sys.path.remove(str(BENCH))
    env = suite.pytest_env({"PYTEST_ADDOPTS": "-x", "HOME": "/h"}, Path("/tmp/cpu.jsonl"))
    assert env == {"HOME": "/h", "PRL_TEST_CPU_LOG": "/tmp/cpu.jsonl", render.RECORDING_ENV: "suite"}


def test_a_recorded_commit_that_is_not_an_ancestor_is_judged_by_content(repo):
    _git(repo, "checkout", "-q", "-b", "side")
    _commit(repo, {"docs/notes.md": "on a side branch\n"}, "side")
    _record(repo)  # recorded on the side branch, which is then dropped (a rebase, a squash)
    _git(repo, "checkout", "-q", "main")
    _commit(repo, {"docs/other.md": "x\n"}, "main moves on")
    assert subprocess.run(["git", "merge-base", "--is-ancestor", "side", "HEAD"], cwd=repo).returncode == 1
    assert _stale(repo) == ([], [])  # the measured paths are the same here
    _commit(repo, {"pkg/mod.py": "X = 4\n"}, "main changes the module")
    failures, _ = _stale(repo)
    assert len(failures) == 1 and "not an ancestor of HEAD" in failures[0] and "pkg/mod.py" in failures[0]


def test_a_commit_the_clone_lacks_is_judged_by_its_content_ids_and_a_shallow_clone_fails(repo, tmp_path):
    data = _record(repo)
    ids = {p: _git(repo, "rev-parse", f"HEAD:{p}") for p in ("bench/x.py", "pkg")}
    assert data["provenance"]["content"] == ids  # a file's blob, a folder's tree
    data["provenance"]["commit"] = "0" * 40  # recorded at a commit this clone lacks (a squash, a lost branch)
    (repo / "bench/results/x.json").write_text(json.dumps(data))
    assert _stale(repo) == ([], [])  # the content it measured is the content here
    (repo / "pkg" / "mod.py").write_text("X = 9\n")
    failures, _ = _stale(repo)
    assert len(failures) == 1 and "compared by the content ids it recorded" in failures[0]
    assert "pkg (uncommitted)" not in failures[0] and "pkg/mod.py (uncommitted)" in failures[0]
    _commit(repo, {}, "change the measured module")
    failures, _ = _stale(repo)
    assert len(failures) == 1 and "held: pkg;" in failures[0] and "python bench/x.py" in failures[0]
    _commit(repo, {"pkg/mod.py": "X = 1\n"}, "change it back")
    assert _stale(repo) == ([], [])
    del data["provenance"]["content"]  # a record from before content ids: nothing to compare with
    (repo / "bench/results/x.json").write_text(json.dumps(data))
    failures, _ = _stale(repo)
    assert len(failures) == 1 and "which this clone does not have" in failures[0]
    _commit(repo, {"pkg/mod.py": "X = 5\n"}, "second")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True,
                   env={**os.environ, **GIT_ENV})
    (shallow / "bench" / "results").mkdir(parents=True)
    (shallow / "bench/results/x.json").write_text(json.dumps(_record(repo)))
    failures, _ = render.stale_results(shallow, shallow / "bench" / "results", ["x"])
    assert len(failures) == 1 and "a shallow clone" in failures[0] and "git fetch --unshallow" in failures[0]
    nogit = tmp_path / "export"
    (nogit / "bench" / "results").mkdir(parents=True)
    (nogit / "bench/results/x.json").write_text(json.dumps(_record(repo)))
    failures, _ = render.stale_results(nogit, nogit / "bench" / "results", ["x"])
    assert len(failures) == 1 and "not a git checkout" in failures[0]


def test_a_results_file_without_provenance_fails_unless_listed_and_a_listed_one_with_it_fails(repo, monkeypatch):
    data = _record(repo)
    prov = data.pop("provenance")
    data["machine"]["git_commit"] = prov["commit"][:7]
    (repo / "bench/results/x.json").write_text(json.dumps(data))
    failures, _ = _stale(repo)
    assert len(failures) == 1 and failures[0].startswith("bench/results/x.json: no provenance")
    monkeypatch.setattr(render, "NOT_YET_RECORDED", {"x": "not re-recorded yet"})
    monkeypatch.setattr(render, "WRITERS", {"x": ("bench/x.py", "CODE")})
    assert _stale(repo) == ([], ["bench/results/x.json: not re-recorded yet (not re-recorded yet); no measured path "
                                 f"changed since {prov['commit'][:7]}"])
    _commit(repo, {"pkg/mod.py": "X = 6\n"}, "change the module")
    assert "1 measured path(s) changed: pkg/mod.py" in _stale(repo)[1][0]  # the note says what changed since
    _record(repo)  # re-recorded: the list entry must go
    failures, _ = _stale(repo)
    assert failures == ["bench/results/x.json: has a provenance now: take 'x' off NOT_YET_RECORDED in bench/render.py"]


def test_each_part_of_a_results_file_measured_apart_is_judged_by_its_own_provenance(repo):
    data = _record(repo)
    old = dict(data["provenance"])
    _commit(repo, {"pkg/mod.py": "X = 7\n"}, "change the module")
    new = _record(repo)["provenance"]
    data.update(a={"provenance": old}, b={"provenance": new})
    data["provenance"] = {**new, "parts": ["a", "b"]}
    (repo / "bench/results/x.json").write_text(json.dumps(data))
    failures, _ = _stale(repo)
    assert len(failures) == 1 and failures[0].startswith("bench/results/x.json (part 'a'): stale")
    del data["b"]["provenance"]
    (repo / "bench/results/x.json").write_text(json.dumps(data))
    assert any("part 'b' has no provenance" in f for f in _stale(repo)[0])


def _bench_writers() -> dict[str, Path]:
    """Every bench script that writes a results file (calls write_json)."""
    return {p.stem: p for p in sorted(BENCH.glob("*.py")) if "write_json(" in p.read_text() and p.stem != "common"}


def test_every_bench_script_declares_the_code_it_measures():
    for stem, path in _bench_writers().items():
        with warnings.catch_warnings():  # a script's own invalid escapes are not this test's subject
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "write_json"]
        assert calls and all(any(k.arg == "code" for k in c.keywords) for c in calls), stem
        for var in {k.value.id for c in calls for k in c.keywords if k.arg == "code"}:
            code = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", None) == var for t in n.targets))
            missing = [c for c in code if not (ROOT / c).exists()]
            assert not missing, (stem, var, missing)
            if var == "CODE":
                assert f"bench/{stem}.py" in code, (stem, "a bench script measures itself too")
                assert len(code) > 1, (stem, "the modules under test, not just the script")


def test_every_results_file_behind_a_figure_has_a_declared_writer():
    for name in render.figure_sources(RESULTS):
        code = render._declared_code(ROOT, name)
        assert code, f"{name}: no CODE declaration found in {render.WRITERS.get(name, (f'bench/{name}.py',))[0]}"
        data = json.loads((RESULTS / f"{name}.json").read_text())
        if "provenance" in data:  # what the file recorded is what its writer declares now
            assert sorted(data["provenance"]["code"]) == sorted(dict.fromkeys(code)), name
    assert not set(render.NOT_YET_RECORDED) - set(render.figure_sources(RESULTS))  # no entry for a file not shown
