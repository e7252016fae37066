"""The fault points (prl/fault_points.py): the spec's grammar, which call fires, that the kill takes the whole
process group (a child included) and comes no earlier than asked, that an unset point does nothing, and that
the names the code calls and the names documented are the same set."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from prl import fault_points
from prl.fault_points import ENV, POINTS, Spec

ROOT = Path(__file__).resolve().parents[2]


def test_spec_grammar():
    assert Spec.parse("train/update_done@t/4") == Spec("train/update_done", "t/4", 1, 0.0)
    assert Spec.parse("eval/generate@run@step4:3+0.5") == Spec("eval/generate", "run@step4", 3, 0.5)
    assert Spec.parse("sft/saved") == Spec("sft/saved", None, 1, 0.0)
    for bad, msg in [("train/nope", "unknown fault point 'train/nope'"), ("eval/generate:0", "N counts from 1"),
                     ("eval/generate@a:b", "expected POINT"), ("eval/generate+x", "expected POINT")]:
        with pytest.raises(ValueError, match=msg):
            Spec.parse(bad)


def _child(code: str, spec: str | None, timeout: float = 60) -> tuple[int, str, float]:
    """Run ``code`` in a fresh interpreter in its own process group with ``PRL_FAULT_POINT=spec``."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if spec is not None:
        env[ENV] = spec
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout, start_new_session=True)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t


CALLS = """
    import sys
    from prl.fault_points import fault_point
    for step in range(1, 6):
        fault_point("train/step_start", f"t/{step}")
        fault_point("eval/generate", lambda: "e")
        print(step, flush=True)
    print("done")
    """


def test_the_matching_call_kills_and_the_others_do_not():
    rc, out, _ = _child(CALLS, "train/step_start@t/3")
    assert rc == -signal.SIGKILL and out.split()[:2] == ["1", "2"] and "done" not in out
    assert "SIGKILL to process group" in out and "at train/step_start" in out
    rc, out, _ = _child(CALLS, "eval/generate:4")  # the 4th call of the point, whatever its key
    assert rc == -signal.SIGKILL and out.split()[:3] == ["1", "2", "3"]
    rc, out, _ = _child(CALLS, "eval/generate@other")  # no call has that key: nothing happens
    assert rc == 0 and out.split()[-1] == "done"
    rc, out, _ = _child(CALLS, None)
    assert rc == 0 and out.split()[-1] == "done"


def test_the_kill_takes_the_whole_process_group_after_the_delay(tmp_path):
    """A child process of the group dies with it (as vLLM's and the verifier's workers do); with +DELAY the code
    after the point runs for that long first."""
    pid_file = tmp_path / "child.pid"
    code = f"""
        import subprocess, sys, time
        from prl.fault_points import fault_point
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        t = time.monotonic()
        fault_point("sft/saved")
        while time.monotonic() - t < 60:
            time.sleep(0.01)
        """
    rc, out, seconds = _child(code, "sft/saved+1.5")
    assert rc == -signal.SIGKILL and seconds >= 1.5, out
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child), "the child of the killed process survived"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_an_unset_fault_point_is_one_comparison(monkeypatch):
    """Unset, a call returns before looking at its key (a function key is never called)."""
    monkeypatch.setattr(fault_points, "_SPEC", None)
    called = []
    fault_points.fault_point("train/step_start", lambda: called.append(1))
    assert called == []
    monkeypatch.setattr(fault_points, "_SPEC", Spec.parse("train/step_start@x"))
    fault_points.fault_point("train/update_done", lambda: called.append(1))  # another point: key not read
    fault_points.fault_point("train/step_start", lambda: called.append(1) or "y")  # read, does not match
    assert called == [1]


def test_every_documented_point_is_called_and_every_call_is_documented():
    calls: dict[str, list[str]] = {}
    for path in [*ROOT.joinpath("prl").rglob("*.py"), *ROOT.joinpath("flows").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "fault_point":
                assert isinstance(node.args[0], ast.Constant), f"{path}: a fault point's name must be a literal"
                calls.setdefault(node.args[0].value, []).append(str(path.relative_to(ROOT)))
    assert set(calls) == set(POINTS), (sorted(set(calls) ^ set(POINTS)), calls)
