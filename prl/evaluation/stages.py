"""The stages of an evaluation run as plain functions: load problems → record the run's start → per chunk
of problems: generate → verify → store (one transaction) → record the run's finish (or status).

``prl.evaluation.evaluate.run_evaluation`` chains them in this process; ``prl.evaluation.shards``
runs the chunk steps on a worker; ``flows/evaluate.py`` runs them as Prefect tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from prl.data.datasets import DATASETS, DatasetError, Problem, flag_golds, load_dataset
from prl.evaluation.config import EvalConfig, EvalError, split_spec
from prl.generation.engines import Engine, SamplingConfig, check_model_dir, make_engine
from prl.generation.prompts import prompt_record
from prl.grading.relevance import graded_fields, register_fit_index
from prl.grading.verifier import VerifierSettings
from prl.manifest import run_manifest
from prl.store.db import Store


def load_problems(cfg: EvalConfig, log: Callable[[str], None] = print) -> list[Problem]:
    """Every problem of the configured data sets (first ``limit`` of each), in a stable order."""
    problems: list[Problem] = []
    for spec in cfg.datasets:
        name, k = split_spec(spec)
        k = k or cfg.limit
        found, skipped = load_dataset(name, strict=cfg.strict, flag_raw_only=False)
        if name not in DATASETS and found:
            register_fit_index(found[0].dataset, found)  # suspicious passes of a user file: fit among its problems
        if skipped:
            log(f"{name}: skipped {len(skipped)} bad rows (lenient): " + "; ".join(skipped[:3])
                + (" …" if len(skipped) > 3 else ""))
        if not found:
            raise no_usable_problems(name, skipped)
        problems.extend(flag_golds(found[:k] if k else found))  # only the golds this run uses are parsed
    keys = [(p.dataset, p.problem_id) for p in problems]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise DatasetError(f"{dup[0]}: problem id {dup[1]!r} occurs twice; ids must be unique per data set")
    return problems


def no_usable_problems(name: str, skipped: Sequence[str]) -> DatasetError:
    """The error of a data set without one usable problem (an empty file, or every row skipped with --lenient)."""
    why = (f"all {len(skipped)} rows were bad and skipped (--lenient), the first: {skipped[0]}" if skipped
           else "it holds no rows")
    return DatasetError(f"{name}: no usable problems: {why}")


def eval_manifest(cfg: EvalConfig, problems: Sequence[Problem], engine_info: dict[str, Any] | None = None,
                 template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything needed to reproduce the run (the manifest of docs/architecture.md §The store): the
    common run manifest plus sampling, problems, engine, prompt and verifier."""
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.dataset] = counts.get(p.dataset, 0) + 1
    return {
        **run_manifest("eval", config=cfg.to_dict(), seed=cfg.seed),
        "sampling": cfg.sampling().to_dict(),
        "problems": counts,
        "engine": engine_info,
        "prompt": prompt_record(template),
        "verifier": VerifierSettings.of(cfg).manifest(),
    }


def check_resumable(store: Store, cfg: EvalConfig) -> list[dict[str, Any]]:
    """The stored run record if ``cfg``'s run id exists (and may be resumed), [] if new; EvalError otherwise."""
    run_id = cfg.resolved_run_id()
    existing = store.records("get_run", run_id=run_id)
    if existing:
        kind, old_config = existing[0]["kind"], json.loads(existing[0]["config"] or "{}")
        if kind != "eval":
            raise EvalError(f"run_id: {run_id!r} is a {kind} run in {cfg.db}; choose another --run")
        old = {k: old_config.get(k) for k in cfg.identity()}
        old["model"] = str(Path(old_config.get("model", "")).resolve()) if old_config.get("model") else None
        diff = {k: (old[k], v) for k, v in cfg.identity().items() if old[k] != v}
        if diff:
            changes = ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in diff.items())
            hint = (f" (--dtype auto is the checkpoint's own dtype; --dtype {diff['dtype'][0]} resumes this run)"
                    if "dtype" in diff and diff["dtype"][0] else "")
            raise EvalError(f"run_id: {run_id!r} already exists in {cfg.db} with other settings ({changes}); "
                            f"resume it with the same settings or choose another --run{hint}")
    return existing


def preflight(cfg: EvalConfig) -> None:
    """Checks that need no engine and no flow: the model directory, user data files, resumability.
    ``prl eval`` runs them first so that input errors are one line, not a failed flow run."""
    check_model_dir(cfg.model)
    for spec in cfg.datasets:
        name, _k = split_spec(spec)
        if name not in DATASETS:
            found, skipped = load_dataset(name, strict=cfg.strict, flag_raw_only=False)
            if not found:
                raise no_usable_problems(name, skipped)
    if Path(cfg.db).exists():
        check_resumable(Store(cfg.db, create=False), cfg)


