"""Test helper: start a command in its own process group and SIGKILL the whole group once a
condition on the outside world (usually the store) holds — a real crash at a chosen point."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import psutil


def kill_when(cmd: list[str], ready: Callable[[], bool], *, cwd: Path, env: dict[str, str],
              timeout_s: float = 600, poll_s: float = 0.05) -> None:
    """Run ``cmd``; when ``ready()`` is true, SIGKILL its process group (the command and its children).

    Fails if the command ends on its own first (it could not be killed mid-run) or ``timeout_s`` passes.
    ``ready`` may raise while the command is starting (e.g. the store does not exist yet): that counts as False.
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if ready():
                    break
            except Exception:
                pass
            time.sleep(poll_s)
        assert proc.poll() is None, f"ended before it could be killed: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "the kill point was never reached"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket listening in process ``pid`` and its children, as the
    kernel reports them (psutil reads /proc/net/tcp and tcp6)."""
    import psutil

    root = psutil.Process(pid)
    return {(c.laddr.ip, c.laddr.port) for p in (root, *root.children(recursive=True))
            for c in p.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def cmdline(proc: psutil.Process) -> list[str]:
    """``proc``'s command line, or ``[]`` when it exited between ``children()`` and this read (a short-lived
    helper such as a compiler probe does; CI once failed on that race)."""
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []
