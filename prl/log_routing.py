"""Where log records go: our own lines on the console, third-party chatter in the run's log file.

Libraries print many lines at every engine start of ``prl eval``, ``prl train`` or ``prl demo`` (vLLM,
torch and Prefect: Triton, LD_PRELOAD advice, NUMA binding, deprecated ``reduce_op``, "Task run ...
Finished in state Completed()"); a user reads them as something to fix. :func:`configure` sends them to
a log file:

* The console (stderr) keeps records from our packages (``prl``, ``prl_core``, ``flows``,
  ``prl_cli``, ``dashboard``: by logger name, or, for the Prefect run loggers our flows log
  through, by the file that logged), and errors from anyone, except a library's record of an
  exception that the caller reports itself (``reported``: ``prl``'s one-line ``error:``
  messages; Prefect logs the traceback of every failed flow and task run). With ``verbose`` it
  keeps everything.
* The log file gets every record that reaches the root logger: Prefect's own chatter, Python
  ``warnings`` (``logging.captureWarnings``), and the libraries that log through console handlers
  of their own on non-propagating loggers, which are rerouted to the root handlers: vLLM
  (:class:`RoutedHandler`, the handler we give its logger), DeepSpeed (a filter on its logger),
  torch, transformers and Ray (a filter on their handlers, :func:`reroute_library_handlers`).
* Progress bars of transformers (loading and writing weights) are switched off, and
  :func:`stderr_to_log` sends what C++ code and child processes write to file descriptor 2 while a
  block runs (an engine start) to the log file too: logging cannot see those.

Without a log file (commands that have no output directory) the console shows everything, as before.
``prl`` calls :func:`configure` at start (``--verbose``) and :func:`reset` at the end; a command
with a run directory calls :func:`log_to` with its log file, which prints one line saying where it is.
Child processes get the file and the flag in their environment; the training script, which the demo
and the train flow launch, applies them with :func:`configure_from_env`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Callable

OUR_PACKAGES = ("prl", "prl_core", "flows", "prl_cli", "dashboard")
_SOURCE_ROOT = Path(__file__).resolve().parent.parent
_OUR_DIRS = tuple(os.path.join(str(_SOURCE_ROOT), p) + os.sep for p in OUR_PACKAGES)

CONSOLE_FORMAT = "%(asctime)s.%(msecs)03d | %(message)s"
CONSOLE_WARNING_FORMAT = "%(asctime)s.%(msecs)03d | %(levelname)s | %(name)s: %(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"

_DEEPSPEED_LOGGER = "DeepSpeed"  # non-propagating, with its own stdout handler added at import
LOG_FILE_ENV = "PRL_LOG_FILE"  # set by configure for child processes (the training script): configure_from_env
VERBOSE_ENV = "PRL_LOG_VERBOSE"


class _State:
    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.quiet = False
        self.interrupted = False
        self.log_file: Path | None = None
        self.console: logging.Handler | None = None
        self.file: logging.Handler | None = None
        self.removed_root_handlers: list[logging.Handler] = []
        self.root_handlers_before: list[logging.Handler] = []
        self.captured_warnings_before = False
        self.hf_progress_before: bool | None = None
        self.rerouted: list[logging.Handler] = []
        self.env_before: dict[str, str | None] = {}
        self.reported: Callable[[BaseException], bool] | None = None
        self.reported_lines: list[str] = []  # first lines of those seen, as later records quote them


_state: _State | None = None


def is_ours(record: logging.LogRecord) -> bool:
    """A record from our own code: a logger of our packages, or logged by a file in them (the Prefect
    run logger our flows write their progress lines through)."""
    name = record.name
    if any(name == p or name.startswith(p + ".") for p in OUR_PACKAGES):
        return True
    return _is_our_file(record.pathname)


_path_cache: dict[str, bool] = {}


def _is_our_file(pathname: str) -> bool:
    hit = _path_cache.get(pathname)
    if hit is None:
        try:
            real = os.path.realpath(pathname)
        except (TypeError, ValueError):
            real = ""
        hit = _path_cache[pathname] = real.startswith(_OUR_DIRS) and "site-packages" not in real
    return hit


class _ConsoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        st = _state
        if st is not None and st.quiet and record.levelno < logging.WARNING:
            return False  # --quiet: no status lines on the console (the log file keeps them)
        if st is None or st.verbose or st.file is None:
            return True
        if is_ours(record):
            return True
        if st.interrupted:  # after Ctrl-C, the libraries' reports of it (crashed runs, lost connections): file only
            return False
        return record.levelno >= logging.ERROR and not _reported(st, record)


def _reported(st: _State, record: logging.LogRecord) -> bool:
    """The record carries an exception the caller reports on the console itself, or quotes one carried
    by an earlier record (Prefect's "Finished in state Failed('... TrainingProcessFailed: ...')" after
    the task run's traceback). It is in the log file."""
    if st.reported is None:
        return False
    exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
    if exc is None:
        if not st.reported_lines:
            return False
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is shown as it is
            return False
        return any(line in message for line in st.reported_lines)
    try:
        if not st.reported(exc):
            return False
    except Exception:  # noqa: BLE001 - a broken predicate must not hide the record
        return False
    line = str(exc).strip().split("\n", 1)[0][:200]
    if len(line) >= 20 and line not in st.reported_lines:  # long enough not to match unrelated records
        st.reported_lines = [*st.reported_lines[-19:], line]
    return True


class _ConsoleFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(CONSOLE_FORMAT, DATE_FORMAT)
        self._warning = logging.Formatter(CONSOLE_WARNING_FORMAT, DATE_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING or not is_ours(record):
            return self._warning.format(record)
        return super().format(record)


class ConsoleHandler(logging.StreamHandler):
    """stderr as it is when a record is emitted (pytest's capture, ``redirect_stderr``).

    Public class names matter: Prefect leaves the root logger alone (adds no console handler of its
    own) when it finds a handler there whose class name does not start with ``_``."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _FileFormatter(logging.Formatter):
    """``FILE_FORMAT``, with the Prefect flow or task run a record belongs to ("Finished in state
    Completed()" says little without it)."""

    def __init__(self) -> None:
        super().__init__(FILE_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        run = getattr(record, "task_run_name", None) or getattr(record, "flow_run_name", None)
        if not run:
            return super().format(record)
        saved = record.name
        record.name = f"{saved} [{run}]"
        try:
            return super().format(record)
        finally:
            record.name = saved


class RunLogFileHandler(logging.FileHandler):
    """The run's log file. Prefect's ``dictConfig`` closes every handler when it first configures
    logging; a closed file handler reopens on the next record (mode ``a``)."""


def _to_root_handlers(record: logging.LogRecord) -> None:
    for h in logging.getLogger().handlers:
        if record.levelno >= h.level:
            h.handle(record)


class RoutedHandler(logging.Handler):
    """For a library logger that does not propagate (vLLM's, so that vLLM's own logging setup is not
    needed): while :func:`configure` is in effect, hands each record to the root logger's handlers
    (console policy and log file); otherwise writes ``LEVEL name: message`` to stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if _state is not None:
            _to_root_handlers(record)
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


class _Reroute(logging.Filter):
    """Put on a library's own console handler (torch's, transformers', Ray's), or on DeepSpeed's logger
    (whose records all come from itself, and whose stdout handler is added when deepspeed is imported):
    sends each record to the root logger's handlers instead, so the console policy and the log file
    apply. Inert once :func:`reset` ran."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _state is None:
            return True
        _to_root_handlers(record)
        return False


_REROUTE = _Reroute()


def configure(log_file: str | Path | None = None, verbose: bool = False,
              reported: Callable[[BaseException], bool] | None = None, quiet: bool = False) -> Path | None:
    """Route log records: see the module docstring. Callable again (a later call with a file adds it);
    :func:`reset` undoes everything. Returns the log file's path (created with its directory).
    ``reported``: true for an exception the caller reports itself; a library's record carrying one (a
    traceback) then goes to the log file only (with a log file, and without ``verbose``). It is called
    while logging: it must not import or log. ``quiet``: the console shows warnings and errors only."""
    global _state
    root = logging.getLogger()
    if _state is None:
        st = _State(verbose)
        st.root_handlers_before = list(root.handlers)
        for h in list(root.handlers):  # a console handler already there (Prefect's) would print it all again
            if _is_console_handler(h):
                root.removeHandler(h)
                st.removed_root_handlers.append(h)
        st.console = ConsoleHandler()
        st.console.addFilter(_ConsoleFilter())
        st.console.setFormatter(_ConsoleFormatter())
        root.addHandler(st.console)
        st.captured_warnings_before = getattr(logging, "_warnings_showwarning", None) is not None
        logging.captureWarnings(True)
        logging.getLogger(_DEEPSPEED_LOGGER).addFilter(_REROUTE)
        _state = st
    st = _state
    st.verbose = st.verbose or verbose
    st.quiet = st.quiet or quiet
    if reported is not None:
        st.reported = reported
    if st.verbose:
        _export(st, VERBOSE_ENV, "1")
    if log_file is not None and st.file is None:
        path = Path(log_file).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        st.file = RunLogFileHandler(path, mode="a", encoding="utf-8")
        st.file.setFormatter(_FileFormatter())
        root.addHandler(st.file)
        st.log_file = path
        _export(st, LOG_FILE_ENV, str(path))
        _import_quietly()
        if not st.verbose:
            _no_library_progress_bars(st)
        reroute_library_handlers()
    return st.log_file


def configure_from_env() -> Path | None:
    """In a child process of ``prl`` (the training script the demo and the train flow launch): route
    records as the parent does, to the same log file (``PRL_LOG_FILE``, ``PRL_LOG_VERBOSE``). Leaves
    logging alone when neither is set."""
    path, verbose = os.environ.get(LOG_FILE_ENV) or None, os.environ.get(VERBOSE_ENV) == "1"
    if path is None and not verbose:
        return None
    return configure(path, verbose=verbose)


def _export(st: _State, key: str, value: str) -> None:
    st.env_before.setdefault(key, os.environ.get(key))
    os.environ[key] = value


def log_to(log_file: str | Path, *, announce: bool = True) -> Path:
    """Send third-party records to ``log_file`` from now on (see :func:`configure`) and say so on stderr."""
    path = configure(log_file, verbose=is_verbose())
    assert path is not None
    if announce:
        extra = "" if is_verbose() else "; --verbose shows them here"
        print(f"log: {path}  (library warnings and engine messages{extra})", file=sys.stderr, flush=True)
    return path


def interrupted() -> None:
    """The user pressed Ctrl-C (``prl``'s SIGINT handler calls this): from now on library records go to the log
    file only (Prefect's "Crash detected!" of each run and task, the errors of connections cut short); the command
    says "interrupted" itself. Without a log file, or with ``verbose``, nothing changes."""
    if _state is not None:
        _state.interrupted = True


def is_verbose() -> bool:
    return bool(_state and _state.verbose)


def current_log_file() -> Path | None:
    return _state.log_file if _state else None


def quiet() -> bool:
    """Third-party output goes to a log file, not the console."""
    return bool(_state and _state.file is not None and not _state.verbose)


def reset() -> None:
    """Undo :func:`configure`: handlers, warning capture, library settings, environment."""
    global _state
    st = _state
    if st is None:
        return
    _state = None
    root = logging.getLogger()
    for h in (st.console, st.file):
        if h is not None:
            root.removeHandler(h)
            h.close()
    added_since = [h for h in root.handlers if h not in st.root_handlers_before]
    root.handlers[:] = [*st.root_handlers_before, *added_since]  # the handlers as they were, in their order
    if not st.captured_warnings_before:
        logging.captureWarnings(False)
    logging.getLogger(_DEEPSPEED_LOGGER).removeFilter(_REROUTE)
    for h in st.rerouted:
        h.removeFilter(_REROUTE)
    if st.hf_progress_before:
        with contextlib.suppress(Exception):
            from transformers.utils import logging as hf_logging

            hf_logging.enable_progress_bar()
    for k, v in st.env_before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _is_console_handler(h: logging.Handler) -> bool:
    if type(h).__name__ == "PrefectConsoleHandler":
        return True
    return type(h) is logging.StreamHandler and getattr(h, "stream", None) in (sys.stderr, sys.stdout,
                                                                               sys.__stderr__, sys.__stdout__)


def _is_library_console_handler(h: logging.Handler) -> bool:
    """A stream handler a library put on its own logger: torch's and transformers' hold the
    ``sys.stderr`` of the moment they were made (under pytest, a capture object), so any stream counts."""
    return (isinstance(h, logging.StreamHandler) and not isinstance(h, (logging.FileHandler, ConsoleHandler))
            and "LogCapture" not in type(h).__name__)


def reroute_library_handlers() -> int:
    """Libraries that log through console handlers of their own on non-propagating loggers (torch
    registers one per logger, transformers one for its tree, Ray its own) bypass the root logger: put
    :class:`_Reroute` on each such handler of a third-party logger existing now. Called when the log
    file is set and around engine starts (:func:`stderr_to_log`), after which the libraries are
    imported. Returns how many handlers were rerouted."""
    st = _state
    if st is None or st.file is None:
        return 0
    n = 0
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or logger.propagate:
            continue
        if any(name == p or name.startswith(p + ".") for p in OUR_PACKAGES) or name.startswith("prefect"):
            continue  # Prefect's own handlers (API, debug) stay as Prefect set them
        for h in logger.handlers:
            if _is_library_console_handler(h) and _REROUTE not in h.filters:
                h.addFilter(_REROUTE)
                st.rerouted.append(h)
                n += 1
    return n


def _import_quietly() -> None:
    """Import torch and transformers' logging now (``prl eval``/``train``/``demo`` need both anyway), so
    that their loggers exist to be rerouted and their import-time warnings reach the log file."""
    with contextlib.suppress(Exception):
        import torch  # noqa: F401
    with contextlib.suppress(Exception):
        import transformers.utils.logging  # noqa: F401


def _no_library_progress_bars(st: _State) -> None:
    """transformers (and huggingface_hub) draw progress bars when they load or write weights: off."""
    _export(st, "HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging
    except Exception:  # noqa: BLE001 - not installed or broken: nothing to quiet
        return
    st.hf_progress_before = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()


@contextlib.contextmanager
def stderr_to_log():
    """While the block runs, file descriptor 2 (what C++ code and tqdm write directly: torch's kernel
    re-registration and NUMA binding warnings, vLLM's weight-loading bar; and the whole stderr of
    child processes started in the block, such as vLLM's engine core) goes to the log file.
    A no-op without a log file or with ``verbose``."""
    st = _state
    if st is None or st.file is None or st.verbose:
        try:
            yield
        finally:
            reroute_library_handlers()  # the block may have imported libraries with console handlers
        return
    for stream in (sys.stdout, sys.stderr, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(st.log_file, "ab") as f:  # type: ignore[arg-type]
            os.dup2(f.fileno(), 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
        reroute_library_handlers()
