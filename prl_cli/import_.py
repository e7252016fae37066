"""``prl import``."""

from __future__ import annotations

import argparse

from prl.imports.formats import FORMATS
from prl.imports.run import ImportConfig
from prl.options import add_config_arguments, config_kwargs

from prl_cli.common import OutputOptions, check_store, print_json, show_progress, status_printer


def _cmd_import(args: argparse.Namespace) -> int:
    from prl.imports.run import run_import

    cfg = ImportConfig(**config_kwargs(args, ImportConfig))
    check_store(cfg.db, write=True)
    print_json(run_import(cfg, progress=show_progress(args), log=status_printer(args)))
    return 0


def register(sub) -> None:
    """Add ``import`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "import",
        help="import other tools' generations (lighteval, lm-eval, Inspect, verl, JSON) into a store and verify them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Read generation files made by other tools, map every row to a problem of --dataset (by id
where the file has one, else by the problem's text, also when the file holds a whole prompt
around it), and store each response as a sample of an *imported* run: verified by our verifier
(verdicts as in prl eval), with the source's own per-row label and extracted answer kept beside
ours. Rows that match no problem are counted and listed (and kept in the run's manifest), never
stored; a file none of whose rows matches is an error. The manifest records each file's path,
size, sha256, format, tool and version, and the accuracy the file reports.

Formats (--format auto tells them apart by name and first row):
  lighteval  details_<task>_<time>.parquet (+ results_<time>.json beside it)
  lm-eval    samples_<task>_<time>.jsonl from --log_samples (+ results_<time>.json)
  inspect    an Inspect .eval log (read with Inspect's own reader)
  verl       a validation dump <step>.jsonl (trainer.validation_data_dir)
  json       a JSON array or JSONL; --fields maps our names to the file's: problem, response
             (text or a list of n), label, id, answer (their extraction), gold, sample

Idempotent and resumable: the same command adds nothing the second time and finishes what a
killed run left. A bad file is an error naming the file and line or row; nothing is stored then.

examples:
  prl import results/details_custom_aime24_0_*.parquet --dataset aime24 --db runs/store.duckdb
  prl import amc_output.json --format json --dataset amc23 --reported-accuracy 0.6506 \\
      --fields problem=question,response=generated_output,label=correct --db runs/store.duckdb
  prl report --db runs/store.duckdb --agreement RUN
""")
    add_config_arguments(p, ImportConfig, choices={"format": FORMATS})
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_import)
