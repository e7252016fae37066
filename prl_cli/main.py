"""The ``prl`` command line. Each subcommand's --help explains it."""

from __future__ import annotations

import argparse
import importlib
import errno
import os
import sys

DESCRIPTION = """\
PRL pipeline: Process Reward Learning and its baselines (GRPO, Dr.GRPO, RAFT) for math
reasoning. Subcommands available in this version:

  selfcheck        recompute the worked example of the PRL math and the core invariants
  config check     validate an algorithm config file and print it with defaults resolved
  data synth       write the synthetic arithmetic task (train/test JSONL)
  model build-tiny build the embedded tiny model (tokenizer + Llama weights) from a seed;
                   --arch qwen2 --tokenizer qwen2.5: a tiny Qwen2 with Qwen2.5's real tokenizer
  model import     convert a GGUF checkpoint (or --smollm2: SmolLM2-135M-Instruct) into a HF directory
  model sft        warm-start a model on the synthetic task, reporting accuracy before/after
  generate         sample n responses per problem with the vllm or hf engine
  eval             evaluate a model on benchmarks into a store (Prefect flow, resumable)
  import           import other tools' generations (lighteval, lm-eval, Inspect, verl, JSON) and verify them
  rescore          re-verify a stored run under the current verifier into a new run
  train            train with PRL / GRPO / Dr.GRPO / RAFT on DeepSpeed (Prefect flow, resumable)
  study            a grid of training settings x seeds, trained, evaluated and reported across seeds
  report           scores of stored runs with CIs, a paired comparison, the paper's rows
  sql              run one read-only SQL query on a store
  dashboard        browse, compare and inspect the store in a web app (Streamlit, localhost)
  verify           verify one response against a gold answer and print why (JSON)
  demo             the main job: warm start -> PRL + GRPO training -> evaluation -> report -> dashboard
"""



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
    return parser


def main(argv: list[str] | None = None) -> int:
    # vLLM logs every engine step at INFO; users see our own progress lines instead.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries results (JSON, tables)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Prefect's temporary API server gets 20 s to start by default; on a loaded 2-core machine (eight
    # dashboard clients beside an evaluation, measured) that was too short and the run failed.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from prl import logs

    # Commands with a run directory add its log file (logs.log_to). An error printed below as one line is not
    # also shown as a library's traceback (Prefect logs one for the failed flow run): that goes to the file.
    logs.configure(None, verbose=args.verbose, reported=_is_user_error)
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
        if logs.current_log_file() is not None:
            print(f"(library messages of this run: {logs.current_log_file()})", file=sys.stderr)
        raise
    finally:
        logs.reset()


USER_ERRORS = frozenset({
    "ConfigError",             # prl_core.config
    "DatasetError",            # prl.data.datasets
    "EngineError",             # prl.generation.engines.base
    "EvalError",               # prl.evaluation.config
    "PromptError",             # prl.generation.prompts
    "ReportError",             # prl.evaluation.report
    "StoreError",              # prl.store.db
    "CheckpointError",         # prl.training (a checkpoint to resume from, or one that cannot be loaded)
    "ModelImportError",        # prl.models.importer
    "FormatError",             # prl.imports.formats
    "ImportRunError",          # prl.imports.run
    "TrainingProcessFailed",   # flows.train: the training process died (the OOM killer, a crash): what to change
})
"""Errors printed as one ``error:`` line (exit 2): classes of our packages with these names, and their
subclasses. By name, not by import: :func:`_is_user_error` also runs while logging, where it must not import,
and a class keeps its name when it moves to another module."""
_OUR_ROOTS = ("prl", "prl_core", "flows", "prl_cli", "dashboard")


def _is_user_error(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True  # a full disk or quota: "error: [Errno 28] No space left on device: 'PATH'"
    return any(c.__name__ in USER_ERRORS and c.__module__.split(".")[0] in _OUR_ROOTS for c in type(e).__mro__)


if __name__ == "__main__":
    sys.exit(main())
