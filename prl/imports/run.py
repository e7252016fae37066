"""``prl import``: other tools' generations into the store as an *imported* run, verified by ours.

Top to bottom:

    read_sources     read every file whole (a bad file is an error naming it, before anything is stored)
    match_rows       map each row to a problem of the data set (by id, else by text); unmatched rows listed
    assign_samples   a problem's responses become sample indices 0..n-1 (explicit ones where the source has them)
    register         the run row (kind 'imported') with its manifest: each source file's path, size,
                     sha256, format, tool and version, the accuracy it reports, the unmatched rows
    verify + store   our verifier (the categories of ``prl eval``) on each response, the source's own
                     label kept beside our verdict, one transaction per chunk
    finish           status 'finished', the summary: our accuracy beside the reported one

Idempotent and resumable like ``prl eval``: the same command on the same files stores nothing
twice, and after a kill it verifies only what is missing. The same run id with other files is
refused.
"""

from __future__ import annotations

from prl_core.errors import UserError
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence


from prl.data.datasets import DATASETS, Problem, load_dataset
from prl.grading.relevance import FitIndex, fit_index, graded_fields
from prl.grading.verifier import VerifierPool, VerifierSettings
from prl.imports.formats import FORMATS, FormatError, SourceFile, parse_fields, read_source
from prl.imports.matching import ProblemIndex
from prl.manifest import run_manifest, run_name, sha256_file
from prl.options import POSITIONAL, include_fields, option
from prl.store.db import DEFAULT_STORE, Store

IMPORTED = "imported"
"""The ``runs.kind`` of a run made from another tool's file."""


class ImportRunError(UserError, ValueError):
    """The import cannot go ahead as asked; the message says why and what to do."""


