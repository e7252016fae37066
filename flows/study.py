"""The ``study`` flow: a grid of training settings (cells) × seeds, each job a training run and the
evaluation of its final policy, then the study report.

    load and check the study → register it → base model (warm start, once) →
    [per pending (cell, seed), under the study's Prefect concurrency limit: subflow ``study-cell``:
     train (resuming from its last checkpoint) → evaluate its final policy → mark finished] →
    report (Markdown + HTML files and a Prefect artifact)

Concurrency is a Prefect global concurrency limit named ``study-<id>`` with ``study.concurrency``
slots; every job holds one slot while it runs, so a second ``prl study`` of the same study (or the
same jobs submitted from another machine) never trains more at once. On the local task runner the
jobs run in threads, in order (the first seed of every cell first); with ``task_runner='ray'`` they
are Ray tasks (prefect-ray's ``RayTaskRunner``), still under the same limit. Every task and subflow
run is tagged ``study:<id>`` (and ``cell:<name>``). Rerunning a killed study skips its finished jobs:
the store, not Prefect's cache, says what is finished.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from prefect import flow, get_client, tags, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner
from tqdm.auto import tqdm

from flows.evaluate import ray_runner, ray_worker_env
from flows.run_log import log as _log
from flows.train import launch

from prl.studies import report as rp
from prl.studies.config import Study, load_study
from prl.studies.run import base_model, finish_study, pending_jobs, register_study, set_job_status


def limit_name(study: Study) -> str:
    """The study's Prefect global concurrency limit."""
    return f"study-{study.id}"


@flow(name="study-cell", log_prints=False)
def study_cell(config: str, cell: str, seed: int, model: str, study_id: str | None = None,
               progress: bool = False) -> dict[str, Any]:
    """One job: train the cell at this seed (resuming from its last checkpoint), its trainer evaluating the
    final policy into the study's store, then mark the job finished."""
    study = load_study(config, study_id=study_id)
    c = study.cell(cell)
    rc = study.cell_config(c, seed, model)
    set_job_status(study, c, seed, "running")
    try:
        result = launch(rc, resume=True, progress=progress)
    except BaseException:
        set_job_status(study, c, seed, "failed")
        raise
    eval_run = (result.get("final_eval") or {}).get("run_id") or study.eval_run_id(c, seed)
    set_job_status(study, c, seed, "finished", eval_run)
    return {"cell": cell, "seed": seed, "train_run_id": result["run_id"], "eval_run_id": eval_run,
            "resumed_from_step": result.get("resumed_from_step")}


@task(name="study-job", cache_policy=NO_CACHE)
def study_job(config: str, cell: str, seed: int, model: str, limit: str, study_id: str | None = None,
              cwd: str | None = None) -> dict[str, Any]:
    """Hold one slot of the study's concurrency limit while the job's subflow runs. ``cwd``: the directory
    the study's relative paths are relative to (a Ray worker starts elsewhere)."""
    if cwd and os.getcwd() != cwd:
        os.chdir(cwd)
    with concurrency(limit, occupy=1, strict=True, lease_duration=120):
        return study_cell.with_options(flow_run_name=f"{cell}-s{seed}")(config, cell, seed, model, study_id)


def reset_limit(name: str, slots: int) -> None:
    """Create the study's concurrency limit afresh with ``slots`` slots. A study killed while a job held a slot
    leaves that slot leased until the lease expires; recreating the limit drops it, so the rerun starts at
    once. (register_study has refused to start while another process of this study is alive here.)"""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.delete_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            pass
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


@flow(name="study", log_prints=False)
def study(config: str, study_id: str | None = None, task_runner: str = "local", progress: bool = True
          ) -> dict[str, Any]:
    """Run every job of the study ``config`` that is not finished, then write its report."""
    st = load_study(config, study_id=study_id)
    store = register_study(st)
    todo = pending_jobs(store, st)
    done = len(st.jobs()) - len(todo)
    _log(f"study {st.id}: {len(st.cells)} cells × {len(st.settings.seeds)} seeds = {len(st.jobs())} jobs; "
         f"{done} finished, {len(todo)} to run (concurrency {st.settings.concurrency}, store {st.settings.store})")
    for c, s in st.jobs():
        if (c, s) not in todo:
            _log(f"study {st.id}: {c.name} seed {s}: finished, skipped")
    model = base_model(st, log=_log, progress=progress) if todo else ""
    limit = limit_name(st)
    reset_limit(limit, st.settings.concurrency)
    failures: list[str] = []
    bar = tqdm(total=len(st.jobs()), initial=done, desc=f"study {st.id}", unit="job", disable=not progress)
    futures = []
    with _worker_env(task_runner), tags(f"study:{st.id}"):
        for c, s in todo:
            with tags(f"cell:{c.name}"):
                futures.append(((c, s), study_job.with_options(name=f"job-{c.name}-s{s}").submit(
                    str(Path(config).resolve()), c.name, s, model, limit, study_id, os.getcwd())))
    for (c, s), fut in futures:
        try:
            r = fut.result()
            _log(f"study {st.id}: {c.name} seed {s} finished (eval run {r['eval_run_id']})")
        except Exception as e:  # noqa: BLE001 - the other jobs go on; the study reports what failed
            failures.append(f"{c.name} seed {s}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            _log(f"study {st.id}: {failures[-1]}")
        bar.update(1)
    wait([f for _, f in futures])
    bar.close()
    status = finish_study(st)
    rep = rp.write_report(st.id, st.settings.store, st.settings.out_dir, embedded=st.settings.warm_start is not None)
    create_markdown_artifact(key=f"study-{_slug(st.id)}", markdown=rep["markdown"],
                             description=f"study {st.id} report")
    _log(f"study {st.id}: {status}; report {rep['files']['md']} and {rep['files']['html']}")
    if failures:
        raise RuntimeError(f"study {st.id}: {len(failures)} job(s) failed ({'; '.join(failures)}); the others are "
                           f"stored. Rerun the same command to retry only those")
    return {"study_id": st.id, "status": status, "jobs": len(st.jobs()), "ran": len(todo), "skipped": done,
            "db": st.settings.store, "report": rep["files"]}


def _worker_env(task_runner: str):
    """Ray workers get this flow's API server and the caller's settings (:func:`ray_worker_env`); threads
    share this process's."""
    if task_runner != "ray":
        return contextlib.nullcontext()
    from prefect_ray.context import remote_options

    return remote_options(num_cpus=1, runtime_env={"env_vars": ray_worker_env()})


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "study"


def study_flow(task_runner: str, concurrency_slots: int, ray_address: str | None = None):
    """The ``study`` flow with its task runner: threads (``local``; one per concurrency slot, jobs in
    order) or prefect-ray's ``RayTaskRunner`` (``ray``)."""
    if task_runner == "ray":
        return study.with_options(task_runner=ray_runner(ray_address))
    if task_runner != "local":
        raise ValueError(f"task_runner: expected 'local' or 'ray', got {task_runner!r}")
    return study.with_options(task_runner=ThreadPoolTaskRunner(max_workers=concurrency_slots))
