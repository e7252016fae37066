"""The typed configuration of one evaluation run (``prl eval``'s flags come from its fields) and of a
rescore (``prl rescore``'s)."""

from __future__ import annotations

from prl_core.errors import UserError
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prl.data.datasets import DATASETS
from prl.generation.engines.base import ENGINE_KINDS, EngineError, SamplingConfig, read_model_config
from prl.grading.verifier import VerifierSettings
from prl.manifest import run_name
from prl.options import NO_FLAG, include_fields, option, same_as
from prl.store.db import DEFAULT_STORE

TASK_RUNNERS = ("local", "ray")
MODEL_DTYPES = ("float32", "bfloat16", "float16")
"""The dtypes an evaluation generates in (``EvalConfig.dtype`` after resolution)."""
EVAL_DTYPES = ("auto", *MODEL_DTYPES)
"""What ``EvalConfig.dtype`` (``prl eval --dtype``) accepts: 'auto' is the checkpoint's own."""


class EvalError(UserError, ValueError):
    """The evaluation cannot run with these settings; the message says why and how to fix it."""


@dataclass(frozen=True)
@include_fields(VerifierSettings)
class EvalConfig:
    """One evaluation run: which model, which problems, how sampled, where stored (and, from
    ``VerifierSettings``, ``verifier_workers`` and ``verify_timeout_s``)."""

    model: str
    """Model directory (Hugging Face layout with a chat template)."""
    datasets: tuple[str, ...] = option(("math500",), spelling="dataset")
    """Bundled benchmarks (math500, minerva_math, olympiad_bench, aime24, amc23), synth_test, or .jsonl/.parquet paths."""
    n: int = same_as(SamplingConfig, "n")
    db: str = DEFAULT_STORE
    """Store file (DuckDB); created if missing."""
    run_id: str | None = option(None, spelling="run")
    """Run id; default: the model directory's name, the data sets, the engine, n and a hash of the settings and data sets (the same command resumes; other data sets are another run)."""
    engine: str = "vllm"
    """Generation engine: 'vllm' or 'hf' (transformers.generate)."""
    limit: int | None = None
    """Only the first K problems of each data set."""
    max_tokens: int = same_as(SamplingConfig, "max_tokens")
    temperature: float = same_as(SamplingConfig, "temperature")
    top_p: float = same_as(SamplingConfig, "top_p")
    seed: int = same_as(SamplingConfig, "seed")
    chunk_problems: int = 32
    """Problems per generate → verify → store transaction (the unit of resumption)."""
    strict: bool = True
    """Refuse user data files with bad rows (False: skip them and report how many)."""
    dtype: str = "auto"
    """Model dtype for generation: 'auto' is the checkpoint's own (its config.json's `dtype`, or `torch_dtype` in
    older files; float32 when it names none), resolved when the config is made, before the run id, manifest and
    engine use it; float32, bfloat16 or float16 override it."""
    max_model_len: int | None = None
    """Context length for the engine (default: the model's)."""
    parent_run_id: str | None = field(default=None, metadata=NO_FLAG)
    """The training run this evaluation belongs to (evaluations made during training)."""
    train_step: int | None = field(default=None, metadata=NO_FLAG)
    """The training step of the evaluated weights."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict, metadata=NO_FLAG)
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
    shard_cpus: float = field(default=1.0, metadata=NO_FLAG)
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
        if self.dtype not in EVAL_DTYPES:
            fail("dtype", f"expected one of {', '.join(EVAL_DTYPES)}, got {self.dtype!r}")
        if self.dtype == "auto":  # concrete before anything reads it: the run id, the manifest, the engine
            object.__setattr__(self, "dtype", model_dtype(self.model))

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(n=self.n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                              seed=self.seed, logprobs=False)

    def identity(self) -> dict[str, Any]:
        """What must not change when a run is resumed: the same model sampled the same way."""
        return {"model": str(Path(self.model).resolve()), "model_fingerprint": model_fingerprint(self.model),
                "n": self.n, "engine": self.engine, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "dtype": self.dtype}

    def resolved_run_id(self) -> str:
        """``run_id``, or the default: what was evaluated, by name (model directory, data sets, engine, n) and a hash
        of the :meth:`identity` and the data sets (a user file by its resolved path), so that the same command
        resumes its run and another data set starts another one. A ``:K`` or ``limit`` is not part of it: more
        problems of the same data sets extend the run."""
        if self.run_id:
            return self.run_id
        names = sorted({split_spec(d)[0] for d in self.datasets})
        sets = [n if n in DATASETS else str(Path(n).resolve()) for n in names]
        digest = hashlib.sha256(json.dumps({**self.identity(), "datasets": sets}, sort_keys=True).encode()
                                ).hexdigest()[:8]
        label = "+".join(n if n in DATASETS else Path(n).stem for n in names)
        if len(label) > 40:  # five benchmarks and a file: the first ones, then how many more
            shown = [n if n in DATASETS else Path(n).stem for n in names][:2]
            label = "+".join(shown) + f"+{len(names) - len(shown)}more"
        return run_name(Path(self.model).resolve().name, label, self.engine, f"n{self.n}", digest)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["datasets"] = list(self.datasets)
        d["model_fingerprint"] = model_fingerprint(self.model)
        d["run_id"] = self.resolved_run_id()
        return d


@dataclass(frozen=True)
@include_fields(VerifierSettings)
class RescoreConfig:
    """One rescore (``prl rescore``): which stored run, into which new run, verified how (``VerifierSettings``)."""

    run: str
    """The run to re-verify."""
    db: str = DEFAULT_STORE
    """Store file."""
    new_run: str | None = option(None, was=("--run-id",))
    """Id of the new run (default: RUN.rescore)."""


def split_spec(spec: str) -> tuple[str, int | None]:
    """'math500:20' → ('math500', 20); 'math500' → ('math500', None). Paths may contain ':' only before a suffix."""
    name, sep, k = spec.rpartition(":")
    if sep and k.isdigit() and int(k) > 0 and name:
        return name, int(k)
    return spec, None


def model_dtype(model_dir: str | Path) -> str:
    """The dtype a model directory's config.json names (``dtype``; ``torch_dtype`` in files written before
    transformers 4.56), or float32 when it names none. A directory without a readable config.json also gives
    float32: the model checks that run before any engine starts report what is wrong with it."""
    try:
        config = read_model_config(model_dir)
    except (EngineError, OSError):
        return "float32"
    if not isinstance(config, dict):
        return "float32"
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for where in (config, text):
        for key in ("dtype", "torch_dtype"):
            value = where.get(key)
            if value is None:
                continue
            name = str(value).removeprefix("torch.")
            if name not in MODEL_DTYPES:
                raise EvalError(f"dtype: {Path(model_dir) / 'config.json'} says {key} {value!r}, which evaluation "
                                f"does not run in; pass --dtype ({', '.join(MODEL_DTYPES)})")
            return name
    return "float32"


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
