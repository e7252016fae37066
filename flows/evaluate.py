"""The ``evaluate`` flow: benchmarks → generation → Math-Verify → store, resumable.

    load problems → register run → [per chunk: generate → verify → store] → finish run

The flow is :func:`prl.evaluation.evaluate.run_evaluation` (the one orchestration, also run without
Prefect) with Prefect tasks as its steps: the run's start, each chunk (generate → verify → store,
one transaction) and, on Ray, each shard. The engine
and the verifier pool are process resources opened once and passed to the chunk tasks, so those
tasks are not cached (their inputs are live objects). Resumption comes from the store, not from
Prefect's cache: problems that already have ``n`` samples are skipped; rerunning resumes.

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

from prefect import flow, get_client, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from flows.run_log import log as _log

from prl.evaluation import evaluate as ev
from prl.evaluation import shards as sh
from prl.evaluation.config import EvalConfig, EvalError


@task(name="start-run", cache_policy=NO_CACHE)
def start_run(cfg: EvalConfig) -> ev.EvalRun:
    return ev.start_run(cfg, log=_log)


@task(name="eval-chunk", cache_policy=NO_CACHE)
def evaluate_chunk(engine, pool, cfg: EvalConfig, run_id: str, chunk) -> dict[str, Any]:
    """generate → verify → store one chunk (one transaction; not retried: rerunning the flow resumes)."""
    return ev.evaluate_chunk(engine, pool, cfg, run_id, chunk)


def _retry_unless_input_error(task, task_run, state) -> bool:
    """Retry a shard lost to its worker (node gone, OOM), not one refused for its input."""
    try:
        state.result()
    except EvalError:
        return False
    except Exception:
        return True
    return False


@task(name="eval-shard", cache_policy=NO_CACHE, retries=1, retry_condition_fn=_retry_unless_input_error)
def evaluate_shard(cfg: EvalConfig, run_id: str, problems, path: str) -> dict[str, Any]:
    """One shard on a worker: engine → generate → verify → its own Parquet file (safe to repeat)."""
    return sh.run_shard(cfg, run_id, problems, path)


def shard_results(cfg: EvalConfig, run_id: str, shards, directory: Path):
    """Submit every shard to the flow's task runner; yield (shard, result or error) as they finish."""
    # Workers get absolute paths (their working directory is not ours) and this flow's API
    # server, so their task runs report here instead of each starting a temporary server.
    worker_cfg = replace(cfg, model=str(Path(cfg.model).resolve()), db=str(Path(cfg.db).resolve()))
    env = ray_worker_env()
    from prefect_ray.context import remote_options  # the sharded path runs on the Ray task runner only

    with remote_options(num_cpus=cfg.shard_cpus, runtime_env={"env_vars": env}):
        futures = {evaluate_shard.submit(worker_cfg, run_id, s.problems, str(directory / f"{s.name}.parquet")): s
                   for s in shards}
    for future in as_completed(list(futures)):
        try:
            yield futures[future], future.result()
        except Exception as e:
            yield futures[future], e


@flow(name="evaluate", log_prints=False)
def evaluate(cfg: EvalConfig, progress: bool = True) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify them, and store every sample; returns a summary.
    The orchestration is :func:`prl.evaluation.evaluate.run_evaluation`'s, with this module's tasks as steps."""
    return ev.run_evaluation(cfg, progress=progress, log=_log, start=start_run, chunk=evaluate_chunk,
                             shard_results=shard_results)


def ray_worker_env() -> dict[str, str]:
    """What a Ray worker needs from this process: its flow's API server (the workers' task runs, concurrency
    limits and subflows report here instead of each starting a temporary server) and the caller's
    Prefect logging, vLLM, Hugging Face and PRL settings."""
    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    return {"PREFECT_API_URL": api_url, "RAY_USAGE_STATS_ENABLED": "0",
            **{k: v for k, v in os.environ.items() if k.startswith(("PREFECT_LOGGING", "VLLM_", "HF_", "PRL_"))}}


def ray_runner(address: str | None, cpus: int | None = None):
    """prefect-ray's ``RayTaskRunner``: join ``address`` or start a local runtime with ``cpus`` CPUs."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        from prefect_ray import RayTaskRunner
    except ImportError:
        raise EvalError("task_runner: 'ray' needs the optional extra: pip install -e '.[ray]' "
                        "(prefect-ray and ray)") from None
    init_kwargs: dict[str, Any] = {}
    if address is None:  # a local runtime: this machine's CPUs, no web dashboard
        init_kwargs = {"num_cpus": cpus or os.cpu_count(), "include_dashboard": False}
    return RayTaskRunner(address=address, init_kwargs=init_kwargs)


def ray_task_runner(cfg: EvalConfig):
    """prefect-ray's ``RayTaskRunner`` for ``cfg``: join ``cfg.ray_address`` or start a local runtime."""
    return ray_runner(cfg.ray_address, cfg.ray_cpus)


def evaluate_flow(cfg: EvalConfig):
    """The ``evaluate`` flow with the task runner ``cfg.task_runner`` asks for."""
    if cfg.task_runner == "ray":
        return evaluate.with_options(task_runner=ray_task_runner(cfg))
    return evaluate
