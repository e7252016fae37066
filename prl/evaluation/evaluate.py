"""Evaluation: benchmarks → generation → Math-Verify → store (DESIGN §3, §4).

The steps as plain functions; ``flows/evaluate.py`` wraps them as a Prefect flow with a
progress bar, and ``prl eval`` runs that flow.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from prl.evaluation import shards as sh
from prl.evaluation.config import EvalConfig, EvalError
from prl.evaluation.steps import (chunked, check_prompts, finish_run, generate_chunk, load_problems, mark_failed,
                                  pending_problems, register_run, start_engine, store_chunk, verify_chunk)
from prl.generation.engines import Engine
from prl.generation.prompts import chat_template_text
from prl.grading.verifier import VerifierPool
from prl.store.db import Store


@dataclass(frozen=True)
class Steps:
    """The steps :func:`run_evaluation` calls; the Prefect flow passes task-wrapped versions."""

    load_problems: Callable = load_problems
    register_run: Callable = lambda cfg, problems: register_run(Store(cfg.db), cfg, problems)  # noqa: E731
    generate_chunk: Callable = generate_chunk
    verify_chunk: Callable = verify_chunk
    store_chunk: Callable = store_chunk
    run_shards: Callable = None  # type: ignore[assignment]  # (cfg, run_id, shards, directory) → (shard, result|error) pairs
    ingest_shard: Callable = None  # type: ignore[assignment]  # (db, run_id, path) → rows added

    def __post_init__(self) -> None:
        if self.run_shards is None:
            object.__setattr__(self, "run_shards", run_shards_here)
        if self.ingest_shard is None:
            object.__setattr__(self, "ingest_shard", sh.ingest_shard)


def run_shards_here(cfg: EvalConfig, run_id: str, shards, directory: Path):
    """Run shards one after another in this process; yields (shard, result or the exception)."""
    for shard in shards:
        try:
            yield shard, sh.run_shard(cfg, run_id, shard.problems, directory / f"{shard.name}.parquet")
        except Exception as e:  # reported by the caller after the other shards are stored
            yield shard, e


def run_evaluation(cfg: EvalConfig, *, progress: bool = True, engine: Engine | None = None,
                   steps: Steps = Steps(), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify and store them; returns a summary.

    ``engine``: an already running engine serving ``cfg.model`` (training reuses its rollout
    engine); it is not closed. Otherwise one is started and closed here.
    """
    t0 = time.perf_counter()
    problems = steps.load_problems(cfg)
    info = steps.register_run(cfg, problems)
    run_id = info["run_id"]
    store = Store(cfg.db, create=False)
    if cfg.task_runner != "local":
        _ingest_leftover_shards(cfg, run_id, steps, log)
    pending = pending_problems(store, run_id, problems, cfg.n)
    done = len(problems) - len(pending)
    log(f"run {run_id} ({'resumed' if info['resumed'] else 'new'}), store {cfg.db}: {len(problems)} problems "
        f"from {', '.join(cfg.datasets)}; {done} already have {cfg.n} samples, {len(pending)} to generate")
    summary: dict[str, Any] = {"run_id": run_id, "db": cfg.db, "problems": len(problems), "skipped_complete": done,
                               "generated_problems": len(pending), "samples_added": 0}
    engine_info = template = None
    try:
        if pending and cfg.task_runner != "local":
            engine_info, template = _generate_sharded(cfg, run_id, pending, progress, summary, steps, log)
        elif pending:
            engine_info, template = _generate_all(cfg, run_id, pending, progress, summary, engine, steps, log)
    except BaseException:
        mark_failed(store, run_id)
        raise
    summary["total_s"] = round(time.perf_counter() - t0, 2)
    finish_run(store, cfg, run_id, problems, engine_info, template, summary)
    counts = store.rows("stored_counts_for_run", run_id=run_id)
    summary["stored_samples"] = sum(c for *_, c in counts)
    correct = store.rows("dataset_metrics_for_run", run_id=run_id)
    summary["average_at_n"] = {d: avg for d, _p, _n, avg, _pass in correct}
    log(f"run {run_id}: {summary['samples_added']} samples added, {summary['stored_samples']} stored "
        f"for {len(counts)} problems in {cfg.db} ({summary['total_s']:.0f} s)")
    return summary


