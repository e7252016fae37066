"""Evaluation that follows training: the ``evaluate-checkpoint`` and ``evaluate-pending`` flows.

``evaluate-checkpoint`` is what the deployment of that name runs when a trainer's
``prl.checkpoint.saved`` event arrives (a Prefect automation declared in ``prefect.yaml``: the
deployment's ``triggers:``). It evaluates the checkpoint's Hugging Face export on the benchmarks the
training run configured (or the deployment's parameters) into the run's store, as the eval run
``<run_id>@step<N>`` linked to the training run and step. The export's weights fingerprint is checked
against the event's and recorded in the run's config, so one checkpoint is one run: a second event
for it resumes the finished run and adds nothing, and other weights under that run id are refused.

``evaluate-pending`` (scheduled nightly in ``prefect.yaml``) evaluates every export under a folder
whose evaluation is missing or unfinished: what a server that was down when the events were emitted
did not see (and what a trainer launched without the ``train`` flow never announced).

:func:`emit_checkpoint_event` is the event itself: the ``train`` flow calls it for each export the training
script reports (``prl.training.exports.announcement``).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from prefect import flow

from flows.evaluate import evaluate_flow
from flows.run_log import log as _log

from prl.evaluation.config import EvalConfig, EvalError, model_fingerprint
from prl.store.db import Store
from prl.training import exports


def events_enabled() -> bool:
    """Events go to a Prefect server named by PREFECT_API_URL; without one there is nobody to trigger
    (a temporary in-process server would die with the run)."""
    return bool(os.environ.get("PREFECT_API_URL"))


def emit_checkpoint_event(record: dict[str, Any], log: Callable[[str], None] = _log) -> bool:
    """Emit ``prl.checkpoint.saved`` (:data:`prl.training.exports.CHECKPOINT_EVENT`) for an export record and
    wait (≤ 10 s) until it has been sent. Returns whether it was sent; a server that cannot be reached is
    reported, never fatal to training."""
    if not events_enabled():
        return False
    try:
        from prefect.events import emit_event
        from prefect.events.worker import EventsWorker

        event = emit_event(event=exports.CHECKPOINT_EVENT,
                           resource={"prefect.resource.id": exports.RESOURCE_PREFIX + record["run_id"],
                                     "prefect.resource.name": record["run_id"]},
                           payload=record)
        EventsWorker.drain_all(timeout=10)
        return event is not None
    except Exception as e:  # noqa: BLE001 - an unreachable server must not stop the training run
        log(f"[train] WARNING: checkpoint event for step {record['step']} not sent ({type(e).__name__}: {e})")
        return False


def checkpoint_eval_config(record: dict[str, Any], *, datasets: list[str] | None = None, n: int | None = None,
                           limit: int | None = None, db: str | None = None, engine: str | None = None) -> EvalConfig:
    """The evaluation of one export: the training run's evaluation settings unless overridden, the run id and
    sampling of the trainer's own evaluation of that step (so both resume one run); the dtype is the export's
    own (EvalConfig's 'auto': the export's config.json, which records the dtype the trainer held), as there."""
    ev = record.get("eval") or {}
    chosen = list(datasets or ev.get("datasets") or [])
    if not chosen:
        raise EvalError(f"{record['path']}: the training run configured no evaluation data sets (train.eval_datasets); "
                        "give the deployment's datasets parameter")
    return EvalConfig(model=record["path"], datasets=tuple(chosen), n=int(n or ev.get("n") or 4),
                      db=db or record["db"], run_id=exports.eval_run_id(record["run_id"], int(record["step"])),
                      engine=engine or ev.get("engine") or "vllm", limit=limit if limit is not None else ev.get("limit"),
                      max_tokens=int(ev.get("max_tokens") or 96), temperature=1.0, seed=int(ev.get("seed") or 0),
                      verifier_workers=1, parent_run_id=record["run_id"], train_step=int(record["step"]))


@flow(name="evaluate-checkpoint", log_prints=False)
def evaluate_checkpoint(path: str, run_id: str | None = None, step: int | None = None, fingerprint: str | None = None,
                        datasets: list[str] | None = None, n: int | None = None, limit: int | None = None,
                        db: str | None = None, engine: str | None = None) -> dict[str, Any]:
    """Evaluate the checkpoint export at ``path`` (the event's payload fills the other parameters)."""
    record = exports.read_record(path)
    for name, given in (("run_id", run_id), ("step", step)):
        if given is not None and str(given) != str(record[name]):
            raise EvalError(f"{path}: the event says {name} {given!r}, the export's record {record[name]!r}")
    now = model_fingerprint(path)
    for label, expected in (("the event's", fingerprint), ("the export record's", record["fingerprint"])):
        if expected and now != expected:
            raise EvalError(f"{path}: weights fingerprint {now} differs from {label} {expected}: the export was "
                            "overwritten after the checkpoint; evaluate it under another run id")
    cfg = checkpoint_eval_config(record, datasets=datasets, n=n, limit=limit, db=db, engine=engine)
    _log(f"evaluate-checkpoint: {record['run_id']} step {record['step']} ({path}, fingerprint {now}) → "
         f"{cfg.run_id} in {cfg.db}")
    return evaluate_flow(cfg)(cfg, progress=False)


@flow(name="evaluate-pending", log_prints=False)
def evaluate_pending(root: str = "runs", datasets: list[str] | None = None, n: int | None = None,
                     limit: int | None = None, engine: str | None = None) -> dict[str, Any]:
    """Evaluate every checkpoint export under ``root`` whose evaluation run is missing or unfinished."""
    done, ran, failed = [], [], []
    for record in exports.find_exports(root):
        run = exports.eval_run_id(record["run_id"], int(record["step"]))
        status = None
        try:
            found = Store(record["db"], create=False).records("get_run", run_id=run)
            status = found[0]["status"] if found else None
        except Exception:  # noqa: BLE001 - no store yet: nothing evaluated
            status = None
        if status == "finished":
            done.append(run)
            continue
        try:
            evaluate_checkpoint(record["path"], datasets=datasets, n=n, limit=limit, engine=engine)
            ran.append(run)
        except Exception as e:  # noqa: BLE001 - one bad export does not stop the others
            failed.append(f"{run}: {type(e).__name__}: {e}")
            _log(f"evaluate-pending: {failed[-1]}")
    _log(f"evaluate-pending under {root}: {len(ran)} evaluated, {len(done)} already finished, {len(failed)} failed")
    return {"evaluated": ran, "already_finished": done, "failed": failed}
