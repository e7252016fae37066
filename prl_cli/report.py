"""``prl report``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from prl.options import add_config_arguments, option
from prl.store.db import DEFAULT_STORE

from prl_cli.common import FORMATS, Verbosity, check_store


@dataclass
class ReportOptions:
    """`prl report`."""

    db: str | None = None
    """Store file (default: runs/store.duckdb if it exists; without a store only the paper's rows are checked)."""
    run: str | None = option(None, was=("--runs",))
    """Comma-separated run ids (default: every run with samples, none compared; A,B: B is compared against A)."""
    k: str | None = None
    """Comma-separated k for pass@k (default 1,2,4,8,… up to n)."""
    format: str = option("table", choices=FORMATS, was={"--json": "json"})
    """Output: the tables as text, CSV (one long table: a row per run, data set and metric; with --agreement the disagreeing samples; with --study the cells' scores) or JSON (everything)."""
    no_paper: bool = False
    """Leave out the paper's reference rows."""
    agreement: str | None = option(None, metavar="RUN")
    """Compare RUN's verdicts with its source's labels (or with --against's run) sample by sample."""
    against: str | None = option(None, metavar="RUN2")
    """With --agreement: the other run to compare with."""
    full: bool = False
    """With --agreement: whole problems and responses, every unmatched row."""
    study: str | None = option(None, metavar="ID")
    """The report of study ID (prl study): CIs across seeds and problems, each cell against the baseline seed by seed, reward against KL; also written as study_report.{md,html,json}."""
    out: str | None = option(None, metavar="DIR")
    """With --study: where the report files go (default: the store's folder)."""


def _cmd_report(args: argparse.Namespace) -> int:
    from prl.data.paper import load_paper_tables, paper_table, render_check
    from prl.store.readonly import render

    db = args.db or (DEFAULT_STORE if Path(DEFAULT_STORE).exists() else None)
    if db is None:
        if args.study or args.agreement or args.run:
            from prl.store.db import StoreError

            raise StoreError(f"--db: no store named and none at {DEFAULT_STORE}; give the store with --db")
        paper = load_paper_tables()
        print(render_check(paper) if args.format == "table" else render(*paper_table(paper), args.format))
        return 0
    check_store(db, write=False)
    from prl.evaluation.report import ReportError, report
    from prl.store.db import Store

    store = Store(db, create=False)
    if args.study:
        from prl.studies.report import write_report

        rep = write_report(args.study, db, args.out or Path(db).parent)
        if args.format == "json":
            print(json.dumps({k: v for k, v in rep.items() if k != "markdown"}, indent=2, default=str))
        elif args.format == "csv":
            cols = ("cell", "metric", "mean", "seed_lo", "seed_hi", "seed_sd", "problem_lo", "problem_hi", "seeds",
                    "problems")
            print(render(cols, [tuple(r[c] for c in cols) for r in rep["per_cell"]], "csv"))
        else:
            print(rep["markdown"])
        print(f"written: {rep['files']['md']}, {rep['files']['html']}, {rep['files']['json']}", file=sys.stderr)
        return 0
    if args.agreement:
        from prl.evaluation.agreement import agreement, render_agreement

        result = agreement(store, args.agreement, args.against)
        if args.format == "csv":
            cols = ("dataset", "problem_id", "sample_idx", "verdict", "extracted_answer", "other_verdict",
                    "other_answer", "gold", "source_ref")
            print(render(cols, [tuple(d.get(c) for c in cols) for d in result["disagreements"]], "csv"))
        else:
            print(json.dumps(result, indent=2, default=str) if args.format == "json"
                  else render_agreement(result, full=args.full))
        return 0
    if args.against:
        raise ReportError("--against goes with --agreement RUN")
    runs = [r.strip() for r in args.run.split(",") if r.strip()] if args.run else None
    ks = [int(k) for k in args.k.split(",")] if args.k else None
    print(report(store, runs, ks, fmt=args.format, include_paper=not args.no_paper))
    return 0


def register(sub) -> None:
    """Add ``report`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "report",
        help="scores of stored runs with CIs, a paired comparison, and the paper's reference rows",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
With --db: for each run (default: every run with samples), per data set average@n, unbiased
pass@k and maj@n with 95% bootstrap CIs over problems; micro (size-weighted, the paper's
"5 Avg") and macro (mean of data sets) aggregates labelled with sizes; the suspicious passes
(correct answer, reasoning that hardly refers to the problem). Runs are compared only when
named: with --run A,B (the first two named), B is compared against A on their common problems:
difference of average@n with a paired bootstrap CI, McNemar's exact test on pass@k success,
problems gained and lost. If they share no problem (different data sets), both runs' tables are
printed and the report says there is nothing in common to compare.

Always: the paper's Tables 1 and 3 as reference rows, with each row's "5 Avg" recomputed from
its columns (sizes 500/272/675/40/30) and the row that does not match flagged.

With --agreement RUN: our verdicts in RUN against the labels its source file gave each
response (an imported run), or against another run's verdicts with --against RUN2 (a rescore
and its original, two graders on one file): the 2x2 counts, Cohen's kappa, both accuracies and
the reported one, then every disagreeing sample with problem, gold, response and both
extractions, and the source rows that matched no problem.

examples:
  prl report --db runs/store.duckdb --run base-run,prl-run --k 1,8
  prl report --db runs/store.duckdb --format csv > scores.csv
  prl report --db runs/store.duckdb --agreement import-saturn-1a2b3c4d
  prl report --db runs/store.duckdb --agreement RUN.rescore --against RUN
  prl report --db runs/study/embedded/store.duckdb --study embedded
""")
    add_config_arguments(p, ReportOptions)
    add_config_arguments(p, Verbosity)
    p.set_defaults(func=_cmd_report)
