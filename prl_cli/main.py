"""The ``prl`` command line. Each subcommand's --help explains it."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import textwrap

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prl", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show library warnings and engine messages (vLLM, torch, transformers, DeepSpeed, "
                             "Prefect) on the console too; by default eval, train and demo write them to the "
                             "run's log file")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"prl_cli.{name + '_' if name in ('eval', 'import') else name}").register(sub)
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
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from prl import log_routing

    # Commands with a run directory add its log file (log_routing.log_to). An error printed below as one line is not
    # also shown as a library's traceback (Prefect logs one for the failed flow run): that goes to the file.
    log_routing.configure(None, verbose=args.verbose, reported=_is_user_error)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `prl report … | head`: the reader has gone; stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return 141
    except Exception as e:  # known input errors: one line, no traceback
        if _is_user_error(e):
            print(f"error: {e}", file=sys.stderr)
            return 2
        if log_routing.current_log_file() is not None:
            print(f"(library messages of this run: {log_routing.current_log_file()})", file=sys.stderr)
        raise
    finally:
        log_routing.reset()


def _is_user_error(e: BaseException) -> bool:
    """Printed as one ``error:`` line (exit 2): a :class:`prl_core.errors.UserError` (every package's
    user-facing error derives from it), or a full disk. Also used while logging, so it imports nothing."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True  # a full disk or quota: "error: [Errno 28] No space left on device: 'PATH'"
    return isinstance(e, UserError)


if __name__ == "__main__":
    sys.exit(main())
