"""The ``evaluate`` flow: benchmarks → generation → Math-Verify → store, resumable.

    load problems → register run → [per chunk: generate → verify → store] → finish run

The logic is :func:`prl.evaluate.run_evaluation`; this module runs its steps as Prefect tasks.
The engine and the verifier pool are process resources opened once and passed to the chunk
tasks, so those tasks are not cached (their inputs are live objects). Resumption comes from the
store, not from Prefect's cache: problems that already have ``n`` samples are skipped, and each
chunk is one transaction. Storing is retried (it is idempotent); generation and verification
are not (a failure there is reported, and rerunning the command resumes).

Run it with ``prl eval …`` or from Python: ``evaluate(EvalConfig(model=…, datasets=(…,)))``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.logs import log as _log

from prl import evaluate as ev
from prl.store import Store




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
    return ev.store_chunk(db, rows)


TASK_STEPS = ev.Steps(load_problems=load_problems, register_run=register_run, generate_chunk=generate_chunk,
                      verify_chunk=verify_chunk, store_chunk=store_chunk)


@flow(name="evaluate", log_prints=False)
def evaluate(cfg: ev.EvalConfig, progress: bool = True, engine: Any = None) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify them, and store every sample; returns a summary.

    ``engine``: an already running engine for ``cfg.model`` (training passes its rollout engine).
    """
    return ev.run_evaluation(cfg, progress=progress, engine=engine, steps=TASK_STEPS, log=_log)
