"""A training process that dies (issue 26): the kernel's OOM killer SIGKILLed it on a 24 GiB machine and
the user saw `RuntimeError: training None failed (exit -9)` under Prefect's tracebacks. Now one message
names the run, how it died, the peak memory of its processes against the machine's, the log, what to
change and how to resume; `prl` prints it as one `error:` line. Real processes, real signals."""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml

from flows.train import TrainingProcessFailed, run_monitored, training_failure
from prl.training.config import RunConfig
from procs import cmdline

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
MEMORY_KEYS = ("micro_batch_size", "max_tokens_per_micro_batch", "logprob_chunk_tokens",
               "gradient_checkpointing: true", "prompts_per_step")


def _run_config(tmp_path, run_id: str) -> RunConfig:
    return RunConfig.from_yaml(ROOT / "configs" / "train" / "tiny_prl.yaml", out_dir=str(tmp_path / "out"),
                               run_id=run_id)


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def _peak_in(message: str) -> float:
    m = re.search(r"peaked at ([\d.]+) (MiB|GiB)", message)
    assert m, message
    return float(m.group(1)) * (MiB if m.group(2) == "MiB" else 1024 * MiB)


def test_a_sigkilled_training_process_is_reported_with_its_peak_memory_and_what_to_change(tmp_path):
    """A child holds 300 MiB (pages written, so resident), then is killed by SIGKILL as the OOM killer does."""
    mon = run_monitored(_child("""
        import os, signal, sys, time
        block = b"x" * (300 << 20)
        print("partial output", flush=True)
        time.sleep(1.2)  # two samples of the parent's monitor
        os.kill(os.getpid(), signal.SIGKILL)
    """), dict(os.environ))
    assert mon.returncode == -signal.SIGKILL
    assert mon.peak_rss >= 300 * MiB
    assert mon.stdout == "partial output\n"

    ckpt = tmp_path / "out" / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "latest").write_text("step_3")
    err = training_failure(_run_config(tmp_path, "oom-run"), mon, available=psutil.virtual_memory().available,
                           config=tmp_path / "out.yaml")
    text = str(err)
    first = text.splitlines()[0]
    assert first.startswith("training oom-run was killed by SIGKILL"), text
    assert "None" not in text
    assert _peak_in(first) >= 300 * MiB
    total = psutil.virtual_memory().total
    assert f"{total / 2**30:.1f} GiB" in first  # the machine's memory (no cgroup limit below it here)
    assert all(k in text for k in MEMORY_KEYS) and "prl train --dry-run" in text
    assert "--resume" in text and f"step_3 in {ckpt}" in text
    assert "log: " in text
    assert (err.run_id, err.returncode, err.peak_rss) == ("oom-run", -9, mon.peak_rss)
    again = pickle.loads(pickle.dumps(err))  # Prefect and Ray pickle task exceptions
    assert (str(again), again.run_id, again.peak_rss) == (text, "oom-run", mon.peak_rss)
    assert "perhaps not for memory" in first and not err.likely_oom  # 300 MiB of a whole machine
    # had the machine had only about that much memory available, the OOM killer is the likely cause
    err = training_failure(_run_config(tmp_path, "oom-run"), mon, available=mon.peak_rss)
    assert str(err).startswith("training oom-run was killed by SIGKILL, most likely by the kernel's "
                               "out-of-memory killer") and err.likely_oom


def test_the_peak_counts_descendants_and_orphans_are_ended(tmp_path):
    """The rollout engine runs in child processes of the trainer: their memory counts, and one left running
    when the trainer dies (holding its memory and stdout) is ended."""
    pid_file = tmp_path / "grandchild.pid"
    mon = run_monitored(_child(f"""
        import os, signal, subprocess, sys, time
        g = subprocess.Popen([sys.executable, "-c", "import time; b = b'y' * (200 << 20); time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(g.pid))
        time.sleep(2.0)
        os.kill(os.getpid(), signal.SIGKILL)
    """), dict(os.environ))
    grandchild = int(pid_file.read_text())
    assert mon.returncode == -signal.SIGKILL
    assert grandchild in mon.pids
    assert mon.peak_rss >= 200 * MiB
    deadline = time.monotonic() + 10
    while psutil.pid_exists(grandchild) and psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the orphaned engine process was left running"
        time.sleep(0.1)


def test_a_non_zero_exit_names_the_code_without_memory_advice(tmp_path):
    mon = run_monitored(_child("import sys; sys.exit(3)"), dict(os.environ))
    assert mon.returncode == 3
    text = str(training_failure(_run_config(tmp_path, "exit-run"), mon))
    assert text.startswith("training exit-run failed: the training process exited with code 3"), text
    assert "SIGKILL" not in text and "micro_batch_size" not in text  # a few MiB: not a memory problem
    assert "no checkpoint was written yet" in text and "--resume" in text


def _v1_memory_cgroup() -> Path | None:
    base = Path("/sys/fs/cgroup/memory")
    if not (base / "tasks").is_file() or not os.access(base, os.W_OK) or not os.access("/dev/kmsg", os.R_OK):
        return None
    return base


@pytest.mark.skipif(_v1_memory_cgroup() is None, reason="needs a writable cgroup-v1 memory controller and /dev/kmsg")
def test_a_real_out_of_memory_kill_is_named_from_the_kernel_log(tmp_path):
    """A child in a cgroup limited to 64 MiB writes 256 MiB: the kernel's OOM killer kills it, and the message
    says so from the kernel log (and counts its memory when killed, after the last sample)."""
    cg = _v1_memory_cgroup() / f"prl-test-oom-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(64 * MiB))
        mon = run_monitored(_child(f"""
            import os
            open({str(cg / "tasks")!r}, "w").write(str(os.getpid()))
            block = b"x" * (256 << 20)
            print("survived")
        """), dict(os.environ))
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                cg.rmdir()
                break
            except OSError:  # the killed process is still leaving it
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    assert mon.returncode == -signal.SIGKILL and "survived" not in mon.stdout
    err = training_failure(_run_config(tmp_path, "cgroup-run"), mon)
    text = str(err)
    assert text.startswith("training cgroup-run was killed by SIGKILL from the kernel's out-of-memory killer"), text
    assert "kernel log: Memory cgroup out of memory: Killed process" in text and err.likely_oom
    assert err.peak_rss >= 50 * MiB  # what it held when killed, from the kernel's record