def _generate_all(cfg: EvalConfig, run_id: str, pending, progress: bool, summary: dict[str, Any],
                  engine: Engine | None, steps: Steps, log: Callable[[str], None]):
    """Chunks of generate → verify → store with one progress bar; returns (engine info, template)."""
    own = engine is None
    if own:
        t_engine = time.perf_counter()
        engine = start_engine(cfg)
        summary["engine_start_s"] = round(time.perf_counter() - t_engine, 2)
        log(f"engine {cfg.engine} ready in {summary['engine_start_s']:.1f} s")
    gen_s = ver_s = store_s = 0.0
    try:
        check_prompts(engine, pending)
        with VerifierPool(cfg.verifier_workers, timeout_s=cfg.verify_timeout_s,
                          wall_s=3.0 * cfg.verify_timeout_s) as pool, \
                tqdm(total=len(pending) * cfg.n, unit="sample", desc=f"eval {run_id}", disable=not progress,
                     file=sys.stderr, dynamic_ncols=True) as bar:
            sampling = cfg.sampling()
            for chunk in chunked(pending, cfg.chunk_problems):
                t = time.perf_counter()
                samples = steps.generate_chunk(engine, chunk, sampling)
                gen_s += time.perf_counter() - t
                t = time.perf_counter()
                rows = steps.verify_chunk(pool, run_id, chunk, samples)
                ver_s += time.perf_counter() - t
                t = time.perf_counter()
                summary["samples_added"] += steps.store_chunk(cfg.db, rows)
                store_s += time.perf_counter() - t
                bar.update(len(rows))
                bar.set_postfix(correct=f"{sum(r['verdict'] == 'correct' for r in rows)}/{len(rows)}")
        engine_info = engine.info()
        template = {"template_sha256": engine.template_hash(), "template": chat_template_text(engine.tokenizer)}
    finally:
        if own:
            engine.close()
    summary["seconds"] = {"generate": round(gen_s, 2), "verify": round(ver_s, 2), "store": round(store_s, 2)}
    return engine_info, template


def _ingest_leftover_shards(cfg: EvalConfig, run_id: str, steps: Steps, log: Callable[[str], None]) -> None:
    """Store shard files an earlier attempt wrote but did not ingest (idempotent)."""
    files = sh.leftover_shards(sh.shard_dir(cfg.db, run_id, cfg.shard_dir))
    added = sum(steps.ingest_shard(cfg.db, run_id, str(f)) for f in files)
    if files:
        log(f"run {run_id}: {len(files)} shard file(s) from earlier attempts read, {added} samples added from them")


def _generate_sharded(cfg: EvalConfig, run_id: str, pending, progress: bool, summary: dict[str, Any],
                      steps: Steps, log: Callable[[str], None]):
    """Shards fanned out by ``steps.run_shards``; each finished shard's file is ingested as it arrives."""
    directory = sh.shard_dir(cfg.db, run_id, cfg.shard_dir)
    directory.mkdir(parents=True, exist_ok=True)
    shards = sh.plan_shards(pending, cfg.shard_problems)
    log(f"run {run_id}: {len(shards)} shard(s) of <= {cfg.shard_problems} problems on the {cfg.task_runner} "
        f"task runner, shard files in {directory}")
    engine_info = template = None
    failed: list[tuple[Any, BaseException]] = []
    seconds = {"engine_start": 0.0, "generate": 0.0, "verify": 0.0, "store": 0.0}
    with tqdm(total=len(pending) * cfg.n, unit="sample", desc=f"eval {run_id}", disable=not progress,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for shard, result in steps.run_shards(cfg, run_id, shards, directory):
            if isinstance(result, BaseException):
                failed.append((shard, result))
                log(f"shard {shard.name} failed: {type(result).__name__}: {result}")
                continue
            t = time.perf_counter()
            summary["samples_added"] += steps.ingest_shard(cfg.db, run_id, result["path"])
            seconds["store"] += time.perf_counter() - t
            for k, v in result["seconds"].items():
                seconds[k] = seconds.get(k, 0.0) + v
            engine_info, template = engine_info or result["engine"], template or result["template"]
            bar.update(result["rows"])
            bar.set_postfix(correct=f"{result['correct']}/{result['rows']}", shards=f"{bar.n // cfg.n}")
    summary["shards"] = {"planned": len(shards), "failed": len(failed), "dir": str(directory)}
    summary["seconds"] = {k: round(v, 2) for k, v in seconds.items()}  # summed over shards (they overlap)
    if failed:
        shard, err = failed[0]
        raise EvalError(f"{len(failed)} of {len(shards)} shard(s) failed (first: {shard.name}: "
                        f"{type(err).__name__}: {err}); the other shards are stored — rerun the same command "
                        "to generate only what is missing") from err
    return engine_info, template