@dataclass(frozen=True)
@include_fields(VerifierSettings)
class ImportConfig:
    """One import: which files, read how, mapped onto which data set, stored where, verified how
    (``VerifierSettings``)."""

    files: tuple[str, ...] = field(metadata=POSITIONAL)
    """Source files, in the order their rows are numbered (lighteval details .parquet, lm-eval samples .jsonl, Inspect .eval, verl dump .jsonl, JSON/JSONL)."""
    dataset: str
    """The benchmark the rows answer (math500, minerva_math, olympiad_bench, aime24, amc23, synth_test, or a .jsonl path)."""
    db: str = DEFAULT_STORE
    """Store file (DuckDB); created if missing."""
    run_id: str | None = option(None, spelling="run")
    """Run id; default: import-, the model's name, the data set and the first 8 hex digits of the files' sha256 (the same command resumes)."""
    format: str = "auto"
    """Source format: auto (from the file's name and first row), lighteval, lm-eval, inspect, verl or json."""
    model_name: str | None = None
    """Name of the model that generated the file (default: what the file says, else the file's name)."""
    fields: str | None = None
    """For --format json: our names mapped to the file's fields, as problem=question,response=generated_output,label=correct (dotted paths reach into objects)."""
    reported_accuracy: float | None = None
    """The accuracy the source's authors published, where the file does not carry it (recorded beside ours)."""
    chunk_samples: int = 256
    """Responses per verify → store transaction (the unit of resumption)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass
class ImportedSample:
    problem: Problem
    sample_idx: int
    response: str
    label: float | None
    answer: str | None
    gold: str | None
    ref: str


def read_sources(cfg: ImportConfig) -> list[SourceFile]:
    """Every file read whole, in the order given."""
    if cfg.format not in FORMATS:
        raise FormatError(f"--format: unknown {cfg.format!r}; choose from {', '.join(FORMATS)}")
    if not cfg.files:
        raise ImportRunError("no files to import")
    fields = parse_fields(cfg.fields)
    return [read_source(f, cfg.format, fields) for f in cfg.files]


def match_rows(sources: Sequence[SourceFile], problems: Sequence[Problem]) -> tuple[list, list[dict[str, Any]]]:
    """[(row, problem, how, file)] for rows that match a problem, and the unmatched rows as
    {file, ref, reason, excerpt}. A file none of whose rows matches is an error."""
    index = ProblemIndex(problems)
    matched, unmatched = [], []
    for src in sources:
        hits = 0
        for row in src.rows:
            m = index.match(row)
            if m.problem is None:
                excerpt = (row.problem_text or "")[:160].replace("\n", " ")
                unmatched.append({"file": src.path, "ref": row.ref, "reason": m.reason, "excerpt": excerpt})
            else:
                hits += 1
                matched.append((row, m.problem, m.how, src.path))
        if hits == 0:
            first = next(u for u in unmatched if u["file"] == src.path)
            raise ImportRunError(f"{src.path}: none of its {len(src.rows)} rows matches a problem of {index.dataset} "
                                 f"(first: {first['ref']}: {first['reason']}); is --dataset right?")
    return matched, unmatched


def assign_samples(matched: Sequence[tuple]) -> list[ImportedSample]:
    """Each problem's responses as sample indices: explicit ones where the source gives them, else 0..n-1 in
    file order. Two responses claiming one index is an error naming both rows."""
    next_idx: dict[str, int] = {}
    seen: dict[tuple[str, int], str] = {}
    out = []
    for row, problem, _how, _file in matched:
        for j, response in enumerate(row.responses):
            if row.sample_indices is not None:
                idx = row.sample_indices[j]
            else:
                idx = next_idx.get(problem.problem_id, 0)
            next_idx[problem.problem_id] = max(next_idx.get(problem.problem_id, 0), idx + 1)
            key = (problem.problem_id, idx)
            if key in seen:
                raise ImportRunError(f"{row.ref}: a second response for {problem.problem_id} sample {idx} "
                                     f"(the first is {seen[key]})")
            seen[key] = row.ref
            out.append(ImportedSample(problem, idx, response, row.labels[j], row.answers[j], row.gold, row.ref))
    return out


def _source_record(src: SourceFile, matched_rows: int, responses: int) -> dict[str, Any]:
    p = Path(src.path)
    return {"path": str(p.resolve()), "name": p.name, "size": p.stat().st_size, "sha256": sha256_file(p),
            "format": src.format, "tool": src.tool, "tool_version": src.tool_version, "model_name": src.model_name,
            "reported_accuracy": src.reported_accuracy, "reported_metric": src.reported_metric,
            "rows": len(src.rows), "rows_matched": matched_rows, "responses": responses, "info": src.info}


def default_run_id(sources: Sequence[dict[str, Any]], model: str, dataset: str = "") -> str:
    """``import-<model>-<data set>-<sha256 of the files, 8 hex digits>``, readable (``prl.manifest.run_name``:
    ``_SATURN-1.5B`` reads ``saturn-1.5b``)."""
    import hashlib

    digest = hashlib.sha256("".join(s["sha256"] for s in sources).encode()).hexdigest()[:8]
    name = dataset if not dataset or dataset in DATASETS else Path(dataset).stem
    return run_name("import", model or "model", name, digest)


def run_import(cfg: ImportConfig, *, progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole import; returns its summary (also recorded in the run's manifest)."""
    t0 = time.perf_counter()
    sources = read_sources(cfg)
    problems, _ = load_dataset(cfg.dataset)
    matched, unmatched = match_rows(sources, problems)
    samples = assign_samples(matched)
    per_file = {s.path: [0, 0] for s in sources}
    for row, _p, _how, path in matched:
        per_file[path][0] += 1
        per_file[path][1] += len(row.responses)
    records = [_source_record(s, *per_file[s.path]) for s in sources]
    model = cfg.model_name or next((s.model_name for s in sources if s.model_name), None) or Path(cfg.files[0]).stem
    run_id = cfg.run_id or default_run_id(records, model, cfg.dataset)
    store = Store(cfg.db)
    existing = store.records("get_run", run_id=run_id)
    if existing:
        kind, manifest = existing[0]["kind"], json.loads(existing[0]["manifest"] or "{}")
        if kind != IMPORTED:
            raise ImportRunError(f"run_id: {run_id!r} is a {kind} run in {cfg.db}; choose another --run")
        old = sorted(s["sha256"] for s in manifest.get("sources", []))
        if old != sorted(r["sha256"] for r in records):
            raise ImportRunError(f"run_id: {run_id!r} in {cfg.db} was imported from other files "
                                 f"({', '.join(s['name'] for s in manifest.get('sources', []))}); choose another "
                                 "--run or import the same files")
    hows = dict(Counter(how for _r, _p, how, _f in matched))
    manifest = {**run_manifest(IMPORTED, config=cfg.to_dict(), seed=None), "dataset": cfg.dataset,
                "sources": records, "matched_by": hows, "unmatched": unmatched,
                "reported_accuracy": _reported(records, cfg),
                "verifier": VerifierSettings.of(cfg).manifest()}
    used = {p.problem_id: p for _r, p, _h, _f in matched}
    store.insert_problems(used.values())
    store.execute("upsert_run", run_id=run_id, kind=IMPORTED, model=model, status="running", config=cfg.to_dict(),
                  manifest=manifest, parent_run_id=None, train_step=None)
    stored = {(d, pid, i) for d, pid, i in store.rows("stored_sample_keys", run_id=run_id)}
    pending = [s for s in samples if (s.problem.dataset, s.problem.problem_id, s.sample_idx) not in stored]
    n_rows = sum(len(s.rows) for s in sources)
    log(f"run {run_id} ({'resumed' if existing else 'new'}), store {cfg.db}: {n_rows} rows in {len(sources)} file(s), "
        f"{len(matched)} matched a problem of {cfg.dataset} ({', '.join(f'{k} {v}' for k, v in sorted(hows.items()))}), "
        f"{len(unmatched)} unmatched; {len(samples)} responses, {len(samples) - len(pending)} already stored")
    for u in unmatched[:10]:
        log(f"  unmatched {u['ref']}: {u['reason']}: {u['excerpt'][:80]!r}")
    if len(unmatched) > 10:
        log(f"  … and {len(unmatched) - 10} more (all in the run's manifest: prl report --agreement {run_id})")
    added = 0
    from tqdm.auto import tqdm  # here: it imports asyncio, and `prl --help` imports this module for its options

    try:
        if pending:
            with VerifierSettings.of(cfg).pool() as pool, \
                    tqdm(total=len(pending), unit="sample", desc=f"import {run_id}", disable=not progress,
                         file=sys.stderr, dynamic_ncols=True) as bar:
                index = fit_index(cfg.dataset) or FitIndex(problems)  # a user file: its own problems
                for i in range(0, len(pending), cfg.chunk_samples):
                    chunk = pending[i:i + cfg.chunk_samples]
                    rows = verify_rows(pool, run_id, chunk, index)
                    added += Store(cfg.db, create=False).insert_samples(rows)
                    bar.update(len(chunk))
    except BaseException:
        store.execute("set_run_status", run_id=run_id, status="failed")
        raise
    summary = summarize(store, run_id)
    summary.update({"run_id": run_id, "db": cfg.db, "rows": n_rows, "rows_matched": len(matched),
                    "rows_unmatched": len(unmatched), "responses": len(samples), "samples_added": added,
                    "reported_accuracy": manifest["reported_accuracy"], "total_s": round(time.perf_counter() - t0, 2)})
    manifest["summary"] = summary
    store.execute("upsert_run", run_id=run_id, kind=IMPORTED, model=model, status="finished", config=cfg.to_dict(),
                  manifest=manifest, parent_run_id=None, train_step=None)
    rep = summary["reported_accuracy"]
    log(f"run {run_id}: {added} samples added, {summary['samples']} stored; our accuracy "
        f"{summary['accuracy']:.4f}" + (f", reported {rep:.4f}" if rep is not None else "")
        + (f", the source's labels {summary['source_accuracy']:.4f} on {summary['labelled']} labelled"
           if summary["labelled"] else "")
        + (f"; agree on {summary['agree']}/{summary['labelled']}" if summary["labelled"] else ""))
    return summary


