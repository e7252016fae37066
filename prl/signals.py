"""Ctrl-C and the helper processes a command starts.

A terminal's Ctrl-C sends SIGINT to its whole foreground process group: the command and every helper it
started (Prefect's temporary API server, the verifier workers). Those helpers are the command's to stop. If
they die of the same SIGINT, the command cannot end its run cleanly (the API server it reports to is gone:
minutes of connection retries) and each helper prints a traceback. :func:`sigint_blocked` wraps a helper's
start: the child inherits the calling thread's signal mask, with SIGINT blocked, across fork and exec (Python's
``signal.signal`` and uvicorn's handlers do not unblock it), so Ctrl-C reaches the command alone, which stops
its helpers itself (``VerifierPool.close``, Prefect's server stop: SIGTERM). A SIGINT that arrives while the
block runs stays pending for the command and is delivered when the block ends: nothing is lost.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator


@contextlib.contextmanager
def sigint_blocked(multiprocessing: bool = False) -> Iterator[None]:
    """SIGINT blocked in the calling thread while the block runs: processes started in it never receive it.

    ``multiprocessing``: the block starts ``multiprocessing`` processes. Their first start also starts
    multiprocessing's resource tracker, which unblocks SIGINT afterwards (it blocks and then unblocks instead of
    restoring the mask: measured, the first verifier worker got the Ctrl-C), so it is started here first."""
    if multiprocessing:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def sigint_is_blocked() -> bool:
    """Whether this thread has SIGINT blocked (in a helper started under :func:`sigint_blocked`)."""
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
