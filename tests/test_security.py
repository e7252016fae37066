"""Security (docs/architecture.md §Reliability and security): untrusted text never executes, limits
hold, the read-only SQL cannot be escaped.

The SQL guard's basic refusals are in test_sql_cli.py and the dashboard's escaping in
test_dashboard.py (real browser); this file adds the bypass attempts, the running dashboard's
listening sockets (127.0.0.1 only) and the checks that span modules.
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from prl.store.readonly import QueryRefused, run_query
from prl.store.db import Store
from prl.grading.verifier import VerifierPool

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("prl", "prl_core", "flows", "dashboard") for p in (ROOT / d).rglob("*.py")]


# ─── model text never executes ────────────────────────────────────────────────────────────────

def _payloads(marker: Path) -> list[str]:
    cmd = f"__import__('os').system('touch {marker}')"
    return [
        f"\\boxed{{{cmd}}}",
        f"The answer is {cmd}",
        f"The final answer is $\\boxed{{{cmd}}}$",
        f"\\boxed{{exec(\"open('{marker}','w')\")}}",
        f"answer: eval(compile('open(\"{marker}\",\"w\")','x','exec'))",
        f"\\boxed{{\\text{{{cmd}}}}}",
        f"\\boxed{{Symbol('x').__class__.__base__.__subclasses__()}}",
        "The answer is 2 + __import__('os').getpid()",
    ]


def test_model_text_that_is_code_is_never_executed_by_the_verifier(tmp_path):
    marker = tmp_path / "pwned"
    payloads = _payloads(marker)
    with VerifierPool(2, timeout_s=2, wall_s=10) as pool:
        verdicts = pool.verify([(p, "42") for p in payloads] + [(p, p) for p in payloads])
    assert not marker.exists()
    assert all(v.verdict != "correct" for v in verdicts[: len(payloads)])


def test_dataset_text_is_data(tmp_path):
    from prl.data.datasets import load_dataset

    marker = tmp_path / "pwned"
    f = tmp_path / "evil.jsonl"
    problem = f"{{{{7*7}}}} ${{__import__('os').system('touch {marker}')}} <script>alert(1)</script>"
    f.write_text('{"problem": %s, "answer": "__import__(\'os\')"}\n' % __import__("json").dumps(problem))
    (p,), skipped = load_dataset(str(f))
    assert p.problem == problem and not skipped and not marker.exists()


def test_config_files_cannot_construct_python_objects(tmp_path):
    from prl.training.config import ConfigError, RunConfig

    marker = tmp_path / "pwned"
    f = tmp_path / "evil.yaml"
    f.write_text(f"algorithm: !!python/object/apply:os.system ['touch {marker}']\ntrain: {{}}\n")
    with pytest.raises(ConfigError, match=f"{f}:1: invalid YAML"):
        RunConfig.from_yaml(f)
    assert not marker.exists()


def test_no_code_path_evaluates_text():
    """No eval/exec/compile, pickle, unsafe YAML, shell=True or unsafe_allow_html in our sources."""
    banned_calls = {"eval", "exec", "compile", "__import__"}
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
                if isinstance(f, ast.Name) and name in banned_calls:
                    found.append(f"{path.name}:{node.lineno} {name}()")
                if owner in ("pickle", "marshal", "dill") and name.startswith("load"):
                    found.append(f"{path.name}:{node.lineno} {owner}.{name}()")
                if owner == "yaml" and name in ("load", "unsafe_load", "full_load"):
                    found.append(f"{path.name}:{node.lineno} yaml.{name}()")
                for kw in node.keywords:
                    if kw.arg in ("shell", "unsafe_allow_html") and isinstance(kw.value, ast.Constant) and kw.value.value:
                        found.append(f"{path.name}:{node.lineno} {kw.arg}=True")
    assert len(SOURCES) > 40 and not found, found


# ─── verifier workers run under limits ────────────────────────────────────────────────────────

def test_verifier_workers_have_an_address_space_cap_and_a_wall_clock_kill():
    with VerifierPool(1, timeout_s=1, wall_s=3, memory_mb=1536) as pool:
        pid = pool._workers[0][0].pid
        deadline = time.monotonic() + 60  # the worker sets its limit after importing math_verify and a warm-up verification
        while True:
            limits = Path(f"/proc/{pid}/limits").read_text()
            line = next(x for x in limits.splitlines() if x.startswith("Max address space"))
            if line.split()[3] != "unlimited" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert line.split()[3] == str(1536 * 1024 * 1024), line
        # A power tower and a 100k-character nested expression: bounded, verdict per item.
        t = time.perf_counter()
        verdicts = pool.verify([("\\boxed{9^{9^{9^{9^{9}}}}}", "1"), ("\\boxed{" + "(" * 50_000 + "1" + ")" * 50_000 + "}", "1"),
                                ("\\boxed{2}", "2")])
        assert time.perf_counter() - t < 3 * 3 + 5
    assert verdicts[-1].verdict == "correct" and verdicts[0].verdict != "correct"  # 9^(9^(9^(9^9))) is not 1


# ─── the read-only SQL cannot be escaped ──────────────────────────────────────────────────────

@pytest.fixture
def db(tmp_path):
    path = tmp_path / "store.duckdb"
    Store(path).insert_samples([dict(run_id="r", dataset="a", problem_id="p", sample_idx=0, response="x",
                                     extracted_answer="1", verdict="correct", score=1.0, n_tokens=1,
                                     finish_reason="stop", verify_ms=1.0)])
    return path


@pytest.mark.parametrize("sql", [
    "/* c */ ATTACH '{out}' AS o",
    "-- c\nCOPY samples TO '{out}'",
    "  (COPY samples TO '{out}')",
    "WITH x AS (SELECT 1) SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM read_json_auto('http://127.0.0.1:9/x.json')",
    "/**/INSTALL httpfs",
    "/**/LOAD httpfs",
    "/**/SET enable_external_access = true",
    "SELECT current_setting('enable_external_access') AS v FROM (SELECT 1) WHERE (SELECT 1 FROM pragma_version()) = 1 "
    "UNION ALL SELECT * FROM read_text('/etc/hostname')",
    "/**/ CREATE TABLE t AS SELECT 1",
    "/**/ UPDATE samples SET score = 0",
    "/**/ CHECKPOINT",
    "/**/ EXPORT DATABASE '{outdir}'",
])
def test_sql_escapes_are_refused_and_nothing_changes(db, tmp_path, sql):
    out, outdir = tmp_path / "out.duckdb", tmp_path / "exported"
    with pytest.raises(QueryRefused):
        run_query(db, sql.format(out=out, outdir=outdir))
    assert not out.exists() and not outdir.exists()
    assert Store(db, create=False).rows("count_samples") == [(1,)]
    with Store(db, create=False).read() as con:
        assert con.execute("select score from samples").fetchall() == [(1.0,)]


def test_the_external_access_setting_is_locked(db):
    cols, rows = run_query(db, "SELECT current_setting('enable_external_access') AS v")
    assert rows == [(False,)]
    with pytest.raises(QueryRefused):
        run_query(db, "SELECT set_config('enable_external_access', 'true', false)")


def test_dashboard_binds_to_localhost_unless_told(monkeypatch):
    from prl_cli import main as cli

    seen = {}
    monkeypatch.setattr(os, "execv", lambda exe, cmd: seen.setdefault("cmd", cmd))
    cli.main(["dashboard", "--db", "x.duckdb"])
    cmd = seen["cmd"]
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"


def test_the_running_dashboard_listens_on_127_0_0_1_only(tmp_path):
    """The server `prl dashboard` starts holds one listening socket: 127.0.0.1, not 0.0.0.0 nor ::, read from
    the kernel's socket table for its process, whatever addresses the machine has."""
    import signal
    import socket
    import subprocess
    import sys

    from procs import listening_addresses

    with socket.socket() as probe:  # the check reads real bindings: another loopback address shows as itself
        probe.bind(("127.0.0.2", 0))
        probe.listen()
        assert ("127.0.0.2", probe.getsockname()[1]) in listening_addresses(os.getpid())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "prl_cli", "dashboard", "--db", str(tmp_path / "none.duckdb"),
                               "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"the dashboard exited with {server.returncode}"
            if listening_addresses(server.pid):
                break
            assert time.monotonic() < deadline, "the dashboard did not start listening in 120 s"
            time.sleep(0.25)
        time.sleep(1.0)  # a server binding more than one address would have done so by now
        assert listening_addresses(server.pid) == {("127.0.0.1", port)}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
