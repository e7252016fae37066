"""``prl rescore``."""

from __future__ import annotations

import argparse

from prl.evaluation.config import RescoreConfig
from prl.options import add_config_arguments, config_kwargs

from prl_cli.common import OutputOptions, check_store, print_json, show_progress, status_printer


def _cmd_rescore(args: argparse.Namespace) -> int:
    from prl.evaluation.rescore import rescore_run
    from prl.grading.verifier import VerifierSettings

    cfg = RescoreConfig(**config_kwargs(args, RescoreConfig))
    check_store(cfg.db, write=True)
    print_json(rescore_run(cfg.db, cfg.run, cfg.new_run, verifier=VerifierSettings.of(cfg),
                           progress=show_progress(args), log=status_printer(args)))
    return 0


def register(sub) -> None:
    """Add ``rescore`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "rescore",
        help="re-verify a stored run under the current verifier into a new run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Verify every sample of --run again with the verifier and gold normalisation of this version,
into a new run (kind 'rescore', id --new-run, default RUN.rescore); the old run is never
changed. Golds that normalise differently today are listed in the new run's manifest. Then
compare them sample by sample: prl report --agreement NEW --against RUN. Resumable like
prl eval.

example:
  prl rescore --db runs/store.duckdb --run import-saturn-1a2b3c4d
""")
    add_config_arguments(p, RescoreConfig)
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_rescore)