def record_run_start(store: Store, cfg: EvalConfig, problems: Sequence[Problem]) -> dict[str, Any]:
    """Record the run (status 'running') and its problems; refuse to resume with other settings.

    Returns {"run_id", "resumed"}.
    """
    run_id = cfg.resolved_run_id()
    existing = check_resumable(store, cfg)
    resumed = bool(existing)
    store.insert_problems(problems)
    config = cfg.to_dict()
    if existing:  # a resumed run keeps its config, with the union of data sets
        old_config = json.loads(existing[0]["config"] or "{}")
        config["datasets"] = sorted(set(old_config.get("datasets", [])) | set(config["datasets"]))
    manifest = eval_manifest(cfg, problems)
    if existing:  # keep what the attempts that generated recorded about the engine and template
        old_manifest = json.loads(existing[0]["manifest"] or "{}")
        manifest["engine"] = old_manifest.get("engine")
        manifest["prompt"] = old_manifest.get("prompt", manifest["prompt"])
        manifest["attempts"] = old_manifest.get("attempts", 1) + 1
    store.execute("upsert_run", run_id=run_id, kind="eval", model=str(Path(cfg.model).resolve()), status="running",
                  config=config, manifest=manifest, parent_run_id=cfg.parent_run_id, train_step=cfg.train_step)
    return {"run_id": run_id, "resumed": resumed}


def pending_problems(store: Store, run_id: str, problems: Sequence[Problem], n: int) -> list[Problem]:
    """The problems with fewer than ``n`` stored samples in this run."""
    stored = {(r["dataset"], r["problem_id"]): r["stored"] for r in store.records("stored_counts_for_run", run_id=run_id)}
    return [p for p in problems if stored.get((p.dataset, p.problem_id), 0) < n]


def chunked(items: Sequence[Problem], size: int) -> list[list[Problem]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def start_engine(cfg: EvalConfig) -> Engine:
    check_model_dir(cfg.model)
    kwargs = dict(cfg.engine_kwargs)
    if cfg.engine == "vllm":
        kwargs.setdefault("in_process", None)  # CPU: in-process (~2 s start); GPU: vLLM's own processes
    return make_engine(cfg.engine, cfg.model, dtype=cfg.dtype, seed=cfg.seed, max_model_len=cfg.max_model_len, **kwargs)


def check_prompts(engine: Engine, problems: Sequence[Problem]) -> None:
    """Refuse, before generating anything, problems whose prompt does not fit the engine's context."""
    prompts = engine.build_prompts([p.problem for p in problems])
    lengths = [len(x) for x in engine.tokenizer(prompts, add_special_tokens=False)["input_ids"]]
    limit = engine.max_model_len
    too_long = [(p, n) for p, n in zip(problems, lengths) if limit is not None and n >= limit]
    if too_long:
        listed = ", ".join(f"{p.problem_id} ({n} tokens)" for p, n in too_long[:5])
        raise EvalError(f"{len(too_long)} prompt(s) do not fit the model's context of {limit} tokens: {listed}"
                        f"{' …' if len(too_long) > 5 else ''}; use a model with a longer context, a larger "
                        "max_model_len, or leave those data sets out")


def generate_chunk(engine: Engine, problems: Sequence[Problem], sampling: SamplingConfig) -> list:
    """``sampling.n`` samples for each problem, ordered by problem then sample."""
    prompts = engine.build_prompts([p.problem for p in problems])
    return engine.generate(prompts, sampling, progress=False)


def verify_chunk(pool, run_id: str, problems: Sequence[Problem], samples: Sequence) -> list[dict[str, Any]]:
    """Store rows for the samples of a chunk: verdict, extracted answer, relevance."""
    verdicts = pool.verify([(s.text, problems[s.prompt_index].gold_normalized) for s in samples])
    rows = []
    for s, v in zip(samples, verdicts):
        p = problems[s.prompt_index]
        rows.append({
            "run_id": run_id, "dataset": p.dataset, "problem_id": p.problem_id, "sample_idx": s.sample_index,
            "response": s.text, "n_tokens": s.n_tokens, "finish_reason": s.finish_reason,
            **graded_fields(p, s.text, v),
        })
    return rows


def record_run_finish(store: Store, cfg: EvalConfig, run_id: str, problems: Sequence[Problem], engine_info, template,
                      summary: dict[str, Any]) -> None:
    """Record the run as finished: its manifest with the engine, template and summary (an attempt that generated
    nothing keeps what the generating attempt recorded) and the config it was started with."""
    old = store.records("get_run", run_id=run_id)
    old_manifest = json.loads(old[0]["manifest"]) if old and old[0]["manifest"] else {}
    if engine_info is None:  # nothing was generated this time: keep what the generating attempt recorded
        engine_info = old_manifest.get("engine")
        template = {k: v for k, v in old_manifest.get("prompt", {}).items() if k.startswith("template") or k == "format"} or None
    manifest = eval_manifest(cfg, problems, engine_info, template)
    manifest["summary"] = summary
    manifest["attempts"] = old_manifest.get("attempts", 1)
    config = json.loads(old[0]["config"]) if old and old[0]["config"] else cfg.to_dict()
    store.execute("upsert_run", run_id=run_id, kind="eval", model=str(Path(cfg.model).resolve()), status="finished",
                  config=config, manifest=manifest, parent_run_id=cfg.parent_run_id, train_step=cfg.train_step)


def record_run_status(store: Store, run_id: str, status: str) -> None:
    """Only the run's status (a failed run: what is stored stays; rerunning the same command resumes)."""
    store.execute("set_run_status", run_id=run_id, status=status)


def store_chunk(db: str, rows: list[dict[str, Any]]) -> int:
    """Write one chunk's samples in one transaction (idempotent); returns rows added."""
    return Store(db, create=False).insert_samples(rows)
