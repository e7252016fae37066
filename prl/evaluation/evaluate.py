"""Evaluation: benchmarks → generation → Math-Verify → store
(docs/architecture.md §The life of an evaluation run).

An evaluation run, top to bottom, as plain functions chained by :func:`run_evaluation`
(``flows/evaluate.py`` calls it with its Prefect tasks as the run's start, chunk and shard steps;
``prl eval`` runs that flow; training's periodic evaluations call
:func:`run_evaluation_across_ranks`):

    start_run          load problems, register the run, store leftover shard files, count what is pending
    open_engine        the engine (or a lent one) and the verifier workers, closed at the end
    evaluate_chunk     per chunk of problems: generate → verify → store in one transaction
    store_shard_results (sharded runs) store each shard's Parquet file as it arrives
    finish_run         the run's status: 'finished' (row, manifest, summary) or 'failed' (what is stored stays)

Resumable and idempotent at sample granularity. Problems are processed in chunks; each chunk
is generated, verified, and written in **one** store transaction, so a run killed at any point
has whole chunks stored and nothing partial. On restart with the same settings (the default
run id is derived from them) the run's stored samples are counted per problem and only
problems with fewer than ``n`` are generated again; inserts skip samples already stored. With
vLLM every prompt's samples depend only on (seed, prompt), so a resumed run stores the samples
an uninterrupted run would have. Restarting an existing run id with different sampling
settings or another model is refused.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from tqdm.auto import tqdm

from prl.evaluation import shards as sh
from prl.evaluation.config import EvalConfig, EvalError
from prl.evaluation.stages import (chunked, check_prompts, record_run_finish, generate_chunk, load_problems,
                                  pending_problems, record_run_start, record_run_status, start_engine, store_chunk,
                                   verify_chunk)
from prl.fault_points import fault_point
from prl.generation.engines import Engine
from prl.generation.prompts import template_record
from prl.grading.verifier import VerifierPool, VerifierSettings
from prl.store.db import Store


@dataclass
class EvalRun:
    """An evaluation run in progress: what :func:`start_run` found and what the chunks have added."""

    cfg: EvalConfig
    run_id: str
    problems: list
    pending: list
    """Problems with fewer than ``cfg.n`` stored samples, in run order."""
    summary: dict[str, Any]
    t0: float = field(default_factory=time.perf_counter)
    seconds: dict[str, float] = field(default_factory=lambda: {"generate": 0.0, "verify": 0.0, "store": 0.0})
    engine_info: dict[str, Any] | None = None
    template: dict[str, Any] | None = None


def start_run(cfg: EvalConfig, log: Callable[[str], None] = print) -> EvalRun:
    """Load the problems, register the run (refusing other settings under its id), store shard files an
    earlier sharded attempt left, and count the problems still short of ``n`` samples."""
    problems = load_problems(cfg, log)
    store = Store(cfg.db)
    info = record_run_start(store, cfg, problems)
    run_id = info["run_id"]
    if cfg.task_runner != "local":
        ingest_leftover_shards(cfg, run_id, log)
    pending = pending_problems(store, run_id, problems, cfg.n)
    done = len(problems) - len(pending)
    log(f"run {run_id} ({'resumed' if info['resumed'] else 'new'}), store {cfg.db}: {len(problems)} problems "
        f"from {', '.join(cfg.datasets)}; {done} already have {cfg.n} samples, {len(pending)} to generate")
    summary: dict[str, Any] = {"run_id": run_id, "db": cfg.db, "problems": len(problems), "skipped_complete": done,
                               "generated_problems": len(pending), "samples_added": 0}
    return EvalRun(cfg, run_id, problems, pending, summary)


@contextmanager
def open_engine(run: EvalRun, engine: Engine | None = None, log: Callable[[str], None] = print
                ) -> Iterator[tuple[Engine, VerifierPool]]:
    """(engine, verifier pool) for the run's chunks; a lent ``engine`` (training's rollout engine) is used
    and left open, otherwise one is started here and closed on exit. Prompts longer than the engine's
    context are refused before anything is generated. Records the engine and chat template on ``run``."""
    cfg = run.cfg
    own = engine is None
    if own:
        t = time.perf_counter()
        engine = start_engine(cfg)
        run.summary["engine_start_s"] = round(time.perf_counter() - t, 2)
        log(f"engine {cfg.engine} ready in {run.summary['engine_start_s']:.1f} s")
    try:
        check_prompts(engine, run.pending)
        with VerifierSettings.of(cfg).pool() as pool:
            yield engine, pool
        run.engine_info = engine.info()
        run.template = template_record(engine.tokenizer)
    except KeyboardInterrupt:  # Ctrl-C ends the process: its exit handlers stop an engine's processes (vLLM's
        own = False            # finalizer); the in-process teardown (seconds of garbage collection) is skipped
        raise
    finally:
        if own:
            engine.close()


def evaluate_chunk(engine: Engine, pool: VerifierPool, cfg: EvalConfig, run_id: str, chunk: list
                   ) -> dict[str, Any]:
    """Generate ``cfg.n`` samples for each problem of ``chunk``, verify them and store them in one
    transaction. Returns {"rows", "correct", "added", "seconds": {generate, verify, store}}."""
    t0 = time.perf_counter()
    fault_point("eval/generate", run_id)
    samples = generate_chunk(engine, chunk, cfg.sampling())
    t1 = time.perf_counter()
    rows = verify_chunk(pool, run_id, chunk, samples)
    t2 = time.perf_counter()
    added = store_chunk(cfg.db, rows)
    t3 = time.perf_counter()
    return {"rows": len(rows), "correct": sum(r["verdict"] == "correct" for r in rows), "added": added,
            "seconds": {"generate": t1 - t0, "verify": t2 - t1, "store": t3 - t2}}


def progress_bar(run: EvalRun, progress: bool):
    """The run's progress bar (samples) on stderr."""
    return tqdm(total=len(run.pending) * run.cfg.n, unit="sample", desc=f"eval {run.run_id}", disable=not progress,
                file=sys.stderr, dynamic_ncols=True)


