"""The plain steps of a study that the ``study`` flow (``flows/study.py``) chains: register the study,
make its base model, say which (cell, seed) jobs are left, and record each job's progress.

A job is finished when its training run and the evaluation of its final policy are both finished in
the store; nothing else counts, so a study killed at any point and rerun with the same command does
only what is missing (training resumes from its last checkpoint, evaluation from its stored samples).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from prl_core.config import ConfigError

from prl.manifest import run_manifest
from prl.store.db import Store
from prl.studies.config import Cell, Study
from prl.training.config import WarmStart


def register_study(study: Study) -> Store:
    """Record the study (status running) and one row per job; refuse an existing study id whose cells or
    seeds differ (its finished jobs would be mixed with other settings)."""
    Path(study.settings.out_dir).mkdir(parents=True, exist_ok=True)
    store = Store(study.settings.store)
    config = study.to_dict()
    old = store.records("get_study", study_id=study.id)
    if old:
        before = json.loads(old[0]["config"] or "{}")
        if _identity(before) != _identity(config):
            raise ConfigError(
                f"{study.source}: study {study.id!r} already exists in {study.settings.store} with other cells, seeds "
                "or base settings; rerun it with the file it was started with, or give this one another study.id")
    holder = old[0] if old else None
    if holder and holder["status"] == "running":
        h = (json.loads(holder["manifest"] or "{}").get("holder") or {})
        if h.get("host") == socket.gethostname() and h.get("pid") != os.getpid() and _alive(h.get("pid")):
            raise ConfigError(f"study {study.id!r} is running in process {h['pid']} on this machine; wait for it to "
                              f"finish, or stop it (kill {h['pid']}) and rerun the same command to finish what is left")
    manifest = {**run_manifest("study", config=config, seed=None),
                "holder": {"host": socket.gethostname(), "pid": os.getpid()}}
    store.execute("upsert_study", study_id=study.id, status="running", config=config, manifest=manifest)
    for cell, seed in study.jobs():
        if not store.records("study_cell_status", study_id=study.id, cell=cell.name, seed=seed):
            store.execute("upsert_study_cell", study_id=study.id, cell=cell.name, seed=seed,
                          train_run_id=cell.run_id(study.id, seed), eval_run_id=None, varied=list(cell.varied),
                          status="pending")
    return store


def _alive(pid: int | None) -> bool:
    """Whether a process of that id runs here and is a prl command (a recycled pid is not a study)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"prl" in cmdline


def _identity(config: dict[str, Any]) -> str:
    """What must not change between runs of one study: the cells, the base, the seeds and the evaluation."""
    s = config.get("study", {})
    ws = s.get("warm_start")
    ws = None if ws is None else {**asdict(WarmStart()), **ws}  # a study stored before a field was added
    return json.dumps({"cells": config.get("cells"), "base": config.get("base"), "seeds": s.get("seeds"),
                       "eval": s.get("eval"), "warm_start": ws}, sort_keys=True, default=str)


def base_model(study: Study, log: Callable[[str], None] = print, progress: bool = True) -> str:
    """The model every cell starts from: base.train.model, or the embedded tiny model warm-started once
    for the study (``prl.training.sft.warm_start``; reused when its report exists)."""
    ws = study.settings.warm_start
    if ws is None:
        return study.cells[0].run.train.model
    from prl.training.sft import warm_start

    return warm_start(Path(study.settings.out_dir) / "models", ws, log=lambda msg: log(f"study {study.id}: {msg}"),
                      progress=progress)


def job_finished(store: Store, study: Study, cell: Cell, seed: int) -> bool:
    """True when this job's training run and its final evaluation are both finished in the store."""
    rows = store.records("study_cells_for_study", study_id=study.id)
    row = next((r for r in rows if r["cell"] == cell.name and r["seed"] == seed), None)
    return bool(row and row["status"] == "finished" and row["train_status"] == "finished"
                and row["eval_status"] == "finished")


def pending_jobs(store: Store, study: Study) -> list[tuple[Cell, int]]:
    return [(c, s) for c, s in study.jobs() if not job_finished(store, study, c, s)]


def set_job_status(study: Study, cell: Cell, seed: int, status: str, eval_run_id: str | None = None) -> None:
    store = Store(study.settings.store)
    if status == "finished":
        store.execute("finish_study_cell", study_id=study.id, cell=cell.name, seed=seed, eval_run_id=eval_run_id)
    else:
        store.execute("set_study_cell_status", study_id=study.id, cell=cell.name, seed=seed, status=status)


def finish_study(study: Study) -> str:
    """Mark the study finished when every job is; returns its status."""
    store = Store(study.settings.store)
    status = "finished" if not pending_jobs(store, study) else "failed"
    store.execute("set_study_status", study_id=study.id, status=status)
    return status
