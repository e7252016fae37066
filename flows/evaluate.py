"""The ``evaluate`` flow: benchmarks → generation → Math-Verify → store, resumable.

    load problems → register run → [per chunk: generate → verify → store] → finish run

The logic is :func:`prl.evaluation.evaluate.run_evaluation`; this module runs its steps as Prefect tasks.
The engine and the verifier pool are process resources opened once and passed to the chunk
tasks, so those tasks are not cached (their inputs are live objects). Resumption comes from the
store, not from Prefect's cache: problems that already have ``n`` samples are skipped, and each
chunk is one transaction. Storing is retried (it is idempotent); generation and verification
are not (a failure there is reported, and rerunning the command resumes).

With ``task_runner='ray'`` (``prl eval --task-runner ray``) the pending problems are cut into
shards that run as ``eval-shard`` tasks on a Ray cluster through prefect-ray's
``RayTaskRunner`` (a local Ray runtime unless ``ray_address`` names one); each shard writes a
Parquet file, and this process ingests each file into the store as it arrives.

Run it with ``prl eval …`` or from Python: ``evaluate_flow(cfg)(cfg)``, where ``evaluate_flow``
picks the task runner the config asks for.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.logs import log as _log

from prl.evaluation import evaluate as ev
from prl.evaluation import shards as sh
from prl.store.db import Store




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


def _retry_unless_input_error(task, task_run, state) -> bool:
    """Retry a shard lost to its worker (node gone, OOM), not one refused for its input."""
    try:
        state.result()
    except ev.EvalError:
        return False
    except Exception:
        return True
    return False


@task(name="eval-shard", cache_policy=NO_CACHE, retries=1, retry_condition_fn=_retry_unless_input_error)
def eval_shard(cfg: ev.EvalConfig, run_id: str, problems, path: str) -> dict[str, Any]:
    """One shard on a worker: engine → generate → verify → its own Parquet file (safe to repeat)."""
    return sh.run_shard(cfg, run_id, problems, path)


@task(name="ingest-shard", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def ingest_shard(db: str, run_id: str, path: str) -> int:
    return sh.ingest_shard(db, run_id, path)


def run_shards_on_task_runner(cfg: ev.EvalConfig, run_id: str, shards, directory: Path):
    """Submit every shard to the flow's task runner; yield (shard, result or error) as they finish."""
    from prefect import get_client
    from prefect.futures import as_completed

    # Workers get absolute paths (their working directory is not ours) and this flow's API
    # server, so their task runs report here instead of each starting a temporary server.
    worker_cfg = replace(cfg, model=str(Path(cfg.model).resolve()), db=str(Path(cfg.db).resolve()))
    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    env = {"PREFECT_API_URL": api_url, "RAY_USAGE_STATS_ENABLED": "0",
           **{k: v for k, v in os.environ.items() if k.startswith(("PREFECT_LOGGING", "VLLM_", "HF_"))}}
    submit = lambda s: eval_shard.submit(worker_cfg, run_id, s.problems, str(directory / f"{s.name}.parquet"))  # noqa: E731
    from prefect_ray.context import remote_options  # the sharded path runs on the Ray task runner only

    with remote_options(num_cpus=cfg.shard_cpus, runtime_env={"env_vars": env}):
        futures = {submit(s): s for s in shards}
    for future in as_completed(list(futures)):
        try:
            yield futures[future], future.result()
        except Exception as e:
            yield futures[future], e


TASK_STEPS = ev.Steps(load_problems=load_problems, register_run=register_run, generate_chunk=generate_chunk,
                      verify_chunk=verify_chunk, store_chunk=store_chunk, run_shards=run_shards_on_task_runner,
                      ingest_shard=ingest_shard)


# Live engines lent to the flow by this process (training lends its rollout engine). They are
# passed by key, never as flow parameters: Prefect serialises a flow's parameters for its API,
# and serialising an engine deep-copies its weights and KV cache (measured: +14 GB, 12 s).
_LENT_ENGINES: dict[str, Any] = {}


@flow(name="evaluate", log_prints=False)
def evaluate(cfg: ev.EvalConfig, progress: bool = True, engine_key: str | None = None) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify them, and store every sample; returns a summary.

    ``engine_key``: a running engine for ``cfg.model`` lent with :func:`evaluate_with_engine`.
    """
    engine = None
    if engine_key is not None:
        if engine_key not in _LENT_ENGINES:
            raise ev.EvalError(f"engine_key: no engine {engine_key!r} is lent in this process")
        engine = _LENT_ENGINES[engine_key]
    return ev.run_evaluation(cfg, progress=progress, engine=engine, steps=TASK_STEPS, log=_log)


def evaluate_with_engine(cfg: ev.EvalConfig, engine: Any, progress: bool = False) -> dict[str, Any]:
    """Run the ``evaluate`` flow on an engine this process already runs (it is not closed)."""
    key = f"engine-{id(engine)}"
    _LENT_ENGINES[key] = engine
    try:
        return evaluate(cfg, progress=progress, engine_key=key)
    finally:
        _LENT_ENGINES.pop(key, None)


def ray_task_runner(cfg: ev.EvalConfig):
    """prefect-ray's ``RayTaskRunner`` for ``cfg``: join ``cfg.ray_address`` or start a local runtime."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        from prefect_ray import RayTaskRunner
    except ImportError:
        raise ev.EvalError("task_runner: 'ray' needs the optional extra: pip install -e '.[ray]' "
                           "(prefect-ray and ray)") from None
    init_kwargs: dict[str, Any] = {}
    if cfg.ray_address is None:  # a local runtime: this machine's CPUs, no web dashboard
        init_kwargs = {"num_cpus": cfg.ray_cpus or os.cpu_count(), "include_dashboard": False}
    return RayTaskRunner(address=cfg.ray_address, init_kwargs=init_kwargs)


def evaluate_flow(cfg: ev.EvalConfig):
    """The ``evaluate`` flow with the task runner ``cfg.task_runner`` asks for."""
    if cfg.task_runner == "ray":
        return evaluate.with_options(task_runner=ray_task_runner(cfg))
    return evaluate