def count_chunk(run: EvalRun, result: dict[str, Any], bar) -> None:
    """Add a chunk's counts and times to the run and advance the bar."""
    run.summary["samples_added"] += result["added"]
    for k, v in result["seconds"].items():
        run.seconds[k] = run.seconds.get(k, 0.0) + v
    bar.update(result["rows"])
    bar.set_postfix(correct=f"{result['correct']}/{result['rows']}")


def ingest_leftover_shards(cfg: EvalConfig, run_id: str, log: Callable[[str], None] = print) -> None:
    """Store shard files an earlier attempt wrote but did not store (idempotent)."""
    files = sh.leftover_shards(sh.shard_dir(cfg.db, run_id, cfg.shard_dir))
    added = sum(sh.ingest_shard(cfg.db, run_id, str(f)) for f in files)
    if files:
        log(f"run {run_id}: {len(files)} shard file(s) from earlier attempts read, {added} samples added from them")


def plan_shards(run: EvalRun, log: Callable[[str], None] = print) -> tuple[list[sh.Shard], Path]:
    """The run's pending problems cut into shards, and the directory their files go to."""
    cfg = run.cfg
    directory = sh.shard_dir(cfg.db, run.run_id, cfg.shard_dir)
    directory.mkdir(parents=True, exist_ok=True)
    shards = sh.plan_shards(run.pending, cfg.shard_problems)
    log(f"run {run.run_id}: {len(shards)} shard(s) of <= {cfg.shard_problems} problems on the {cfg.task_runner} "
        f"task runner, shard files in {directory}")
    return shards, directory


def store_shard_results(run: EvalRun, shards: list[sh.Shard], results: Iterable[tuple[sh.Shard, Any]],
                        progress: bool, log: Callable[[str], None] = print) -> None:
    """Store each finished shard's file as it arrives; ``results`` yields (shard, result or the exception
    its task raised). Raises :class:`EvalError` after the others are stored if any shard failed."""
    cfg = run.cfg
    failed: list[tuple[Any, BaseException]] = []
    run.seconds = {"engine_start": 0.0, "generate": 0.0, "verify": 0.0, "store": 0.0}
    with progress_bar(run, progress) as bar:
        for shard, result in results:
            if isinstance(result, BaseException):
                failed.append((shard, result))
                log(f"shard {shard.name} failed: {type(result).__name__}: {result}")
                continue
            t = time.perf_counter()
            run.summary["samples_added"] += sh.ingest_shard(cfg.db, run.run_id, result["path"])
            run.seconds["store"] += time.perf_counter() - t
            for k, v in result["seconds"].items():
                run.seconds[k] = run.seconds.get(k, 0.0) + v  # summed over shards (they overlap)
            run.engine_info, run.template = run.engine_info or result["engine"], run.template or result["template"]
            bar.update(result["rows"])
            bar.set_postfix(correct=f"{result['correct']}/{result['rows']}", shards=f"{bar.n // cfg.n}")
    run.summary["shards"] = {"planned": len(shards), "failed": len(failed),
                             "dir": str(sh.shard_dir(cfg.db, run.run_id, cfg.shard_dir))}
    if failed:
        shard, err = failed[0]
        raise EvalError(f"{len(failed)} of {len(shards)} shard(s) failed (first: {shard.name}: "
                        f"{type(err).__name__}: {err}); the other shards are stored — rerun the same command "
                        "to generate only what is missing") from err


