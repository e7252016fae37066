"""One interface for the generation engines (vLLM and ``transformers.generate``).

Conventions shared by every engine:

* ``generate`` takes prompt *strings that are already rendered* (``prl.generation.prompts.build_prompt``
  or :meth:`Engine.build_prompts`). They are tokenized once, in this process, with the model's
  own tokenizer and **without** adding special tokens (the chat template already wrote them),
  and both engines receive those exact token ids.
* Results are ordered by prompt, then sample: ``n`` samples per prompt.
* ``token_ids`` are every generated token, including the final EOS token or the token that
  completed a stop string (the policy sampled them, so training needs them). ``text`` is the
  same for both engines: ``tokenizer.decode(token_ids, skip_special_tokens=True)``, cut
  *before* the stop string when one ended the sample (vLLM's own streamed text can differ,
  e.g. it drops incomplete UTF-8 bytes that ``decode`` shows as U+FFFD).
* ``logprobs[t]`` is the log-probability of ``token_ids[t]`` under the distribution that was
  sampled from (temperature and top-p applied: logprobs mode ``"processed"``, the default), or
  under the raw model (``logprobs_mode="raw"``). At temperature 1 and top_p 1 both are the
  model's own ``log_softmax``. Greedy decoding (temperature 0) reports raw log-probs.
* ``finish_reason`` is ``"stop"`` (EOS or a stop string) or ``"length"`` (``max_tokens``
  reached, or the context ``max_model_len`` is full).
* Seeding: the same prompts, settings, weights and ``SamplingConfig.seed`` give the same
  samples, whatever ran before. vLLM: every prompt gets its own seed derived from (seed, its
  token ids, occurrence), so a prompt's samples also do not depend on the rest of the batch
  (shards and resumed runs reproduce one big run). transformers samples a whole batch from
  one RNG, seeded per batch: its samples depend on the batch composition (``batch_size``).
  The two engines do not draw the same random numbers; only greedy outputs agree across them.
"""

from __future__ import annotations

from prl_core.errors import UserError
import hashlib
import json
import math
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from prl.generation import prompts as _prompts
from prl.options import NO_FLAG, REPEATED
from prl.generation.prompts import PromptError, build_prompt, prompt_format, template_hash

ENGINE_KINDS = ("vllm", "hf")
DTYPES = ("float32", "bfloat16", "float16", "auto")
LOGPROBS_MODES = ("processed", "raw")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "tokenizer.tiktoken")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
# Config fields that must agree between the running engine and weights loaded into it.
ARCH_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")

__all__ = [
    "Engine", "EngineError", "PromptError", "Sample", "SamplingConfig",
    "check_model_dir", "check_weights_dir", "read_model_config", "head_dim_of", "derive_seed", "prompt_seeds",
    "layer_groups",
]


class EngineError(UserError, ValueError):
    """A generation engine cannot be built or used with these inputs; the message says why and what to do."""


