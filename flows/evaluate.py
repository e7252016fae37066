"""The ``evaluate`` flow: benchmarks → generation → Math-Verify → store, resumable.

    load problems → register run → [per chunk: generate → verify → store] → finish run

Tasks do one thing each; the engine and the verifier pool are process resources opened once
by the flow and passed to the chunk tasks (so those tasks are not cached: their inputs are
live objects). Resumption comes from the store, not from Prefect's cache: problems that
already have ``n`` samples are skipped, and each chunk is one transaction (``prl.evaluate``).
Storing is retried (it is idempotent); generation and verification are not retried by Prefect
(a failure there is reported, and rerunning the command resumes).

Run it with ``prl eval …`` or from Python: ``evaluate(EvalConfig(model=…, datasets=(…,)))``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from prl import evaluate as ev
from prl.store import Store


def _log(msg: str) -> None:
    try:
        get_run_logger().info(msg)
    except Exception:  # outside a run context
        pass
    print(msg, file=sys.stderr, flush=True)


@task(name="load-problems", cache_policy=NO_CACHE)
def load_problems(cfg: ev.EvalConfig):
    return ev.load_problems(cfg, log=_log)


@task(name="register-run", cache_policy=NO_CACHE)
def register_run(cfg: ev.EvalConfig, problems) -> dict[str, Any]:
    return ev.register_run(Store(cfg.db), cfg, problems)


@task(name="generate-chunk", cache_policy=NO_CACHE)
def generate_chunk(engine, problems, sampling):
    return ev.generate_chunk(engine, problems, sampling)


@task(name="verify-chunk", cache_policy=NO_CACHE)
def verify_chunk(pool, run_id: str, problems, samples):
    return ev.verify_chunk(pool, run_id, problems, samples)


@task(name="store-chunk", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def store_chunk(db: str, rows) -> int:
    return Store(db, create=False).insert_samples(rows)


@flow(name="evaluate", log_prints=False)
def evaluate(cfg: ev.EvalConfig, progress: bool = True) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify them, and store every sample; returns a summary."""
    t0 = time.perf_counter()
    problems = load_problems(cfg)
    info = register_run(cfg, problems)
    run_id = info["run_id"]
    store = Store(cfg.db, create=False)
    pending = ev.pending_problems(store, run_id, problems, cfg.n)
    done = len(problems) - len(pending)
    _log(f"run {run_id} ({'resumed' if info['resumed'] else 'new'}), store {cfg.db}: {len(problems)} problems "
         f"from {', '.join(cfg.datasets)}; {done} already have {cfg.n} samples, {len(pending)} to generate")
    summary: dict[str, Any] = {"run_id": run_id, "db": cfg.db, "problems": len(problems), "skipped_complete": done,
                               "generated_problems": len(pending), "samples_added": 0}
    engine_info = template = None
    try:
        if pending:
            engine_info, template = _generate_all(cfg, run_id, pending, progress, summary)
    except BaseException:
        ev.mark_failed(store, run_id)
        raise
    summary["total_s"] = round(time.perf_counter() - t0, 2)
    ev.finish_run(store, cfg, run_id, problems, engine_info, template, summary)
    counts = store.rows("stored_counts_for_run", run_id=run_id)
    summary["stored_samples"] = sum(c for *_, c in counts)
    _log(f"run {run_id}: {summary['samples_added']} samples added, {summary['stored_samples']} stored "
         f"for {len(counts)} problems in {cfg.db} ({summary['total_s']:.0f} s)")
    return summary


def _generate_all(cfg: ev.EvalConfig, run_id: str, pending, progress: bool, summary: dict[str, Any]):
    """Chunks of generate → verify → store with one progress bar; returns (engine info, template)."""
    from tqdm.auto import tqdm

    from prl.prompts import chat_template_text
    from prl.verifier import VerifierPool

    t_engine = time.perf_counter()
    engine = ev.start_engine(cfg)
    summary["engine_start_s"] = round(time.perf_counter() - t_engine, 2)
    _log(f"engine {cfg.engine} ready in {summary['engine_start_s']:.1f} s")
    gen_s = ver_s = store_s = 0.0
    try:
        ev.check_prompts(engine, pending)
        with VerifierPool(cfg.verifier_workers, timeout_s=cfg.verify_timeout_s,
                          wall_s=3.0 * cfg.verify_timeout_s) as pool, \
                tqdm(total=len(pending) * cfg.n, unit="sample", desc=f"eval {run_id}", disable=not progress,
                     file=sys.stderr, dynamic_ncols=True) as bar:
            sampling = cfg.sampling()
            for chunk in ev.chunked(pending, cfg.chunk_problems):
                t = time.perf_counter()
                samples = generate_chunk(engine, chunk, sampling)
                gen_s += time.perf_counter() - t
                t = time.perf_counter()
                rows = verify_chunk(pool, run_id, chunk, samples)
                ver_s += time.perf_counter() - t
                t = time.perf_counter()
                summary["samples_added"] += store_chunk(cfg.db, rows)
                store_s += time.perf_counter() - t
                bar.update(len(rows))
                bar.set_postfix(correct=f"{sum(r['verdict'] == 'correct' for r in rows)}/{len(rows)}")
        engine_info = engine.info()
        template = {"template_sha256": engine.template_hash(), "template": chat_template_text(engine.tokenizer)}
    finally:
        engine.close()
    summary["seconds"] = {"generate": round(gen_s, 2), "verify": round(ver_s, 2), "store": round(store_s, 2)}
    return engine_info, template