def test_a_librarys_traceback_of_an_error_the_cli_reports_goes_to_the_log_file_only(tmp_path, capsys, monkeypatch):
    """Prefect logs the traceback of a failed flow run at ERROR; `prl` prints that error as one line, so the
    console drops the record (the log file keeps it). Other errors from libraries still reach the console."""
    import logging

    from prl import log_routing
    from prl_cli.main import _is_user_error

    monkeypatch.setattr(log_routing, "_is_our_file", lambda path: False)  # this test file is not 'our code'
    log_routing.reset()
    log_routing.configure(None, reported=_is_user_error)
    try:
        log_routing.log_to(tmp_path / "run.log", announce=False)
        prefect = logging.getLogger("prefect.flow_runs")
        for exc in (TrainingProcessFailed("training x was killed by SIGKILL\n  log: run.log"), RuntimeError("a bug")):
            try:
                raise exc
            except Exception as e:
                prefect.exception("Encountered exception during execution: %r", e)
            # then, as Prefect's task engine does, the final state quoting it, without the exception
            logging.getLogger("prefect.task_runs").error(
                f"Finished in state Failed('Task run encountered an exception {type(exc).__name__}: {exc!s}')")
    finally:
        log_routing.reset()
    err = capsys.readouterr().err
    assert "SIGKILL" not in err, err
    assert "RuntimeError('a bug')" in err and "Finished in state Failed('Task run encountered an exception " \
        "RuntimeError: a bug')" in err
    logged = (tmp_path / "run.log").read_text()
    assert "TrainingProcessFailed: training x was killed by SIGKILL" in logged and "Traceback" in logged
    assert "ERROR prefect.task_runs: Finished in state Failed('Task run encountered an exception " \
        "TrainingProcessFailed: training x was killed by SIGKILL" in logged


def test_every_user_error_class_derives_from_the_one_base():
    """prl_cli.main recognises a user error by one base class, prl_core.errors.UserError (it also runs while
    logging, where it must not import): each package's error class derives from it."""
    from prl_core.config import ConfigError
    from prl_core.errors import UserError

    from prl.data.datasets import DatasetError
    from prl.evaluation.config import EvalError
    from prl.evaluation.report import ReportError
    from prl.generation.engines.base import EngineError
    from prl.generation.generate import GenerateInputError
    from prl.generation.prompts import PromptError
    from prl.imports.formats import FormatError
    from prl.imports.run import ImportRunError
    from prl.models.importer import ModelImportError
    from prl.models.qwen import QwenTokenizerError
    from prl.store.db import StoreError
    from prl.store.readonly import QueryRefused
    from prl.training.train import CheckpointError
    from prl_cli.main import _is_user_error

    classes = (ConfigError, DatasetError, EvalError, ReportError, EngineError, PromptError, FormatError,
               ImportRunError, ModelImportError, StoreError, CheckpointError, TrainingProcessFailed,
               GenerateInputError, QwenTokenizerError, QueryRefused)
    for cls in classes:
        assert issubclass(cls, UserError) and _is_user_error(cls("x")), cls
    assert _is_user_error(OSError(28, "No space left on device"))
    assert not _is_user_error(RuntimeError("x")) and not _is_user_error(type("ConfigError", (ValueError,), {})("x"))


def test_prl_train_whose_training_process_is_sigkilled_prints_one_error_line(tiny_model_dir, tmp_path,
                                                                              prefect_api_env):
    """`prl train`, its training process SIGKILLed as the OOM killer does: exit 2, one `error:` line naming
    the run, the signal, the memory and the fixes; no traceback (Prefect's goes to the run's log file)."""
    out = tmp_path / "killed-run"
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump({
        "algorithm": {"estimator": "grpo", "n_samples": 2},
        "train": {"model": str(tiny_model_dir), "out_dir": str(out), "db": str(tmp_path / "store.duckdb"),
                  "steps": 2, "prompts_per_step": 2, "max_tokens": 8, "engine": "hf", "mini_batch_size": 4,
                  "micro_batch_size": 4, "eval_datasets": []}}))
    cli = subprocess.Popen([sys.executable, "-m", "prl_cli", "train", "--config", str(cfg)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        trainer = None
        while trainer is None and cli.poll() is None and time.monotonic() < deadline:
            trainer = next((p for p in psutil.Process(cli.pid).children(recursive=True)
                            if "prl.training.train" in " ".join(cmdline(p))), None)
            time.sleep(0.05)
        assert trainer is not None, f"no training process started: {cli.stderr.read() if cli.poll() is not None else ''}"
        trainer.send_signal(signal.SIGKILL)
        stdout, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("error: training killed-run was killed by SIGKILL"), stderr
    assert "None" not in errors[0] and "peaked at" in errors[0] and "GiB" in errors[0]
    assert all(k in stderr for k in MEMORY_KEYS) and "--dry-run" in stderr
    assert "then rerun with --resume" in stderr and f"log: {out / 'train.log'}" in stderr
    assert stdout == ""
    log = (out / "train.log").read_text()
    assert "Traceback" in log and "TrainingProcessFailed" in log  # Prefect's record of the failed flow run
