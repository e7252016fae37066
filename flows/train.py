"""The ``train`` flow: PRL (or GRPO, Dr.GRPO, RAFT) training on DeepSpeed with every step in the store.

The loop is one plain script, :mod:`prl.training.train`, that runs once per rank (DeepSpeed's
launcher starts several). This flow writes the run's config file and launches the script in its
own process, as the launcher would: the process group, the rollout engine and their memory live
and die with it, and a retry resumes from the last checkpoint. The script's periodic evaluations
are eval runs in the store linked to the training run and step.

While the script runs, :func:`run_monitored` samples the resident memory of its process tree; when
the process dies (a signal such as the kernel's OOM killer's SIGKILL, or a non-zero exit),
:func:`launch` raises :class:`TrainingProcessFailed`, one message that says how it died, the peak
memory seen against the machine's, where the log is and what to change (``prl`` prints it as one
``error:`` line).

Several processes: ``deepspeed --num_gpus N --module prl.training.train --config FILE``.
"""

from __future__ import annotations

from prl_core.errors import UserError
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import psutil
import yaml
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.export_evaluation import emit_checkpoint_event
from flows.run_log import log as _log

from prl import log_routing
from prl.store.db import Store
from prl.training import exports
from prl.training.config import RunConfig

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")
SAMPLE_INTERVAL_S = 0.5
OOM_SHARE = 0.8
"""A SIGKILL is put down to the OOM killer when the peak memory seen reached this share of the memory
there was for it (available when it started, or the machine's or cgroup's limit)."""
MEMORY_HINTS = ("a smaller micro_batch_size", "a (smaller) max_tokens_per_micro_batch", "a smaller logprob_chunk_tokens",
                "gradient_checkpointing: true", "fewer prompts_per_step")
"""What lowers a training run's memory (keys of the config's ``train:``), named in the message."""


class TrainingProcessFailed(UserError, RuntimeError):
    """The training process died: killed by a signal (the kernel's OOM killer sends SIGKILL) or ended with
    a non-zero exit code. The message says how, the peak memory of its processes, where the run's log is,
    what to change and how to resume; ``prl`` prints it as one ``error:`` line. The details are attributes
    (``run_id``, ``returncode``, ``peak_rss``, ``memory``, ``likely_oom``)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.run_id: str | None = details.get("run_id")
        self.returncode: int | None = details.get("returncode")
        self.peak_rss: int | None = details.get("peak_rss")
        self.memory: int | None = details.get("memory")
        self.likely_oom: bool = bool(details.get("likely_oom"))


class Monitored(NamedTuple):
    """What :func:`run_monitored` saw: the exit status (negative: the signal that killed it, as
    :mod:`subprocess` has it), the peak resident memory of the process tree in bytes, its stdout, the ids
    of every process of the tree it saw, and when it started (``time.monotonic()``)."""

    returncode: int
    peak_rss: int
    stdout: str
    pids: frozenset[int] = frozenset()
    started: float | None = None


class _TreeSampler(threading.Thread):
    """Every ``interval`` seconds, the summed RSS of a process and its descendants, and each one's own
    high-water mark (``VmHWM``, which counts a spike between two samples); keeps the peaks."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.interval = interval
        self.peak = 0
        self.pids = {pid}
        self.last: list[psutil.Process] = []
        self._done = threading.Event()
        try:
            self._root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._root = None

    def sample(self) -> None:
        if self._root is None:
            return
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:  # it has ended
            return
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
            self.peak = max(self.peak, _high_water(p.pid))
        self.peak = max(self.peak, total)
        self.pids.update(p.pid for p in procs)
        self.last = procs[1:]

    def run(self) -> None:
        while True:
            self.sample()
            if self._done.wait(self.interval):
                return

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


