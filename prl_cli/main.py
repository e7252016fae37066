"""The ``prl`` command line. Each subcommand's --help explains it."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import textwrap
import threading

from prl_core.errors import UserError

DESCRIPTION = """\
PRL pipeline: Process Reward Learning and its baselines (GRPO, Dr.GRPO, RAFT) for math
reasoning. Subcommands available in this version:
"""

ENVIRONMENT = {
    "VLLM_LOGGING_LEVEL": "WARNING",  # vLLM logs every engine step at INFO; users see our own progress lines
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",  # stdout carries results (JSON, tables)
    "TOKENIZERS_PARALLELISM": "false",
    # Prefect's temporary API server gets 20 s to start by default; on a loaded 2-core machine (eight
    # dashboard clients beside an evaluation, measured) that was too short and the run failed.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no network: telemetry would only log an error
}
"""Environment defaults of every ``prl`` command (a value the user set wins), set once in :func:`main`."""


COMMANDS = ("selfcheck", "config", "data", "model", "generate", "verify", "sql", "eval", "import", "rescore", "train",
            "study", "dashboard", "report", "demo")
"""Subcommands in --help order; each is the module ``prl_cli.<name>`` (``eval_``, ``import_`` for the keywords) with
``register(sub)``."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (as every other ``prl`` error), naming where the options are
    explained instead of printing the usage."""

    help_epilog = None
    """A function giving text for the end of ``--help``, called only when the help is printed (``prl train``
    lists prl_core's estimators and divergences, which import torch: building the parser must not)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        text = super().format_help()
        return text + "\n" + self.help_epilog() if self.help_epilog is not None else text


def command_module(name: str):
    """The module of subcommand ``name`` (``prl_cli.eval_``, ``prl_cli.import_`` for the keywords)."""
    return importlib.import_module(f"prl_cli.{name + '_' if name in ('eval', 'import') else name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``prl`` parser: every subcommand, or only ``command`` (what ``prl COMMAND …`` needs: the other
    commands' modules are not imported). Building it imports no torch, Prefect or vLLM: ``prl --help`` and
    ``prl sql`` answer at once (bench/cli.py measures it)."""
    parser = Parser(prog="prl", usage="prl [-h] [-v] COMMAND ...", description=DESCRIPTION,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", dest="verbose_before_command", action="store_true",
                        help="show library warnings and engine messages (vLLM, torch, transformers, DeepSpeed, "
                             "Prefect) on the console too; by default eval, train and demo write them to the "
                             "run's log file (also accepted after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="prl",
                                help=argparse.SUPPRESS)  # the commands are listed once, in the description
    for name in (command,) if command in COMMANDS else COMMANDS:
        command_module(name).register(sub)
    if command not in COMMANDS:
        parser.description = DESCRIPTION + "\n" + command_list(sub)
    return parser


def command_list(sub: argparse._SubParsersAction) -> str:
    """The subcommands and their one-line help, as each command module registered them (actions of
    commands with actions, such as ``model sft``, one by one)."""
    rows: list[tuple[str, str]] = []
    for action in sub._choices_actions:
        nested = [a for a in sub.choices[action.dest]._actions if isinstance(a, argparse._SubParsersAction)]
        rows += ([(f"{action.dest} {a.dest}", a.help or "") for a in nested[0]._choices_actions] if nested
                 else [(action.dest, action.help or "")])
    width = max(len(name) for name, _ in rows) + 2
    return "\n".join(textwrap.fill(text, 100, initial_indent=f"  {name:<{width}}", subsequent_indent=" " * (width + 2))
                     for name, text in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``prl ARGS``: the exit status. ``argv`` None: this is the process's entry point (the console script,
    ``python -m prl_cli``), which after a Ctrl-C ends the process at once (:func:`_exit_now`)."""
    entry = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)  # prl's own options take no values
    args = build_parser(command).parse_args(argv)
    verbose = args.verbose_before_command or getattr(args, "verbose", False)
    quiet = getattr(args, "quiet", False)
    if verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")  # vLLM's own messages, which the default quiets
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 0
    no_bars = {}
    if quiet or not sys.stderr.isatty():  # the libraries' bars too (loading and writing weights): \r lines in a log
        # transformers' and huggingface_hub's bars; any other tqdm bar without a setting of its own (undone at the end)
        no_bars = {k: "1" for k in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE") if k not in os.environ}
        os.environ.update(no_bars)
    from prl import log_routing

    # Commands with a run directory add its log file (log_routing.log_to). An error printed below as one line is not
    # also shown as a library's traceback (Prefect logs one for the failed flow run): that goes to the file.
    log_routing.configure(None, verbose=verbose, quiet=quiet, reported=_reported_here)
    in_main_thread = threading.current_thread() is threading.main_thread()  # signal handlers: the main thread's
    previous = signal.signal(signal.SIGINT, _on_sigint) if in_main_thread else None
    _SIGINT_SEEN.clear()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return _interrupted(entry)
    except BrokenPipeError:  # `prl report … | head`: the reader has gone; stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return 141
    except Exception as e:  # known input errors: one line, no traceback
        if _SIGINT_SEEN.is_set():  # the Ctrl-C's KeyboardInterrupt, turned into another error by a library
            return _interrupted(entry)
        if _is_user_error(e):
            print(f"error: {e}", file=sys.stderr)
            return 2
        if log_routing.current_log_file() is not None:
            print(f"(library messages of this run: {log_routing.current_log_file()})", file=sys.stderr)
        raise
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
        log_routing.reset()
        for key in no_bars:
            os.environ.pop(key, None)


_SIGINT_SEEN = threading.Event()
"""Set by :func:`_on_sigint`: a Ctrl-C reached this command. A library may turn the KeyboardInterrupt into an error
of its own — DuckDB, interrupted inside a query, raises ``RuntimeError: Query interrupted`` (measured: Ctrl-C while
`prl eval` wrote a chunk; `prl sql` reported its own timeout) — and :func:`main` still reports it as the Ctrl-C."""


def _interrupted(entry: bool) -> int:
    print("interrupted (rerun the same command to resume)", file=sys.stderr, flush=True)
    if entry:
        _exit_now(130)
    return 130


def _exit_now(status: int) -> None:
    """End the process after a Ctrl-C without the teardown of what dies with it: the interpreter's of torch and
    vLLM, and the objects' finalizers at exit (an in-process vLLM engine's shutdown is seconds of garbage
    collection: measured 1.6-2.8 s of CPU on 2 cores; a temporary directory left by a library stays). What must
    happen still does, in the interpreter's order: the log files are closed, the threads joined, the exit handlers
    run (Prefect stops its API server and flushes its workers; multiprocessing ends its daemonic children, vLLM's
    engine processes among them), stdout and stderr flushed. The store needs nothing: each chunk was written in its
    own transaction."""
    import atexit
    import weakref

    from prl import log_routing

    log_routing.reset()
    threading._shutdown()  # type: ignore[attr-defined] - as the interpreter's exit does first: join the threads
    atexit.unregister(weakref.finalize._exitfunc)  # type: ignore[attr-defined] - the finalizers at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _on_sigint(signum, frame) -> None:
    """Ctrl-C: what Python does (KeyboardInterrupt in the main thread), after telling the log routing, so that the
    libraries' reports of the interruption go to the log file and :func:`main`'s one line is all the user sees."""
    from prl import log_routing

    _SIGINT_SEEN.set()
    log_routing.interrupted()
    raise KeyboardInterrupt


def _reported_here(e: BaseException) -> bool:
    """What :func:`main` reports itself in one line (a user error; Ctrl-C: "interrupted"), so that a library's
    record of it (Prefect's traceback of the failed or crashed flow run) goes to the log file only."""
    return isinstance(e, KeyboardInterrupt) or _SIGINT_SEEN.is_set() or _is_user_error(e)


def _is_user_error(e: BaseException) -> bool:
    """Printed as one ``error:`` line (exit 2): a :class:`prl_core.errors.UserError` (every package's
    user-facing error derives from it), or a full disk. Also used while logging, so it imports nothing."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True  # a full disk or quota: "error: [Errno 28] No space left on device: 'PATH'"
    return isinstance(e, UserError)


if __name__ == "__main__":
    sys.exit(main())