def _reported(records: Sequence[dict[str, Any]], cfg: ImportConfig) -> float | None:
    if cfg.reported_accuracy is not None:
        return cfg.reported_accuracy
    values = [r["reported_accuracy"] for r in records if r["reported_accuracy"] is not None]
    return values[0] if len(values) == 1 else None


def verify_rows(pool: VerifierPool, run_id: str, chunk: Sequence[ImportedSample], index: FitIndex | None = None
                ) -> list[dict[str, Any]]:
    """Store rows for imported responses: our verdict and extraction, the source's label and extraction."""
    verdicts = pool.verify([(s.response, s.problem.gold_normalized) for s in chunk])
    return [{"run_id": run_id, "dataset": s.problem.dataset, "problem_id": s.problem.problem_id,
             "sample_idx": s.sample_idx, "response": s.response, "n_tokens": None, "finish_reason": None,
             **graded_fields(s.problem, s.response, v, index), "source_label": s.label, "source_answer": s.answer,
             "source_gold": s.gold, "source_ref": s.ref} for s, v in zip(chunk, verdicts)]


def summarize(store: Store, run_id: str) -> dict[str, Any]:
    """Stored samples, our accuracy, the source labels' accuracy and agreement where labelled."""
    s, = store.records("import_summary_for_run", run_id=run_id)
    samples, labelled = s["samples"], s["labelled"]
    return {"samples": samples, "accuracy": (s["correct"] or 0) / samples if samples else 0.0, "labelled": labelled,
            "source_accuracy": (s["source_correct"] or 0) / labelled if labelled else None, "agree": s["agree"] or 0}

