"""Sharded evaluation: problem ranges → one Parquet file per shard → ingested into the store.

The ``--task-runner ray`` path of ``prl eval`` (docs/scaling.md, docs/architecture.md §Scale). The
run's pending problems are cut into contiguous ranges of ``shard_problems``; each shard is one task
that may run on any Ray worker: it starts its own engine, generates, verifies and writes its samples
to ``<shard dir>/<shard name>.parquet`` (written to a temporary name, then renamed, so a shard file
is whole or absent). The driver — the only process that writes the DuckDB file — reads each finished
shard and inserts it into ``samples`` in one idempotent transaction. Workers never open the store,
so a cluster needs no shared database, only a shard directory that the workers and the driver both
see (a shared file system for several machines).

Resumption: on start, shard files left by an earlier attempt are ingested first; then only
problems still short of ``n`` samples are planned. With vLLM a prompt's samples depend only
on (seed, prompt), so a sharded run stores the same samples as an in-process run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from prl.data.datasets import Problem
from prl.fault_points import fault_point
from prl.evaluation.stages import check_prompts, chunked, generate_chunk, start_engine, verify_chunk
from prl.generation.prompts import template_record
from prl.grading.verifier import VerifierPool, VerifierSettings
from prl.store.db import OPTIONAL_SAMPLE_COLUMNS, SAMPLE_COLUMNS, Store, StoreError, sample_schema, samples_table


class ShardError(StoreError):
    """A shard file cannot be used; the message names it and says how to recover."""


@dataclass(frozen=True)
class Shard:
    """A share of a run's pending problems and the file its samples go to."""

    name: str
    """``shard-<first>-<last>-<hash of the problem keys>`` (a contiguous range: positions in the pending list), or
    ``shard-r<i>of<world>-<hash>`` (every world-th problem from position i: :func:`deal_shards`)."""
    problems: tuple[Problem, ...]
    """The shard's problems, in run order."""


def shard_dir(db: str | Path, run_id: str, base: str | Path | None = None) -> Path:
    """Where a run's shard files live: ``<base>/<run id>``, by default ``<store dir>/shards/<run id>``."""
    safe = re.sub(r"[^A-Za-z0-9._@-]+", "_", run_id)
    return (Path(base).resolve() if base is not None else Path(db).resolve().parent / "shards") / safe


def plan_shards(pending: Sequence[Problem], shard_problems: int) -> list[Shard]:
    """Cut ``pending`` into ranges of at most ``shard_problems`` problems (the last may be shorter)."""
    if shard_problems < 1:
        raise ValueError(f"shard_problems: must be >= 1, got {shard_problems}")
    shards = []
    for start in range(0, len(pending), shard_problems):
        part = tuple(pending[start:start + shard_problems])
        keys = "\n".join(f"{p.dataset}\t{p.problem_id}" for p in part)
        digest = hashlib.sha256(keys.encode()).hexdigest()[:8]
        shards.append(Shard(f"shard-{start:06d}-{start + len(part) - 1:06d}-{digest}", part))
    return shards


def deal_shards(pending: Sequence[Problem], world: int) -> list[Shard]:
    """``pending`` dealt round-robin into ``world`` shards (shard i: positions i, i + world, …), for ranks that
    each take one: the data sets of a run follow each other (MATH500's short answers first, OlympiadBench's
    and AIME's long ones last), so contiguous ranges would leave the last ranks the longest responses and
    every other rank waiting for them; dealt, each rank gets the same share of every data set, ±1 problem.
    Empty shards are left out (fewer problems than ranks)."""
    if world < 1:
        raise ValueError(f"world: must be >= 1, got {world}")
    shards = []
    for i in range(world):
        part = tuple(pending[i::world])
        if not part:
            continue
        keys = "\n".join(f"{p.dataset}\t{p.problem_id}" for p in part)
        digest = hashlib.sha256(keys.encode()).hexdigest()[:8]
        shards.append(Shard(f"shard-r{i:04d}of{world:04d}-{digest}", part))
    return shards


# ─── the worker side ──────────────────────────────────────────────────────────────────────────