def _high_water(pid: int) -> int:
    """A process's peak resident memory so far (Linux ``VmHWM``; 0 where there is none). Not ``wait4``'s
    ``ru_maxrss``: a child started by vfork keeps the parent's high-water mark in it (measured)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run_monitored(cmd: list[str], env: dict[str, str] | None = None, *, interval: float = SAMPLE_INTERVAL_S,
                  on_line: Callable[[str], None] | None = None) -> Monitored:
    """Run ``cmd`` (stdout captured, stderr inherited) and wait for it, sampling the resident memory of it
    and its descendants (psutil) every ``interval`` seconds. The peak is the larger of the sampled sums and
    each process's own high-water mark seen (which also counts a spike between two samples; not one after
    the last). Descendants left running after it failed are ended. Ctrl-C kills it and re-raises.
    ``on_line(line)`` sees each stdout line as it arrives (an exception in it is reported, not raised)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                try:
                    on_line(line)
                except Exception as e:  # noqa: BLE001 - the process's output is still collected
                    print(f"[train] WARNING: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    reader = threading.Thread(target=read, name=f"stdout-{proc.pid}", daemon=True)
    reader.start()
    sampler = _TreeSampler(proc.pid, interval)
    sampler.start()
    try:
        proc.wait()
    except BaseException:
        sampler.stop()
        proc.kill()
        proc.wait()
        raise
    sampler.stop()
    if proc.returncode != 0:
        _end(sampler.last)  # orphans of a dead trainer (an engine process) would hold its memory
    reader.join(timeout=30)  # a descendant that outlives it may hold stdout open
    if not reader.is_alive():
        proc.stdout.close()
    return Monitored(proc.returncode, sampler.peak, "".join(lines), frozenset(sampler.pids), started)


def _end(procs: list[psutil.Process]) -> None:
    alive = [p for p in procs if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def memory_limit() -> tuple[int, str]:
    """The memory there is for processes here: (bytes, what it is) — the machine's total, or the
    memory limit of this process's cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) when lower."""
    total = psutil.virtual_memory().total
    limit, what = total, "this machine's memory"
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                base, name = Path("/sys/fs/cgroup"), "memory.max"
            elif "memory" in controllers.split(","):
                base, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
            else:
                continue
            d = base / path.lstrip("/")
            while True:  # the lowest limit on the way up is the one that applies
                with contextlib.suppress(OSError, ValueError):
                    value = (d / name).read_text().strip()
                    if value != "max" and int(value) < limit:
                        limit, what = int(value), f"the memory limit of its cgroup ({d / name})"
                if d == base or base not in d.parents:
                    break
                d = d.parent
    return limit, what


def kernel_oom_record(pids: set[int] | frozenset[int], *, since: float | None = None, max_s: float = 2.0
                      ) -> str | None:
    """The kernel log's line saying the OOM killer killed one of ``pids`` (at or after ``since``, a
    ``time.monotonic()``), if the kernel log can be read here (``/dev/kmsg``; often it cannot: None)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = None
    deadline = time.monotonic() + max_s
    killed = re.compile(r"Killed process (\d+)")
    try:
        while time.monotonic() < deadline:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:  # read everything there is
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # records overwritten while reading: go on with the next
                    continue
                break
            if not rec:
                break
            prefix, _, text = rec.decode("utf-8", "replace").partition(";")
            m = killed.search(text)
            if not m or int(m.group(1)) not in pids:
                continue
            with contextlib.suppress(IndexError, ValueError):  # "priority,sequence,microseconds,flags"
                if since is not None and int(prefix.split(",")[2]) / 1e6 < since - 5:
                    continue  # an earlier process that had the same id
            found = text.strip().splitlines()[0]
    finally:
        os.close(fd)
    return found


def _now(t: Any, key: str) -> str:
    value = getattr(t, key, None)
    if value is None:
        return ""
    if key == "max_tokens_per_micro_batch" and value == 0:
        return " (0: no token budget)"
    return f" ({json.dumps(value) if isinstance(value, bool) else value})"


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


_SIGNAL_CAUSES = {
    "SIGTERM": "something asked it to stop (`kill`, a job scheduler's time or memory limit, a shutdown)",
    "SIGINT": "it was interrupted",
    "SIGHUP": "its terminal went away",
    "SIGSEGV": "a crash in native code (torch, vLLM, DeepSpeed or a driver)",
    "SIGBUS": "a crash in native code, or a memory-mapped file (model weights) that went away",
    "SIGABRT": "native code aborted; its message is above or in the log",
    "SIGILL": "native code used an instruction this CPU lacks (a build for another CPU)",
    "SIGFPE": "a crash in native code (arithmetic fault)",
}


def training_failure(rc: RunConfig, mon: Monitored, *, available: int | None = None,
                     config: str | Path | None = None) -> TrainingProcessFailed:
    """The error for a training process that ended with ``mon.returncode != 0``: how it died, the peak
    memory seen, the machine's memory, the log, what to change and how to resume. ``available``: the
    memory available when it started (``psutil.virtual_memory().available``); ``config``: the run's
    config file."""
    t = rc.train
    run_id = t.resolved_run_id
    signame = _signal_name(-mon.returncode) if mon.returncode < 0 else None
    kernel = kernel_oom_record(mon.pids, since=mon.started) if signame == "SIGKILL" else None
    peak_rss = mon.peak_rss
    if kernel:  # the killed process's memory when it was killed, after the last sample
        peak_rss = max(peak_rss, 1024 * sum(int(kb) for kb in re.findall(r"\b(?:anon|file|shmem)-rss:(\d+)kB", kernel)))
    limit, limit_what = memory_limit()
    close = peak_rss >= OOM_SHARE * (min(limit, available) if available else limit)
    peak = (f"its processes peaked at {_size(peak_rss)} resident memory ({peak_rss / limit:.0%} of {limit_what}, "
            f"{_size(limit)}" + (f"; {_size(available)} was available when it started)" if available else ")"))
    if signame == "SIGKILL" and kernel:
        head = f"training {run_id} was killed by SIGKILL from the kernel's out-of-memory killer: {peak}"
    elif signame == "SIGKILL" and close:
        head = (f"training {run_id} was killed by SIGKILL, most likely by the kernel's out-of-memory killer (it "
                f"sends SIGKILL when memory runs out): {peak}")
    elif signame == "SIGKILL":
        head = (f"training {run_id} was killed by SIGKILL: {peak}, so perhaps not for memory (the kernel's "
                f"out-of-memory killer sends SIGKILL, and so do `kill -9`, job schedulers and container limits; "
                f"a child process's last spike can go unseen)")
    elif signame:
        cause = _SIGNAL_CAUSES.get(signame)
        head = (f"training {run_id} was killed by {signame} (signal {-mon.returncode})"
                f"{': ' + cause if cause else ''}; {peak}")
    else:
        head = (f"training {run_id} failed: the training process exited with code {mon.returncode} (its "
                f"messages are above and in the log); {peak}")
    lines = [head]
    if kernel:
        lines.append(f"  kernel log: {kernel}")
    log_file = log_routing.current_log_file()
    lines.append(f"  log: {log_file}" if log_file else "  log: none; the training process wrote to this stderr")
    if signame == "SIGKILL" or close:
        lines.append("  to use less memory, change the config's train: section (now in brackets): "
                     + ", ".join(hint + _now(t, next(w.rstrip(":") for w in hint.split() if "_" in w)) for hint in MEMORY_HINTS)
                     + "; `prl train --dry-run` with the same options prints the plan"
                     + (f" (this run's full config: {config})" if config else ""))
    ckpt = Path(t.out_dir) / "checkpoints"
    latest = ckpt / "latest"
    tag = latest.read_text().strip() if latest.is_file() else ""
    if tag:
        lines.append(f"  then rerun with --resume: it continues from the last checkpoint ({tag} in {ckpt})")
    else:
        lines.append("  then rerun with --resume: no checkpoint was written yet, so it starts again from the "
                     f"first step (checkpoint_every {t.checkpoint_every})")
    return TrainingProcessFailed("\n".join(lines), run_id=run_id, returncode=mon.returncode, peak_rss=peak_rss,
                                 memory=limit, likely_oom=bool(kernel) or (signame == "SIGKILL" and close))


def write_config(rc: RunConfig) -> Path:
    """The run's full config as ``<out_dir>.yaml`` beside its output directory (what the script reads)."""
    out = Path(rc.train.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = out.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(json.loads(json.dumps(rc.to_dict(), default=list)), sort_keys=False))
    return config


def launch(rc: RunConfig, *, resume: bool, progress: bool) -> dict[str, Any]:
    """Run ``python -m prl.training.train`` on the run's config; returns the script's result (its last
    stdout line). Its progress bar and step lines go to this process's stderr. Raises
    :class:`TrainingProcessFailed` when the process dies or fails."""
    config = write_config(rc)
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    _log(f"training {rc.train.resolved_run_id} ({rc.algorithm.estimator}, {rc.train.steps} steps) → {rc.train.out_dir}; "
         f"config {config}")
    cmd = [sys.executable, "-m", "prl.training.train", "--config", str(config)]
    cmd += ["--resume"] * resume + ["--quiet"] * (not progress)
    available = psutil.virtual_memory().available
    mon = run_monitored(cmd, env, on_line=announce_export)
    if mon.returncode != 0:
        raise training_failure(rc, mon, available=available, config=config)
    result = json.loads(mon.stdout.strip().splitlines()[-1])
    _log(f"trained {rc.train.resolved_run_id}: {result['steps']} steps"
         + (f" (resumed after step {result['resumed_from_step']})" if result.get("resumed_from_step") else "")
         + f"; peak memory {_size(mon.peak_rss)}")
    return result


def announce_export(line: str) -> None:
    """A checkpoint export the training script reported (``prl.training.exports.announcement``) as the Prefect
    event that the ``evaluate-checkpoint`` automation follows; other lines are ignored."""
    record = exports.read_announcement(line)
    if record is not None and emit_checkpoint_event(record, log=_log):
        _log(f"[train] step {record['step']}: event {exports.CHECKPOINT_EVENT} sent")


def finished_run(rc: RunConfig) -> bool:
    """Whether the store holds this training run as finished, with this config, and its policy is on disk. A
    launch would then load its last checkpoint, train nothing and write the same policy again (about as long
    as starting a training process takes), so a rerun of the pipeline skips it."""
    t = rc.train
    if not Path(t.db).exists() or not (Path(t.out_dir) / "policy" / "config.json").is_file():
        return False
    run = Store(t.db, create=False).records("get_run", run_id=t.resolved_run_id)
    return (bool(run) and run[0]["kind"] == "train" and run[0]["status"] == "finished"
            and json.loads(run[0]["config"] or "null") == json.loads(json.dumps(rc.to_dict(), default=list)))


@task(name="train-run", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=5)
def train_run(rc: RunConfig, resume: bool = True, progress: bool = False) -> dict[str, Any]:
    """One training run in its own process; safe to retry (it resumes from its last checkpoint)."""
    return launch(rc, resume=resume, progress=progress)


@flow(name="train", log_prints=False)
def train(cfg: RunConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train for ``cfg.train.steps`` steps (continuing from the last checkpoint with ``resume``)."""
    return launch(cfg, resume=resume, progress=progress)
