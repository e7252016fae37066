"""Where log records go (prl/log_routing.py): our lines on the console, third-party chatter in the log file.

The unit tests emit records as the libraries do (vLLM's non-propagating logger, DeepSpeed's logger with its
own stdout handler, Prefect's run loggers, Python warnings, a C++-style write to file descriptor 2). The
end-to-end test runs ``prl eval`` on the vLLM engine as a user does and reads its console and log file.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from prl import log_routing

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def routed(tmp_path):
    """prl.log_routing configured with a log file; undone afterwards."""
    log_routing.reset()
    yield tmp_path / "run" / "run.log"
    log_routing.reset()


def _emit_like_the_libraries(prefect_from_our_file: bool = True) -> None:
    vllm = logging.getLogger("vllm")
    handler = log_routing.RoutedHandler()
    vllm.addHandler(handler)
    propagate, level = vllm.propagate, vllm.level
    vllm.propagate = False
    vllm.setLevel(logging.WARNING)
    try:
        logging.getLogger("vllm.platforms.cpu").warning("Triton is not installed.")
    finally:
        vllm.removeHandler(handler)
        vllm.propagate, vllm.level = propagate, level
    ds = logging.getLogger("DeepSpeed")
    ds_handler = logging.StreamHandler(sys.stdout)  # what deepspeed.utils.logging adds at import
    ds.addHandler(ds_handler)
    ds_propagate = ds.propagate
    ds.propagate = False
    try:
        ds.warning("Setting accelerator to CPU.")
    finally:
        ds.removeHandler(ds_handler)
        ds.propagate = ds_propagate
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("`torch.distributed.reduce_op` is deprecated", FutureWarning, stacklevel=1)
    chatter = logging.getLogger("prefect.task_runs")
    chatter_level = chatter.level
    chatter.setLevel(logging.INFO)
    try:
        chatter.info("Finished in state Completed()")  # as Prefect's task engine logs it
    finally:
        chatter.setLevel(chatter_level)
    logging.getLogger("prl.evaluation").warning("run ux: 3 problems skipped")
    torch_log = logging.getLogger("torch.distributed")  # torch's own stderr handler, no propagation
    torch_log.warning("ProcessGroupGloo is slow")
    torch_log.error("process group failed")


def test_third_party_records_go_to_the_file_ours_stay_on_the_console(routed, capsys, monkeypatch):
    monkeypatch.setattr(log_routing, "_is_our_file", lambda path: False)  # this test file is not 'our code'
    log_routing.configure(None)
    path = log_routing.log_to(routed)
    assert path == routed.resolve() and routed.exists()
    _emit_like_the_libraries()
    out = capsys.readouterr()
    assert f"log: {path}" in out.err
    console = out.err + out.out
    for text in ("Triton", "accelerator", "reduce_op", "Finished in state", "Gloo"):
        assert text not in console, f"{text!r} reached the console:\n{console}"
    assert "run ux: 3 problems skipped" in out.err  # our warning
    assert "process group failed" in out.err  # errors from anyone
    logged = routed.read_text()
    for text in ("WARNING vllm.platforms.cpu: Triton is not installed.", "WARNING DeepSpeed: Setting accelerator",
                 "py.warnings", "FutureWarning: `torch.distributed.reduce_op` is deprecated",
                 "INFO prefect.task_runs: Finished in state Completed()", "run ux: 3 problems skipped",
                 "WARNING torch.distributed: ProcessGroupGloo is slow", "ERROR torch.distributed: process group failed"):
        assert text in logged, f"{text!r} not in the log file:\n{logged}"


def test_verbose_keeps_everything_on_the_console(routed, capsys, monkeypatch):
    monkeypatch.setattr(log_routing, "_is_our_file", lambda path: False)
    log_routing.configure(None, verbose=True)
    log_routing.log_to(routed)
    _emit_like_the_libraries()
    err = capsys.readouterr().err
    for text in ("Triton is not installed", "Setting accelerator", "reduce_op", "Finished in state"):
        assert text in err
    assert "Triton is not installed" in routed.read_text()  # and the file still has them


def test_without_a_log_file_nothing_is_hidden(capsys, monkeypatch):
    log_routing.reset()
    monkeypatch.setattr(log_routing, "_is_our_file", lambda path: False)
    log_routing.configure(None)
    try:
        _emit_like_the_libraries()
    finally:
        log_routing.reset()
    err = capsys.readouterr().err
    assert "Triton is not installed" in err and "reduce_op" in err


def test_prefect_run_logger_lines_from_our_code_are_ours():
    record = logging.LogRecord("prefect.flow_runs", logging.INFO, str(ROOT / "flows" / "run_log.py"), 1, "run x", None, None)
    assert log_routing.is_ours(record)
    record.pathname = "/venv/lib/python3.11/site-packages/prefect/task_engine.py"
    assert not log_routing.is_ours(record)
    assert log_routing.is_ours(logging.LogRecord("prl.training", logging.INFO, "x.py", 1, "m", None, None))


def test_reset_puts_everything_back(routed):
    root = logging.getLogger()
    before = list(root.handlers)
    captured = getattr(logging, "_warnings_showwarning", None) is not None
    log_routing.configure(routed)
    assert len(root.handlers) >= len(before) + 1 and log_routing.current_log_file() is not None
    log_routing.reset()
    assert root.handlers == before and log_routing.current_log_file() is None
    assert (getattr(logging, "_warnings_showwarning", None) is not None) == captured
    assert log_routing._REROUTE not in logging.getLogger("DeepSpeed").filters


def test_child_processes_get_the_log_file_through_the_environment(routed, monkeypatch):
    """The demo and the train flow launch the training script in its own process; it calls
    configure_from_env and writes its library messages into the same file."""
    monkeypatch.delenv(log_routing.LOG_FILE_ENV, raising=False)
    monkeypatch.delenv(log_routing.VERBOSE_ENV, raising=False)
    assert log_routing.configure_from_env() is None and log_routing.current_log_file() is None  # nothing asked: untouched
    path = log_routing.configure(routed)
    assert os.environ[log_routing.LOG_FILE_ENV] == str(path) and log_routing.VERBOSE_ENV not in os.environ
    child = subprocess.run([sys.executable, "-c", "import logging, sys; from prl import log_routing; "
                            "log_routing.configure_from_env(); logging.getLogger('torch.distributed').warning('from the child'); "
                            "print('step line', file=sys.stderr)"],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr
    assert "from the child" not in child.stderr and "step line" in child.stderr
    assert "WARNING torch.distributed: from the child" in path.read_text()
    log_routing.reset()
    assert log_routing.LOG_FILE_ENV not in os.environ


def test_stderr_to_log_takes_what_bypasses_logging(routed, capfd):
    log_routing.configure(routed)
    with log_routing.stderr_to_log():
        os.write(2, b"[W1201 utils.cpp:68] Warning: NUMA binding\n")  # as C++ code writes
        print("Loading safetensors checkpoint shards: 100%", file=sys.__stderr__, flush=True)  # tqdm, on fd 2
    os.write(2, b"after the block\n")
    err = capfd.readouterr().err
    assert "NUMA" not in err and "safetensors" not in err and "after the block" in err
    text = routed.read_text()
    assert "Warning: NUMA binding" in text and "Loading safetensors checkpoint shards" in text


def test_stderr_to_log_is_a_no_op_when_verbose(routed, capfd):
    log_routing.configure(routed, verbose=True)
    with log_routing.stderr_to_log():
        os.write(2, b"NUMA binding\n")
    assert "NUMA binding" in capfd.readouterr().err


# ------------------------------------------------------------------------------------------------
# end to end: `prl eval` on the vLLM engine, as a user runs it

THIRD_PARTY = re.compile(r"WARNING vllm|FutureWarning|Warning: NUMA|LD_PRELOAD|Triton|Task run '|Finished in state|"
                         r"Beginning flow run|Starting temporary server|Loading safetensors|\| WARNING \|")


@pytest.mark.e2e
def test_prl_eval_console_holds_only_our_lines_and_the_log_file_the_rest(tiny_model_dir, tmp_path):
    pytest.importorskip("vllm")
    db = tmp_path / "store" / "ux.duckdb"
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "INFO"}  # as users run it (conftest quiets Prefect for tests)
    r = subprocess.run([sys.executable, "-m", "prl_cli", "eval", "--model", str(tiny_model_dir), "--dataset",
                        "synth_test:4", "--n", "2", "--max-tokens", "8", "--db", str(db), "--run", "ux"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=400)
    assert r.returncode == 0, r.stderr
    log_file = tmp_path / "store" / "logs" / "ux.log"
    assert f"log: {log_file}" in r.stderr
    noise = [line for line in r.stderr.splitlines() if THIRD_PARTY.search(line)]
    assert noise == [], "third-party lines on the console:\n" + "\n".join(noise)
    assert "run ux (new)" in r.stderr and "engine vllm ready" in r.stderr and "8 samples added" in r.stderr
    logged = log_file.read_text()
    assert "WARNING vllm." in logged  # the engine's records (vLLM warns at every CPU start)
    assert "Finished in state Completed()" in logged  # Prefect's chatter
    assert "engine vllm ready" in logged  # and our lines, for context