def finish_run(run: EvalRun, status: str = "finished", log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """End the run with ``status``. 'finished': its row and manifest (engine, template, timings); returns its
    summary. 'failed': only the status (what is stored stays; rerunning the same command resumes); None."""
    cfg, summary = run.cfg, run.summary
    store = Store(cfg.db, create=False)
    if status == "failed":
        record_run_status(store, run.run_id, "failed")
        return None
    if status != "finished":
        raise ValueError(f"status: {status!r} (a run finishes as 'finished' or 'failed')")
    if run.pending:
        summary["seconds"] = {k: round(v, 2) for k, v in run.seconds.items()}
    summary["total_s"] = round(time.perf_counter() - run.t0, 2)
    record_run_finish(store, cfg, run.run_id, run.problems, run.engine_info, run.template, summary)
    counts = store.records("stored_counts_for_run", run_id=run.run_id)
    summary["stored_samples"] = sum(c["stored"] for c in counts)
    metrics = store.records("dataset_metrics_for_run", run_id=run.run_id)
    summary["average_at_n"] = {m["dataset"]: m["average_at_n"] for m in metrics}
    log(f"run {run.run_id}: {summary['samples_added']} samples added, {summary['stored_samples']} stored "
        f"for {len(counts)} problems in {cfg.db} ({summary['total_s']:.0f} s)")
    return summary


def run_evaluation(cfg: EvalConfig, *, progress: bool = True, engine: Engine | None = None,
                   log: Callable[[str], None] = print, start: Callable[[EvalConfig], EvalRun] | None = None,
                   chunk: Callable[..., dict[str, Any]] = evaluate_chunk,
                   shard_results: Callable[..., Iterable[tuple[sh.Shard, Any]]] = sh.run_shards_here
                   ) -> dict[str, Any]:
    """The whole run; returns its summary. ``engine``: a running engine serving ``cfg.model`` (training
    lends its rollout engine; it is not closed). With ``task_runner`` other than 'local' the pending problems
    are cut into shards whose results ``shard_results(cfg, run_id, shards, directory)`` yields (by default
    run here one after another).

    The one orchestration of an evaluation: the ``evaluate`` flow (``flows/evaluate.py``) calls it with its
    Prefect tasks as the steps: ``start(cfg)`` (default :func:`start_run`), ``chunk(engine, pool, cfg,
    run_id, problems)`` (default :func:`evaluate_chunk`) and ``shard_results`` (tasks on its task runner)."""
    run = start(cfg) if start is not None else start_run(cfg, log)
    try:
        if run.pending and cfg.task_runner != "local":
            shards, directory = plan_shards(run, log)
            store_shard_results(run, shards, shard_results(cfg, run.run_id, shards, directory), progress, log)
        elif run.pending:
            with open_engine(run, engine, log) as (eng, pool), progress_bar(run, progress) as bar:
                for problems in chunked(run.pending, cfg.chunk_problems):
                    count_chunk(run, chunk(eng, pool, cfg, run.run_id, problems), bar)
    except BaseException:
        finish_run(run, "failed")
        raise
    return finish_run(run, log=log)


def run_evaluation_across_ranks(cfg: EvalConfig, *, engine: Engine, rank: int, world: int,
                                share: Callable[[Any], Any], gather: Callable[[Any], list[Any] | None],
                                pool: VerifierPool | None = None,
                                log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """One run evaluated by ``world`` processes that each hold an engine serving ``cfg.model`` (a training
    run's ranks): rank 0 registers the run and deals its pending problems round-robin into ``world`` shards
    (:func:`shards.deal_shards`: every rank the same share of each data set, so no rank holds all the long
    responses); each
    rank generates and verifies its shard into a shard file with its own engine (:func:`shards.run_shard`);
    rank 0 stores every file and finishes the run. No rank waits longer than the slowest shard takes.

    ``share(obj)``: rank 0's ``obj`` on every rank (a broadcast); ``gather(obj)``: every rank's ``obj`` on rank
    0, in rank order (None elsewhere). Returns the run's summary on rank 0, None on the others. With vLLM a
    prompt's samples depend only on (seed, prompt), so the stored samples are those of a one-process run.
    """
    run = start_run(cfg, log) if rank == 0 else None
    plan = share(None if run is None else {
        "run_id": run.run_id, "keys": [(p.dataset, p.problem_id) for p in run.pending]})
    problems = run.problems if run is not None else load_problems(cfg, lambda _m: None)
    by_key = {(p.dataset, p.problem_id): p for p in problems}
    shards = sh.deal_shards([by_key[k] for k in plan["keys"]], world)
    directory = sh.shard_dir(cfg.db, plan["run_id"], cfg.shard_dir)
    directory.mkdir(parents=True, exist_ok=True)
    mine: Any = None
    if rank < len(shards):
        try:
            mine = sh.run_shard(cfg, plan["run_id"], shards[rank].problems, directory / f"{shards[rank].name}.parquet",
                                engine=engine, pool=pool)
        except Exception as e:  # noqa: BLE001 - reported by rank 0, after the other shards are stored
            mine = EvalError(f"rank {rank}: {type(e).__name__}: {e}")
    results = gather(mine)
    if run is None:
        return None
    try:
        if shards:
            store_shard_results(run, shards, zip(shards, results), progress=False, log=log)
    except BaseException:
        finish_run(run, "failed")
        raise
    return finish_run(run, log=log)
