"""Hugging Face exports of the policy: what makes evaluation follow training.

A DeepSpeed checkpoint (:mod:`prl.training.resume`) holds the optimizer and the ZeRO partitions; vLLM
cannot load it. At every checkpoint the trainer also writes the policy as a Hugging Face directory,
``OUT/exports/step_N``, with an :data:`EXPORT_RECORD` beside the weights (run id, step, path, weights
fingerprint, store and the run's evaluation settings), and reports the record to whoever launched it
(:func:`announcement`: one line on the training script's stdout). The ``train`` flow turns each report into
the Prefect event :data:`CHECKPOINT_EVENT` with the record as payload
(``flows.export_evaluation.emit_checkpoint_event``); the ``evaluate-checkpoint`` deployment
(``prefect.yaml``) is triggered by the event, and the nightly ``evaluate-pending`` deployment finds the
exports that no evaluation has covered yet. The evaluation's run id is :func:`eval_run_id` and its config
records the fingerprint, so the same checkpoint is never evaluated into two runs, and an event delivered
twice resumes a finished run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from prl.evaluation.config import model_fingerprint

CHECKPOINT_EVENT = "prl.checkpoint.saved"
"""The Prefect event the ``train`` flow emits for each checkpoint export (the automation's trigger)."""
RESOURCE_PREFIX = "prl.train-run."
"""The event's resource id is this prefix + the training run id."""
EXPORTS_DIR = "exports"
EXPORT_RECORD = "prl_export.json"


def save_policy(model, tokenizer, target: Path, state_dict: dict | None = None) -> None:
    """``model`` and ``tokenizer`` as a Hugging Face directory ``target``, replaced atomically (written beside it,
    then renamed): what vLLM, evaluations and users load. ``state_dict``: the weights when the module's own are
    partitioned (ZeRO-3: :func:`prl.training.weight_sync.policy_state_dict`); None: the module's own."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def export_dir(out_dir: str | Path, step: int) -> Path:
    return Path(out_dir) / EXPORTS_DIR / f"step_{step:06d}"


def eval_run_id(run_id: str, step: int) -> str:
    """The evaluation run of a training run's checkpoint (the same id the trainer's own evaluations use)."""
    return f"{run_id}@step{step}"


def write_record(target: Path, *, run_id: str, step: int, db: str, evaluation: dict[str, Any]) -> dict[str, Any]:
    """Write ``target/prl_export.json`` for an export whose weights are in place; returns the record."""
    record = {"run_id": run_id, "step": step, "path": str(target.resolve()), "fingerprint": model_fingerprint(target),
              "db": str(Path(db).resolve()), "eval": evaluation, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = target / (EXPORT_RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, target / EXPORT_RECORD)
    return record


def read_record(export: str | Path) -> dict[str, Any]:
    p = Path(export) / EXPORT_RECORD
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: not a checkpoint export (no {EXPORT_RECORD})") from None


ANNOUNCEMENT = "prl-export-saved "
"""The prefix of the stdout line by which the training script reports an export record (:func:`announcement`)."""


def announcement(record: dict[str, Any]) -> str:
    """The one line (no newline) that reports an export ``record`` to the process that launched the trainer."""
    return ANNOUNCEMENT + json.dumps(record, default=str)


def read_announcement(line: str) -> dict[str, Any] | None:
    """The export record an :func:`announcement` line carries; None for any other line."""
    if not line.startswith(ANNOUNCEMENT):
        return None
    try:
        return json.loads(line[len(ANNOUNCEMENT):])
    except ValueError:
        return None


def find_exports(root: str | Path) -> list[dict[str, Any]]:
    """The export records under ``root`` (any depth), oldest step first within each run."""
    out = []
    for p in sorted(Path(root).glob(f"**/{EXPORTS_DIR}/step_*/{EXPORT_RECORD}")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: (r["run_id"], r["step"]))