def write_shard(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write sample rows to ``path`` as Parquet, atomically (temporary name, fsync, rename)."""
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(samples_table(rows), tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:  # full disk, quota, permissions: no partial file is left behind
        tmp.unlink(missing_ok=True)
        raise ShardError(f"{path}: could not write the shard ({e.strerror or e}); nothing of it was stored — "
                         "free space and rerun the same command to regenerate its problems") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def run_shard(cfg, run_id: str, problems: Sequence[Problem], path: str | Path, *, engine=None,
              pool: VerifierPool | None = None) -> dict[str, Any]:
    """Generate, verify and write one shard (runs on a worker; never touches the store).

    ``engine`` / ``pool``: a running engine serving ``cfg.model`` and verifier workers to use (a training
    rank lends its own; neither is closed); by default the shard starts and closes its own.
    Returns what the driver records: the file, row and correct counts, phase seconds, and
    the engine's description and chat template for the run's manifest.
    """
    t0 = time.perf_counter()
    own_engine = engine is None
    engine = start_engine(cfg) if own_engine else engine
    try:
        t_start = time.perf_counter() - t0
        check_prompts(engine, problems)
        t_gen = t_ver = 0.0
        rows = []
        with (contextlib.nullcontext(pool) if pool is not None else
              VerifierSettings.of(cfg).pool()
              ) as verifier:
            # chunk_problems at a time, as the in-process path does: an engine's KV cache holds a chunk's
            # sequences, not the whole shard's (vLLM would otherwise preempt and recompute); with vLLM the
            # samples do not depend on the chunking (per-prompt seeds)
            for chunk in chunked(problems, cfg.chunk_problems):
                t = time.perf_counter()
                fault_point("eval/generate", run_id)
                samples = generate_chunk(engine, chunk, cfg.sampling())
                t_gen += time.perf_counter() - t
                t = time.perf_counter()
                rows += verify_chunk(verifier, run_id, chunk, samples)
                t_ver += time.perf_counter() - t
        write_shard(rows, path)
        fault_point("eval/shard_written", run_id)
        info = {"engine": engine.info(),
                "template": template_record(engine.tokenizer)}
    finally:
        if own_engine:
            engine.close()
    return {"path": str(path), "rows": len(rows), "correct": sum(r["verdict"] == "correct" for r in rows),
            "host": os.uname().nodename, "pid": os.getpid(),
            "seconds": {"engine_start": round(t_start, 2), "generate": round(t_gen, 2), "verify": round(t_ver, 2)},
            **info}


def run_shards_here(cfg, run_id: str, shards: Sequence[Shard], directory: Path):
    """Run shards one after another in this process; yields (shard, result or the exception), as a task
    runner's futures do."""
    for shard in shards:
        try:
            yield shard, run_shard(cfg, run_id, shard.problems, directory / f"{shard.name}.parquet")
        except Exception as e:  # reported by the caller after the other shards are stored
            yield shard, e


# ─── the driver side ──────────────────────────────────────────────────────────────────────────

def read_shard(path: str | Path, run_id: str):
    """A shard file as an Arrow table with the samples schema; :class:`ShardError` if unusable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    recover = (f"nothing from it was stored; delete {path} and rerun the same command to regenerate "
               "its problems")
    try:
        table = pq.read_table(path)
    except Exception as e:  # truncated, not Parquet, unreadable
        raise ShardError(f"{path}: not a readable Parquet shard ({type(e).__name__}: {e}); {recover}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in table.column_names and c not in OPTIONAL_SAMPLE_COLUMNS]
    if missing:
        raise ShardError(f"{path}: column(s) {', '.join(missing)} missing; {recover}")
    for name in OPTIONAL_SAMPLE_COLUMNS:  # a shard written before the column existed
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(len(table), sample_schema().field(name).type))
    try:
        table = table.select(list(SAMPLE_COLUMNS)).cast(sample_schema())
    except Exception as e:
        raise ShardError(f"{path}: columns of the wrong type ({e}); {recover}") from None
    other = set(table.column("run_id").unique().to_pylist()) - {run_id}
    if other:
        raise ShardError(f"{path}: holds samples of run(s) {sorted(map(str, other))}, not {run_id!r}; move it "
                         "out of this run's shard directory")
    return table


def ingest_shard(db: str | Path, run_id: str, path: str | Path) -> int:
    """Insert one shard file's samples into the store (one idempotent transaction); returns rows added."""
    table = read_shard(path, run_id)
    return Store(db, create=False).insert_sample_table(table)


def check_leftover_shards(db: str | Path, run_id: str, base: str | Path | None = None) -> None:
    """Read every shard file an earlier attempt left for the run (raising ShardError on a damaged one),
    storing nothing: ``prl eval`` calls it before its flow starts, so the error is one line."""
    for f in leftover_shards(shard_dir(db, run_id, base)):
        read_shard(f, run_id)


def leftover_shards(directory: Path) -> list[Path]:
    """Finished shard files already in a run's shard directory (temporary files are ignored)."""
    return sorted(directory.glob("shard-*.parquet")) if directory.is_dir() else []