def _fail(field_name: str, message: str) -> None:
    raise ValueError(f"SamplingConfig.{field_name}: {message}")


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings of one ``generate`` call (defaults: the paper's evaluation,
    docs/architecture.md §Evaluation protocol)."""

    n: int = 8
    """Samples per prompt (per problem in an evaluation)."""
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    max_tokens: int = 3072
    """Maximum generated tokens per sample (the paper: 3072; generation also stops when the context is full)."""
    stop: tuple[str, ...] = field(default=(), metadata=REPEATED)
    """Stop strings: generation ends when the response text contains one; it is cut off the text."""
    seed: int = 0
    """Seed of the sampler, applied at the start of every ``generate`` call (vLLM: per prompt, so shards and
    resumed runs reproduce one run)."""
    logprobs: bool = field(default=True, metadata=NO_FLAG)
    """Return the log-probability of every generated token."""
    ignore_eos: bool = field(default=False, metadata=NO_FLAG)
    """Keep generating after EOS (benchmarks: fixed lengths); stop strings still apply."""

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            _fail("n", f"must be an integer >= 1, got {self.n!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                _fail(name, f"must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.temperature < 0:
            _fail("temperature", f"must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            _fail("top_p", f"must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            _fail("max_tokens", f"must be an integer >= 1, got {self.max_tokens!r}")
        stop = self.stop
        if isinstance(stop, str):
            _fail("stop", f"must be a sequence of strings, not one string (use stop=({stop!r},))")
        try:
            stop = tuple(stop)
        except TypeError:
            _fail("stop", f"must be a sequence of strings, got {self.stop!r}")
        for s in stop:
            if not isinstance(s, str) or not s:
                _fail("stop", f"every stop string must be a non-empty str, got {s!r}")
        object.__setattr__(self, "stop", stop)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            _fail("seed", f"must be an integer in [0, 2**63), got {self.seed!r}")
        for name in ("logprobs", "ignore_eos"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, f"must be True or False, got {getattr(self, name)!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class Sample:
    """One generated response."""

    prompt_index: int
    sample_index: int
    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    """Log-prob of each generated token under the sampling policy (see module docstring)."""
    finish_reason: str
    """'stop' (EOS or stop string) or 'length' (max_tokens or context full)."""
    prompt_tokens: int
    n_tokens: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.n_tokens < 0:
            self.n_tokens = len(self.token_ids)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def layer_groups(names: Sequence[str]) -> list[list[str]]:
    """Parameter names partitioned into one group per layer, in order: the names before the first numbered
    layer (embeddings), one group per ``<prefix>.<i>.`` (a decoder layer), and the names after (the final
    norm, the LM head). The same partition as vLLM's ``layerwise_groups``
    (``vllm/distributed/weight_transfer/base.py``), kept here so engines without vLLM use it too: in-memory
    weight syncs move, and a ZeRO-3 trainer gathers, one group at a time."""
    pre: list[str] = []
    post: list[str] = []
    stacks: dict[tuple[str, int], list[str]] = {}
    for name in names:
        parts = name.split(".")
        index = next((i for i, part in enumerate(parts) if part.isdigit()), None)
        if index is None:
            (post if stacks else pre).append(name)
        else:
            stacks.setdefault((".".join(parts[:index]), int(parts[index])), []).append(name)
    first = {}
    for prefix, _ in stacks:
        first.setdefault(prefix, len(first))
    ordered = [stacks[k] for k in sorted(stacks, key=lambda k: (first[k[0]], k[1]))]
    return [g for g in ([pre] + ordered + [post]) if g]


def derive_seed(seed: int, *parts: object) -> int:
    """A 62-bit seed from ``seed`` and ``parts`` (stable across runs and platforms)."""
    text = ":".join(str(p) for p in (seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 2


def prompt_seeds(seed: int, prompt_ids: list[list[int]]) -> list[int]:
    """One seed per prompt from (seed, the prompt's token ids, how many times it occurred before).

    Content-based, not position-based: a prompt gets the same samples whatever else is in the
    call and in what order (so shards and resumed runs reproduce a single run), while repeated
    copies of one prompt in a call still get different samples.
    """
    seen: dict[str, int] = {}
    out = []
    for ids in prompt_ids:
        key = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        k = seen.get(key, 0)
        seen[key] = k + 1
        out.append(derive_seed(seed, key, k))
    return out


def response_text(tokenizer, token_ids: list[int], stop: tuple[str, ...] = (), stopped_by_string: bool = False) -> str:
    """The response text both engines report (module docstring)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    if stopped_by_string and stop:
        cut = min((text.find(s) for s in stop if s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
    return text


# --------------------------------------------------------------------------------------------
# Model directory checks (cheap; run before any engine starts).


def read_model_config(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineError(f"{model_dir}: no config.json; this is not a Hugging Face model directory") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EngineError(f"{path}: not valid JSON ({e})") from None


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def head_dim_of(config: dict[str, Any]) -> int | None:
    cfg = _text_config(config)
    if isinstance(cfg.get("head_dim"), int):
        return cfg["head_dim"]
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def context_length_of(config: dict[str, Any]) -> int | None:
    cfg = _text_config(config)
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            return cfg[key]
    return None


def _has_weights(path: Path) -> bool:
    return any(next(path.glob(p), None) is not None for p in WEIGHT_PATTERNS)


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` as the Hugging Face hub spells a model (``Qwen/Qwen2.5-Math-1.5B``), not a local path."""
    parts = name.split("/")
    return (len(parts) == 2 and all(parts) and not name.startswith((".", "~"))
            and all(c.isalnum() or c in "-_." for c in name.replace("/", "")))


def check_model_dir(model_dir: str | Path) -> Path:
    """The model directory exists and holds a config, weights and tokenizer files."""
    path = Path(model_dir)
    if not path.exists() and looks_like_hub_id(str(model_dir)):
        local = f"models/{str(model_dir).split('/')[1]}"
        raise EngineError(f"model directory {str(model_dir)!r} does not exist; it looks like a Hugging Face hub id, "
                          f"and prl downloads nothing: download it once (`hf download {model_dir} --local-dir {local}`) "
                          f"and pass that directory (--model {local})")
    if not path.exists():
        raise EngineError(f"model directory {str(model_dir)!r} does not exist "
                          "(build the embedded one with `prl model build-tiny --out DIR`)")
    if not path.is_dir():
        raise EngineError(f"{model_dir}: not a directory; pass the Hugging Face model directory")
    read_model_config(path)
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise EngineError(
            f"{model_dir}: no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); save the tokenizer next to "
            "the weights, e.g. tokenizer.save_pretrained(DIR)"
        )
    if not _has_weights(path):
        raise EngineError(f"{model_dir}: no weight files (*.safetensors or *.bin)")
    return path


def check_weights_dir(weights_dir: str | Path, base_config: dict[str, Any]) -> Path:
    """Weights saved by a trainer that can be loaded into an engine built from ``base_config``."""
    path = Path(weights_dir)
    if not path.is_dir():
        raise EngineError(f"weights directory {str(weights_dir)!r} does not exist")
    if next(path.glob("*.safetensors"), None) is None and next(path.glob("*.bin"), None) is None:
        raise EngineError(f"{weights_dir}: no *.safetensors (or *.bin) weight files; save the trainer's model "
                          "with model.save_pretrained(DIR)")
    if (path / "config.json").is_file():
        new, old = _text_config(read_model_config(path)), _text_config(base_config)
        for key in ARCH_FIELDS:
            if key in new and key in old and new[key] != old[key]:
                raise EngineError(
                    f"{weights_dir}: config.json {key}={new[key]!r} differs from the running engine's "
                    f"{key}={old[key]!r}; in-place updates need the same architecture (start a new engine instead)"
                )
    return path


def _torch_dtype(dtype: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


# --------------------------------------------------------------------------------------------


class Engine(ABC):
    """A generation engine: prompts in, ``n`` samples per prompt out."""

    name: str = "?"

    def __init__(self, model_dir: str | Path, *, dtype: str = "float32", seed: int = 0,
                 max_model_len: int | None = None, logprobs_mode: str = "processed",
                 require_chat_template: bool = False) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if dtype not in DTYPES:
            raise EngineError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
        if logprobs_mode not in LOGPROBS_MODES:
            raise EngineError(f"logprobs_mode: expected one of {LOGPROBS_MODES}, got {logprobs_mode!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise EngineError(f"seed: expected an integer >= 0, got {seed!r}")
        if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)
                                          or max_model_len < 2):
            raise EngineError(f"max_model_len: expected an integer >= 2, got {max_model_len!r}")
        self.model_dir = check_model_dir(model_dir).resolve()
        self.config = read_model_config(self.model_dir)
        limit = context_length_of(self.config)
        if max_model_len is not None and limit is not None and max_model_len > limit:
            raise EngineError(f"max_model_len={max_model_len} exceeds the model's context "
                              f"(max_position_embeddings={limit}) in {self.model_dir}/config.json")
        self.max_model_len: int | None = max_model_len or limit
        self.dtype = dtype
        self.seed = seed
        self.logprobs_mode = logprobs_mode
        self.weights_path = self.model_dir
        self.weight_updates = 0
        self.memory_updates = 0  # of weight_updates, those handed over in memory (load_weight_groups)
        self.asleep: set[str] = set()  # what sleep() released and wake_up() has not taken back
        self.events: list[str] = []
        """The engine's memory-relevant calls in order (generate, sleep, wake_up, weight loads), each with what the
        engine reports asleep afterwards; what a test of the trainer's order reads."""
        self.tokenizer = self._load_tokenizer()
        if require_chat_template:
            _prompts.require_chat_template(self.tokenizer)  # PromptError with a clear message
        self.prompt_format = prompt_format(self.tokenizer)  # 'chat_template', or 'plain' without one

    def _load_tokenizer(self):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(self.model_dir))
        except Exception as e:  # noqa: BLE001 - report any loader failure as a model-directory problem
            raise EngineError(f"{self.model_dir}: the tokenizer does not load ({type(e).__name__}: {e})") from e

    # ---- prompts ---------------------------------------------------------------------------

    def build_prompts(self, problems: list[str]) -> list[str]:
        """The evaluation prompts (docs/architecture.md §Evaluation protocol) for ``problems`` with this
        model's chat template."""
        return [build_prompt(self.tokenizer, p) for p in problems]

    def template_hash(self) -> str:
        return template_hash(self.tokenizer)

    def encode(self, prompts: list[str], max_tokens: int | None = None) -> list[list[int]]:
        """Token ids of rendered prompts (no special tokens added); checks each fits the context."""
        if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)):
            raise EngineError("prompts: expected a list of prompt strings")
        if not prompts:
            return []
        for i, p in enumerate(prompts):
            if not isinstance(p, str) or not p:
                raise EngineError(f"prompt {i}: expected a non-empty string, got {type(p).__name__} {p!r:.60}")
        ids = [list(x) for x in self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
        for i, x in enumerate(ids):
            if not x:
                raise EngineError(f"prompt {i}: encodes to no tokens")
            if self.max_model_len is not None and len(x) >= self.max_model_len:
                raise EngineError(
                    f"prompt {i} is {len(x)} tokens long but the context (max_model_len) is {self.max_model_len} "
                    "tokens; it must leave room for at least one generated token "
                    "(shorten the prompt or use a model/max_model_len with a longer context)"
                )
        return ids

    # ---- engine API --------------------------------------------------------------------------

    @abstractmethod
    def generate(self, prompts: list[str], sampling: SamplingConfig | None = None, *,
                 progress: bool = False) -> list[Sample]:
        """``sampling.n`` samples for each rendered prompt, ordered by prompt then sample index."""

    @abstractmethod
    def update_weights(self, model_dir: str | Path) -> None:
        """Load weights saved (``save_pretrained``) by a trainer into this running engine."""

    loads_from_memory: bool = False
    """Whether :meth:`load_weight_groups` can take tensors from this process (the engine runs in it)."""

    def load_weight_groups(self, groups: Iterable[tuple[list[str], list]]) -> None:
        """Load the weights from memory, one layer group at a time: ``(names, tensors)`` pairs with a trainer's
        ``state_dict`` names (tied duplicates dropped), consumed one after another (the producer may gather
        each group just before it is yielded and free it after). Nothing is written to disk. Engines that run
        in other processes raise EngineError: use :meth:`update_weights` with a ``save_pretrained`` directory."""
        raise EngineError(f"engine {self.name!r} cannot load weights from memory here; use update_weights(DIR)")

    def load_weights(self, named_tensors) -> None:
        """:meth:`load_weight_groups` of ``(name, tensor)`` pairs, grouped by layer (:func:`layer_groups`)."""
        named = dict(named_tensors)
        self.load_weight_groups(([n for n in g], [named[n] for n in g]) for g in layer_groups(list(named)))

    # ---- sleep (colocated training: the engine gives its memory back during the policy update) -----------

    SLEEP_LEVELS = (1, 2)
    """1: weights moved off the device, KV cache dropped; 2: both dropped (the trainer re-sends the weights)."""

    def sleep(self, level: int) -> None:
        """Give the engine's device memory back until :meth:`wake_up` (no generation in between)."""
        if level not in self.SLEEP_LEVELS:
            raise EngineError(f"sleep level: expected one of {self.SLEEP_LEVELS}, got {level!r}")
        self._sleep(level)
        self.asleep = {"weights", "kv_cache"}
        self._event(f"sleep({level})")

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Take the memory back: ``["weights"]`` first (then load new weights), then ``["kv_cache"]``; None: all."""
        tags = list(tags) if tags is not None else sorted(self.asleep)
        unknown = set(tags) - {"weights", "kv_cache"}
        if unknown:
            raise EngineError(f"wake_up tags: expected 'weights' and/or 'kv_cache', got {sorted(unknown)}")
        self._wake_up(tags)
        self.asleep -= set(tags)
        self._event(f"wake_up({','.join(tags)})")

    def _event(self, call: str) -> None:
        self.events.append(f"{call} -> asleep: {','.join(sorted(self.reported_asleep())) or '-'}")

    def reported_asleep(self) -> set[str]:
        """What the engine itself reports asleep (vLLM: its executor's own state); by default what sleep() released."""
        return set(self.asleep)

    def _sleep(self, level: int) -> None:
        """Engine-specific part of :meth:`sleep` (default: nothing to release)."""

    def _wake_up(self, tags: list[str]) -> None:
        """Engine-specific part of :meth:`wake_up`."""

    def _require_awake(self) -> None:
        if self.asleep:
            raise EngineError(f"the engine is asleep ({', '.join(sorted(self.asleep))} released); call "
                              "wake_up() before generating")

    def info(self) -> dict[str, Any]:
        """What a run manifest records about the engine."""
        import torch
        import transformers

        return {
            "engine": self.name,
            "engine_version": self._engine_version(),
            "dtype": self.dtype,
            "model_path": str(self.model_dir),
            "weights_path": str(self.weights_path),
            "weight_updates": self.weight_updates,
            "memory_updates": self.memory_updates,
            "max_model_len": self.max_model_len,
            "seed": self.seed,
            "logprobs_mode": self.logprobs_mode,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }

    @abstractmethod
    def _engine_version(self) -> str: ...

    def close(self) -> None:
        """Release the engine's processes and memory (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- helpers for subclasses -----------------------------------------------------------

    def _check_sampling(self, sampling: SamplingConfig | None) -> SamplingConfig:
        if sampling is None:
            return SamplingConfig()
        if not isinstance(sampling, SamplingConfig):
            raise EngineError(f"sampling: expected a SamplingConfig, got {type(sampling).__name__}")
        return sampling
