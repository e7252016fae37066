"""Figures that cannot drift (issue 14): every figure of README.md and bench/RESULTS.md is rendered
from bench/results/*.json by bench/render.py, and a committed figure that differs from its results
file fails here. The tests never touch the committed files: they work on copies under tmp_path."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
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
    _edit(results_copy / "store_10m.json", lambda d: d["queries"]["list_runs"].update(p95_ms=281.0))
    messages = render.check(ROOT, results_copy)
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
    stale = readme.read_text(encoding="utf-8").replace("p95 ≤ 72 ms", "p95 ≤ 999 ms")
    readme.write_text(stale, encoding="utf-8")
    assert render.check(tree_copy, RESULTS)
    assert render.write_all(tree_copy, RESULTS) == [readme]
    assert readme.read_bytes() == (ROOT / "README.md").read_bytes()
    assert render.check(tree_copy, RESULTS) == []


def test_a_missing_or_unclosed_region_is_reported(tree_copy):
    readme = tree_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text.replace("<!-- /figures:demo -->", ""), encoding="utf-8")
    messages = render.check(tree_copy, RESULTS)
    assert any("'demo' is missing" in m for m in messages)
    assert any("'demo' has no closing" in m for m in messages)
    with pytest.raises(SystemExit):
        render.write_all(tree_copy, RESULTS)
    assert (tree_copy / "bench/RESULTS.md").read_bytes() == (ROOT / "bench/RESULTS.md").read_bytes()  # nothing written


def test_figures_from_different_machines_are_flagged(results_copy):
    _edit(results_copy / "store_10m.json", lambda d: d["machine"].update(cpu="Other CPU", cores=64))
    res = render.Results(results_copy)
    perf = render.region_performance(res)
    assert "Mixed machines" in perf and "Other CPU, 64 cores: store_10m.json" in perf
    assert "| machine |" in perf.splitlines()[2]  # the table gains a machine column
    assert "Mixed machines" in render.region_reliability(render.Results(results_copy))
    assert "Mixed machines" not in render.region_store(render.Results(results_copy))  # one file, one machine
    # on the committed results the flag fires exactly when the files in the table name different CPUs
    real = render.region_performance(render.Results(RESULTS))
    cited = set(re.findall(r"([a-z_0-9]+)\.json", perf.splitlines()[0]))  # the copy's warning names every file
    cpus = {(d["machine"]["cpu"], d["machine"]["cores"]) for d in
            (json.loads((RESULTS / f"{name}.json").read_text()) for name in cited if (RESULTS / f"{name}.json").exists())}
    assert ("Mixed machines" in real) == (len(cpus) > 1)


def test_machine_label_shows_cpu_cores_affinity_and_steal():
    m = {"cpu": "X CPU", "cores": 8, "affinity_cores": 2, "memory_gib": 31.2, "steal_share": 0.125, "gpu": None,
         "git_commit": "abc1234", "date": "2026-12-01 00:00:00"}
    assert render.machine_label(m) == "X CPU, 2 of 8 cores"
    assert render.machine_detail(m) == "X CPU, 2 of 8 cores, 12.5% CPU steal, commit abc1234, 2026-12-01 00:00:00"
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
    for key in ("cpu", "cores", "affinity_cores", "memory_gib", "steal_share", "gpu", "torch", "python", "git_commit", "date"):
        assert key in m, key
    assert isinstance(m["cpu"], str) and m["cpu"]
    assert isinstance(m["cores"], int) and m["cores"] >= 1
    assert m["affinity_cores"] is None or 1 <= m["affinity_cores"] <= m["cores"]
    assert m["memory_gib"] is None or m["memory_gib"] > 0
    assert m["steal_share"] is None or 0.0 <= m["steal_share"] <= 1.0
    if Path("/proc/stat").exists():  # Linux: every field is readable here
        assert m["affinity_cores"] is not None and m["memory_gib"] is not None and m["steal_share"] is not None
    json.dumps(m)  # goes into a results file as is


def test_write_json_adds_the_machine(tmp_path, monkeypatch):
    common = _load("common")
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(common, "steal_share", lambda window_s=0.5: None)
    path = common.write_json("x", {"figure": 1})
    data = json.loads(path.read_text())
    assert data["figure"] == 1 and data["machine"]["cores"] >= 1 and "steal_share" in data["machine"]


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
