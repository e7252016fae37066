"""``prl rescore``."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_rescore(args: argparse.Namespace) -> int:
    from prl.evaluation.rescore import rescore_run

    summary = rescore_run(args.db, args.run, args.run_id, workers=args.verifier_workers, timeout_s=args.verify_timeout_s,
                          progress=not args.no_progress, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(summary, indent=2))
    return 0


def register(sub) -> None:
    """Add ``rescore`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "rescore",
        help="re-verify a stored run under the current verifier into a new run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Verify every sample of --run again with the verifier and gold normalisation of this version,
into a new run (kind 'rescore', default id RUN.rescore); the old run is never changed. Golds
that normalise differently today are listed in the new run's manifest. Then compare them
sample by sample: prl report --agreement NEW --against RUN. Resumable like prl eval.

example:
  prl rescore --db runs/store.duckdb --run import-saturn-1a2b3c4d
""")
    p.add_argument("--db", required=True, help="store file")
    p.add_argument("--run", required=True, help="the run to re-verify")
    p.add_argument("--run-id", default=None, help="id of the new run (default: RUN.rescore)")
    p.add_argument("--verifier-workers", type=int, default=2, help="Math-Verify worker processes (default: 2)")
    p.add_argument("--verify-timeout-s", type=int, default=5,
                   help="Math-Verify's own timeout per call in whole seconds; the hard kill is 3x (default: 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_rescore)
