"""Evaluation: benchmarks → generation → Math-Verify → store (DESIGN §3, §4).

The steps as plain functions; ``flows/evaluate.py`` wraps them as a Prefect flow with a
progress bar, and ``prl eval`` runs that flow.

Resumable and idempotent at sample granularity. Problems are processed in chunks; each chunk
is generated, verified, and written in **one** store transaction, so a run killed at any point
has whole chunks stored and nothing partial. On restart with the same settings (the default
run id is derived from them) the run's stored samples are counted per problem and only
problems with fewer than ``n`` are generated again; inserts skip samples already stored. With
vLLM every prompt's samples depend only on (seed, prompt), so a resumed run stores the samples
an uninterrupted run would have. Restarting an existing run id with different sampling
settings or another model is refused.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .datasets import DATASETS, DatasetError, Problem, load_dataset
from .engines.base import ENGINE_KINDS, Engine, SamplingConfig, check_model_dir
from .relevance import answer_only, relevance
from .store import Store

DEFAULT_DB = "runs/store.duckdb"
TASK_RUNNERS = ("local", "ray")


class EvalError(ValueError):
    """The evaluation cannot run with these settings; the message says why and how to fix it."""


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run: which model, which problems, how sampled, where stored."""

    model: str
    """Model directory (Hugging Face layout with a chat template)."""
    datasets: tuple[str, ...] = ("math500",)
    """Bundled benchmarks (math500, minerva_math, olympiad_bench, aime24, amc23), synth_test, or .jsonl/.parquet paths."""
    n: int = 8
    """Samples per problem."""
    db: str = DEFAULT_DB
    """Store file (DuckDB); created if missing."""
    run_id: str | None = None
    """Run id; default: model directory name + a hash of the settings, so the same command resumes."""
    engine: str = "vllm"
    """Generation engine: 'vllm' or 'hf' (transformers.generate)."""
    limit: int | None = None
    """Only the first K problems of each data set."""
    max_tokens: int = 3072
    """Maximum new tokens per sample (the paper: 3072)."""
    temperature: float = 1.0
    """Sampling temperature (the paper: 1.0)."""
    top_p: float = 1.0
    """Nucleus sampling mass (the paper: 1.0)."""
    seed: int = 0
    """Sampling seed (vLLM: per prompt, so shards and resumed runs reproduce one run)."""
    chunk_problems: int = 32
    """Problems per generate → verify → store transaction (the unit of resumption)."""
    verifier_workers: int = 2
    """Math-Verify worker processes."""
    verify_timeout_s: int = 5
    """Math-Verify's own timeout per call (integer seconds); the hard wall-clock kill is 3× this."""
    strict: bool = True
    """Refuse user data files with bad rows (False: skip them and report how many)."""
    dtype: str = "float32"
    """Model dtype for generation."""
    max_model_len: int | None = None
    """Context length for the engine (default: the model's)."""
    parent_run_id: str | None = None
    """The training run this evaluation belongs to (evaluations made during training)."""
    train_step: int | None = None
    """The training step of the evaluated weights."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra engine options (e.g. {'in_process': True} for vLLM)."""
    task_runner: str = "local"
    """'local': chunks in this process (default). 'ray': shards fanned out to Ray workers (prefect-ray)."""
    shard_problems: int = 64
    """Problems per shard with the ray runner (one engine start and one Parquet file per shard)."""
    shard_dir: str | None = None
    """Directory for shard files (default: <store dir>/shards); must be shared by all workers of a cluster."""
    ray_address: str | None = None
    """Ray cluster to join ('auto', 'ray://host:10001'); default: start a local Ray runtime."""
    ray_cpus: int | None = None
    """CPUs of the local Ray runtime (default: all of this machine's)."""
    shard_cpus: float = 1.0
    """CPUs Ray reserves for each shard task (so at most ray_cpus / shard_cpus shards run at once)."""

    def __post_init__(self) -> None:
        def fail(name: str, msg: str) -> None:
            raise EvalError(f"{name}: {msg}")

        if not self.datasets:
            fail("datasets", "give at least one data set")
        for d in self.datasets:
            name, k = split_spec(d)
            if name not in DATASETS and Path(name).suffix not in (".jsonl", ".parquet"):
                fail("datasets", f"unknown {name!r}; use one of {', '.join(DATASETS)} or a .jsonl/.parquet path "
                     "(optionally NAME:K for its first K problems)")
        if len({split_spec(d)[0] for d in self.datasets}) != len(self.datasets):
            fail("datasets", "a data set is listed twice")
        for name in ("n", "chunk_problems", "verifier_workers", "max_tokens", "verify_timeout_s", "shard_problems"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail(name, f"expected an integer >= 1, got {v!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            fail("limit", f"expected an integer >= 1, got {self.limit!r}")
        if self.engine not in ENGINE_KINDS:
            fail("engine", f"expected one of {', '.join(ENGINE_KINDS)}, got {self.engine!r}")
        if not 0 <= self.temperature:
            fail("temperature", f"must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            fail("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.temperature == 0 and self.n > 1:
            fail("n", "greedy decoding (temperature 0) gives n identical samples; use n=1 or temperature > 0")
        if self.task_runner not in TASK_RUNNERS:
            fail("task_runner", f"expected one of {', '.join(TASK_RUNNERS)}, got {self.task_runner!r}")
        if self.task_runner == "local":
            for name in ("ray_address", "ray_cpus", "shard_dir"):
                if getattr(self, name) is not None:
                    fail(name, "only used with task_runner 'ray' (--task-runner ray)")
        if self.ray_cpus is not None and (isinstance(self.ray_cpus, bool) or not isinstance(self.ray_cpus, int)
                                          or self.ray_cpus < 1):
            fail("ray_cpus", f"expected an integer >= 1, got {self.ray_cpus!r}")
        if self.ray_address is not None and self.ray_cpus is not None:
            fail("ray_cpus", "sets the size of a local Ray runtime; a cluster given by ray_address has its own")
        if not (isinstance(self.shard_cpus, (int, float)) and not isinstance(self.shard_cpus, bool)
                and self.shard_cpus > 0):
            fail("shard_cpus", f"expected a number > 0, got {self.shard_cpus!r}")
        if (self.parent_run_id is None) != (self.train_step is None):
            fail("train_step", "give parent_run_id and train_step together (an evaluation of a training checkpoint)")

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(n=self.n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                              seed=self.seed, logprobs=False)

    def identity(self) -> dict[str, Any]:
        """What must not change when a run is resumed: the same model sampled the same way."""
        return {"model": str(Path(self.model).resolve()), "model_fingerprint": model_fingerprint(self.model),
                "n": self.n, "engine": self.engine, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "dtype": self.dtype}

    def resolved_run_id(self) -> str:
        if self.run_id:
            return self.run_id
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:8]
        return f"{Path(self.model).resolve().name}-{self.engine}-n{self.n}-{digest}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["datasets"] = list(self.datasets)
        d["model_fingerprint"] = model_fingerprint(self.model)
        d["run_id"] = self.resolved_run_id()
        return d


def split_spec(spec: str) -> tuple[str, int | None]:
    """'math500:20' → ('math500', 20); 'math500' → ('math500', None). Paths may contain ':' only before a suffix."""
    name, sep, k = spec.rpartition(":")
    if sep and k.isdigit() and int(k) > 0 and name:
        return name, int(k)
    return spec, None


def model_fingerprint(model_dir: str | Path) -> str | None:
    """A content fingerprint of a model directory's config and weights (sizes + first/last 4 MiB of each
    weight file), so an evaluation run id never mixes samples of different weights."""
    root = Path(model_dir)
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    cfg = root / "config.json"
    if cfg.exists():
        h.update(cfg.read_bytes())
    for f in sorted(p for pattern in ("*.safetensors", "*.bin", "*.pt") for p in root.glob(pattern)):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with f.open("rb") as fh:
            h.update(fh.read(4 << 20))
            if size > 8 << 20:
                fh.seek(-(4 << 20), 2)
                h.update(fh.read())
    return h.hexdigest()[:16]


# ─── steps ──────────────────────────────────────────────────────────────────────────────────

def load_problems(cfg: EvalConfig, log: Callable[[str], None] = print) -> list[Problem]:
    """Every problem of the configured data sets (first ``limit`` of each), in a stable order."""
    problems: list[Problem] = []
    for spec in cfg.datasets:
        name, k = split_spec(spec)
        k = k or cfg.limit
        found, skipped = load_dataset(name, strict=cfg.strict)
        if skipped:
            log(f"{name}: skipped {len(skipped)} bad rows (lenient): " + "; ".join(skipped[:3])
                + (" …" if len(skipped) > 3 else ""))
        if not found:
            raise DatasetError(f"{name}: no usable problems")
        problems.extend(found[:k] if k else found)
    keys = [(p.dataset, p.problem_id) for p in problems]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise DatasetError(f"{dup[0]}: problem id {dup[1]!r} occurs twice; ids must be unique per data set")
    return problems


def run_manifest_base(seed: int) -> dict[str, Any]:
    """What every run records: seed, package versions, git commit and dirty flag, Python, platform, argv."""
    from .generate import git_state, package_versions

    return {
        "seed": seed,
        "packages": {**package_versions(), "prefect": _version("prefect"), "duckdb": _version("duckdb"),
                     "math-verify": _version("math-verify"), "deepspeed": _version("deepspeed")},
        "git": git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "argv": sys.argv,
    }


def run_manifest(cfg: EvalConfig, problems: Sequence[Problem], engine_info: dict[str, Any] | None = None,
                 template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything needed to reproduce the run (DESIGN §4)."""
    from importlib import metadata

    from .prompts import SYSTEM_PROMPT, USER_SUFFIX

    counts: dict[str, int] = {}
    for p in problems:
        counts[p.dataset] = counts.get(p.dataset, 0) + 1
    return {
        **run_manifest_base(cfg.seed),
        "kind": "eval",
        "config": cfg.to_dict(),
        "sampling": cfg.sampling().to_dict(),
        "problems": counts,
        "engine": engine_info,
        "prompt": {"system": SYSTEM_PROMPT, "user_suffix": USER_SUFFIX, "add_generation_prompt": True, **(template or {})},
        "verifier": {"math_verify": metadata.version("math-verify"), "timeout_s": cfg.verify_timeout_s,
                     "wall_s": 3 * cfg.verify_timeout_s, "verdicts": "correct|wrong|no_answer|timeout|gold_unparsable|error"},
    }


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_resumable(store: Store, cfg: EvalConfig) -> list[tuple]:
    """The stored run row if ``cfg``'s run id exists (and may be resumed), [] if new; EvalError otherwise."""
    run_id = cfg.resolved_run_id()
    existing = store.rows("get_run", run_id=run_id)
    if existing:
        kind, old_config = existing[0][1], json.loads(existing[0][5] or "{}")
        if kind != "eval":
            raise EvalError(f"run_id: {run_id!r} is a {kind} run in {cfg.db}; choose another --run-id")
        old = {k: old_config.get(k) for k in cfg.identity()}
        old["model"] = str(Path(old_config.get("model", "")).resolve()) if old_config.get("model") else None
        diff = {k: (old[k], v) for k, v in cfg.identity().items() if old[k] != v}
        if diff:
            changes = ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in diff.items())
            raise EvalError(f"run_id: {run_id!r} already exists in {cfg.db} with other settings ({changes}); "
                            "resume it with the same settings or choose another --run-id")
    return existing


def preflight(cfg: EvalConfig) -> None:
    """Checks that need no engine and no flow: the model directory, user data files, resumability.
    ``prl eval`` runs them first so that input errors are one line, not a failed flow run."""
    check_model_dir(cfg.model)
    for spec in cfg.datasets:
        name, _k = split_spec(spec)
        if name not in DATASETS:
            load_dataset(name, strict=cfg.strict, flag_raw_only=False)
    if Path(cfg.db).exists():
        check_resumable(Store(cfg.db, create=False), cfg)


def register_run(store: Store, cfg: EvalConfig, problems: Sequence[Problem]) -> dict[str, Any]:
    """Record the run (status 'running') and its problems; refuse to resume with other settings.

    Returns {"run_id", "resumed"}.
    """
    run_id = cfg.resolved_run_id()
    existing = check_resumable(store, cfg)
    resumed = bool(existing)
    store.insert_problems(problems)
    config = cfg.to_dict()
    if existing:  # a resumed run keeps its config, with the union of data sets
        old_config = json.loads(existing[0][5] or "{}")
        config["datasets"] = sorted(set(old_config.get("datasets", [])) | set(config["datasets"]))
    manifest = run_manifest(cfg, problems)
    if existing:  # keep what the attempts that generated recorded about the engine and template
        old_manifest = json.loads(existing[0][6] or "{}")
        manifest["engine"] = old_manifest.get("engine")
        manifest["prompt"] = old_manifest.get("prompt", manifest["prompt"])
        manifest["attempts"] = old_manifest.get("attempts", 1) + 1
    store.execute("upsert_run", run_id=run_id, kind="eval", model=str(Path(cfg.model).resolve()), status="running",
                  config=config, manifest=manifest, parent_run_id=cfg.parent_run_id, train_step=cfg.train_step)
    return {"run_id": run_id, "resumed": resumed}


def pending_problems(store: Store, run_id: str, problems: Sequence[Problem], n: int) -> list[Problem]:
    """The problems with fewer than ``n`` stored samples in this run."""
    stored = {(d, pid): c for d, pid, c in store.rows("stored_counts_for_run", run_id=run_id)}
    return [p for p in problems if stored.get((p.dataset, p.problem_id), 0) < n]


def chunked(items: Sequence[Problem], size: int) -> list[list[Problem]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def start_engine(cfg: EvalConfig) -> Engine:
    from .engines.base import make_engine

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
    verdicts = pool.verify([(s.text, problems[s.prompt_index].gold) for s in samples])
    rows = []
    for s, v in zip(samples, verdicts):
        p = problems[s.prompt_index]
        rows.append({
            "run_id": run_id, "dataset": p.dataset, "problem_id": p.problem_id, "sample_idx": s.sample_index,
            "response": s.text, "extracted_answer": v.extracted, "verdict": v.verdict, "score": v.score,
            "n_tokens": s.n_tokens, "finish_reason": s.finish_reason, "verify_ms": round(v.ms, 3),
            "relevance": relevance(p.problem, s.text), "answer_only": answer_only(s.text),
        })
    return rows


def finish_run(store: Store, cfg: EvalConfig, run_id: str, problems: Sequence[Problem], engine_info, template,
               summary: dict[str, Any]) -> None:
    old = store.rows("get_run", run_id=run_id)
    old_manifest = json.loads(old[0][6]) if old and old[0][6] else {}
    if engine_info is None:  # nothing was generated this time: keep what the generating attempt recorded
        engine_info = old_manifest.get("engine")
        template = {k: v for k, v in old_manifest.get("prompt", {}).items() if k.startswith("template")} or None
    manifest = run_manifest(cfg, problems, engine_info, template)
    manifest["summary"] = summary
    manifest["attempts"] = old_manifest.get("attempts", 1)
    config = json.loads(old[0][5]) if old and old[0][5] else cfg.to_dict()
    store.execute("upsert_run", run_id=run_id, kind="eval", model=str(Path(cfg.model).resolve()), status="finished",
                  config=config, manifest=manifest, parent_run_id=cfg.parent_run_id, train_step=cfg.train_step)


def mark_failed(store: Store, run_id: str) -> None:
    """Status 'failed' (what is stored stays; rerunning the same command resumes)."""
    store.execute("set_run_status", run_id=run_id, status="failed")


def store_chunk(db: str, rows: list[dict[str, Any]]) -> int:
    """Write one chunk's samples in one transaction (idempotent); returns rows added."""
    return Store(db, create=False).insert_samples(rows)


@dataclass(frozen=True)
class Steps:
    """The steps :func:`run_evaluation` calls; the Prefect flow passes task-wrapped versions."""

    load_problems: Callable = load_problems
    register_run: Callable = lambda cfg, problems: register_run(Store(cfg.db), cfg, problems)  # noqa: E731
    generate_chunk: Callable = generate_chunk
    verify_chunk: Callable = verify_chunk
    store_chunk: Callable = store_chunk
    run_shards: Callable = None  # type: ignore[assignment]  # (cfg, run_id, shards, directory) → (shard, result|error) pairs
    ingest_shard: Callable = None  # type: ignore[assignment]  # (db, run_id, path) → rows added

    def __post_init__(self) -> None:
        from . import shards

        if self.run_shards is None:
            object.__setattr__(self, "run_shards", run_shards_here)
        if self.ingest_shard is None:
            object.__setattr__(self, "ingest_shard", shards.ingest_shard)


def run_shards_here(cfg: EvalConfig, run_id: str, shards, directory: Path):
    """Run shards one after another in this process; yields (shard, result or the exception)."""
    from .shards import run_shard

    for shard in shards:
        try:
            yield shard, run_shard(cfg, run_id, shard.problems, directory / f"{shard.name}.parquet")
        except Exception as e:  # reported by the caller after the other shards are stored
            yield shard, e


def run_evaluation(cfg: EvalConfig, *, progress: bool = True, engine: Engine | None = None,
                   steps: Steps = Steps(), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Generate ``cfg.n`` samples per problem, verify and store them; returns a summary.

    ``engine``: an already running engine serving ``cfg.model`` (training reuses its rollout
    engine); it is not closed. Otherwise one is started and closed here.
    """
    t0 = time.perf_counter()
    problems = steps.load_problems(cfg)
    info = steps.register_run(cfg, problems)
    run_id = info["run_id"]
    store = Store(cfg.db, create=False)
    if cfg.task_runner != "local":
        _ingest_leftover_shards(cfg, run_id, steps, log)
    pending = pending_problems(store, run_id, problems, cfg.n)
    done = len(problems) - len(pending)
    log(f"run {run_id} ({'resumed' if info['resumed'] else 'new'}), store {cfg.db}: {len(problems)} problems "
        f"from {', '.join(cfg.datasets)}; {done} already have {cfg.n} samples, {len(pending)} to generate")
    summary: dict[str, Any] = {"run_id": run_id, "db": cfg.db, "problems": len(problems), "skipped_complete": done,
                               "generated_problems": len(pending), "samples_added": 0}
    engine_info = template = None
    try:
        if pending and cfg.task_runner != "local":
            engine_info, template = _generate_sharded(cfg, run_id, pending, progress, summary, steps, log)
        elif pending:
            engine_info, template = _generate_all(cfg, run_id, pending, progress, summary, engine, steps, log)
    except BaseException:
        mark_failed(store, run_id)
        raise
    summary["total_s"] = round(time.perf_counter() - t0, 2)
    finish_run(store, cfg, run_id, problems, engine_info, template, summary)
    counts = store.rows("stored_counts_for_run", run_id=run_id)
    summary["stored_samples"] = sum(c for *_, c in counts)
    correct = store.rows("dataset_metrics_for_run", run_id=run_id)
    summary["average_at_n"] = {d: avg for d, _p, _n, avg, _pass in correct}
    log(f"run {run_id}: {summary['samples_added']} samples added, {summary['stored_samples']} stored "
        f"for {len(counts)} problems in {cfg.db} ({summary['total_s']:.0f} s)")
    return summary


def _generate_all(cfg: EvalConfig, run_id: str, pending, progress: bool, summary: dict[str, Any],
                  engine: Engine | None, steps: Steps, log: Callable[[str], None]):
    """Chunks of generate → verify → store with one progress bar; returns (engine info, template)."""
    from tqdm.auto import tqdm

    from .prompts import chat_template_text
    from .verifier import VerifierPool

    own = engine is None
    if own:
        t_engine = time.perf_counter()
        engine = start_engine(cfg)
        summary["engine_start_s"] = round(time.perf_counter() - t_engine, 2)
        log(f"engine {cfg.engine} ready in {summary['engine_start_s']:.1f} s")
    gen_s = ver_s = store_s = 0.0
    try:
        check_prompts(engine, pending)
        with VerifierPool(cfg.verifier_workers, timeout_s=cfg.verify_timeout_s,
                          wall_s=3.0 * cfg.verify_timeout_s) as pool, \
                tqdm(total=len(pending) * cfg.n, unit="sample", desc=f"eval {run_id}", disable=not progress,
                     file=sys.stderr, dynamic_ncols=True) as bar:
            sampling = cfg.sampling()
            for chunk in chunked(pending, cfg.chunk_problems):
                t = time.perf_counter()
                samples = steps.generate_chunk(engine, chunk, sampling)
                gen_s += time.perf_counter() - t
                t = time.perf_counter()
                rows = steps.verify_chunk(pool, run_id, chunk, samples)
                ver_s += time.perf_counter() - t
                t = time.perf_counter()
                summary["samples_added"] += steps.store_chunk(cfg.db, rows)
                store_s += time.perf_counter() - t
                bar.update(len(rows))
                bar.set_postfix(correct=f"{sum(r['verdict'] == 'correct' for r in rows)}/{len(rows)}")
        engine_info = engine.info()
        template = {"template_sha256": engine.template_hash(), "template": chat_template_text(engine.tokenizer)}
    finally:
        if own:
            engine.close()
    summary["seconds"] = {"generate": round(gen_s, 2), "verify": round(ver_s, 2), "store": round(store_s, 2)}
    return engine_info, template


def _ingest_leftover_shards(cfg: EvalConfig, run_id: str, steps: Steps, log: Callable[[str], None]) -> None:
    """Store shard files an earlier attempt wrote but did not ingest (idempotent)."""
    from .shards import leftover_shards, shard_dir

    files = leftover_shards(shard_dir(cfg.db, run_id, cfg.shard_dir))
    added = sum(steps.ingest_shard(cfg.db, run_id, str(f)) for f in files)
    if files:
        log(f"run {run_id}: {len(files)} shard file(s) from earlier attempts read, {added} samples added from them")


def _generate_sharded(cfg: EvalConfig, run_id: str, pending, progress: bool, summary: dict[str, Any],
                      steps: Steps, log: Callable[[str], None]):
    """Shards fanned out by ``steps.run_shards``; each finished shard's file is ingested as it arrives."""
    from tqdm.auto import tqdm

    from .shards import plan_shards, shard_dir

    directory = shard_dir(cfg.db, run_id, cfg.shard_dir)
    directory.mkdir(parents=True, exist_ok=True)
    shards = plan_shards(pending, cfg.shard_problems)
    log(f"run {run_id}: {len(shards)} shard(s) of <= {cfg.shard_problems} problems on the {cfg.task_runner} "
        f"task runner, shard files in {directory}")
    engine_info = template = None
    failed: list[tuple[Any, BaseException]] = []
    seconds = {"engine_start": 0.0, "generate": 0.0, "verify": 0.0, "store": 0.0}
    with tqdm(total=len(pending) * cfg.n, unit="sample", desc=f"eval {run_id}", disable=not progress,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for shard, result in steps.run_shards(cfg, run_id, shards, directory):
            if isinstance(result, BaseException):
                failed.append((shard, result))
                log(f"shard {shard.name} failed: {type(result).__name__}: {result}")
                continue
            t = time.perf_counter()
            summary["samples_added"] += steps.ingest_shard(cfg.db, run_id, result["path"])
            seconds["store"] += time.perf_counter() - t
            for k, v in result["seconds"].items():
                seconds[k] = seconds.get(k, 0.0) + v
            engine_info, template = engine_info or result["engine"], template or result["template"]
            bar.update(result["rows"])
            bar.set_postfix(correct=f"{result['correct']}/{result['rows']}", shards=f"{bar.n // cfg.n}")
    summary["shards"] = {"planned": len(shards), "failed": len(failed), "dir": str(directory)}
    summary["seconds"] = {k: round(v, 2) for k, v in seconds.items()}  # summed over shards (they overlap)
    if failed:
        shard, err = failed[0]
        raise EvalError(f"{len(failed)} of {len(shards)} shard(s) failed (first: {shard.name}: "
                        f"{type(err).__name__}: {err}); the other shards are stored — rerun the same command "
                        "to generate only what is missing") from err
    return engine_info, template
