"""The one way a tiny model is built (``prl model build-tiny``): the embedded Llama
(:func:`prl.models.tiny.build_tiny`) and the tiny Qwen2 (:func:`prl.models.qwen.build_tiny_qwen2`)
differ only in their spec, config class, tokenizer and stop tokens.

From a spec (the architecture fields of :data:`ARCH_FIELDS`) and a tokenizer: a config with tied
embeddings in fp32 and the tokenizer's eos and pad ids, weights initialised from ``seed`` alone (the
caller's RNG is left as it was), ``save_pretrained`` of model and tokenizer, and ``prl_model.json``
(``{"kind", "seed", "spec"}``, the marker that the build completed). Same seed and spec give the same
files on one machine (across machines: :func:`prl.models.tiny.build_tiny`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

ARCH_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings")
"""The spec fields every tiny model's config takes as they are."""
MODEL_MARKER = "prl_model.json"
"""Written last by a build: what was built (kind, seed, spec)."""


@dataclass(frozen=True)
class TwinSpec:
    """Architecture of a tiny random-weight twin of a published model: a small width and depth, the published
    model's RoPE base and vocabulary (a subclass sets those, :attr:`MODEL` and :meth:`min_vocab`)."""

    hidden_size: int = 64
    """Model width; hidden_size / num_attention_heads must be >= 32 for vLLM CPU."""
    intermediate_size: int = 128
    """MLP width."""
    num_hidden_layers: int = 2
    """Transformer blocks."""
    num_attention_heads: int = 2
    """Query heads (head_dim = hidden_size / heads = 32)."""
    num_key_value_heads: int = 1
    """KV heads (grouped-query attention, as the published model)."""
    max_position_embeddings: int = 32_768
    """Context length."""
    rope_theta: float = 10_000.0
    """RoPE base."""
    vocab_size: int = 0
    """Embedding rows: the published vocabulary."""

    MODEL: ClassVar[str] = "the published model"
    """The model the twin copies, as error messages name it."""

    def min_vocab(self) -> int:
        """How many tokens the published tokenizer has: the embedding must hold them all."""
        return 0

    def check(self) -> None:
        """ValueError naming the field when the spec cannot be built or served."""
        name = type(self).__name__
        for field in ARCH_FIELDS:
            if getattr(self, field) < 1:
                raise ValueError(f"{name}.{field}: must be >= 1, got {getattr(self, field)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{name}: hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.hidden_size // self.num_attention_heads < 32:
            raise ValueError(f"{name}: hidden_size / num_attention_heads must be >= 32 (vLLM CPU attention), "
                             f"got {self.hidden_size} / {self.num_attention_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{name}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if self.vocab_size < self.min_vocab():
            raise ValueError(f"{name}.vocab_size: must hold {self.MODEL}'s {self.min_vocab()} tokens, "
                             f"got {self.vocab_size}")


def check_saved_tokenizer(model_dir: str | Path, built, *, model: str, known_ids: dict[str, list[int]],
                          special_ids: Iterable[tuple[str, int]], tokens: dict[str, str],
                          round_trip: Iterable[str]) -> None:
    """``AutoTokenizer.from_pretrained(dir)`` — what vLLM uses — must be ``model``'s tokenizer: ``known_ids``
    (text -> ids measured on the published tokenizer), each special token's id, the named tokens (``tokens``:
    attribute -> content, e.g. ``{"eos_token": "<|im_end|>"}``), the chat template rendering the paper's
    prompt, and ``round_trip`` texts (and the rendered prompt) encoding as ``built`` (the in-memory tokenizer,
    when given) does and decoding back to the same text. RuntimeError naming the directory and every
    problem otherwise."""
    from transformers import AutoTokenizer

    from prl.generation.prompts import build_prompt

    loaded = AutoTokenizer.from_pretrained(str(model_dir))
    problems = []
    for text, ids in known_ids.items():
        got = loaded(text, add_special_tokens=False)["input_ids"]
        if got != ids:
            problems.append(f"{text!r} -> {got}, {model} gives {ids}")
    for content, i in special_ids:
        if loaded.convert_tokens_to_ids(content) != i:
            problems.append(f"{content} has id {loaded.convert_tokens_to_ids(content)}, expected {i}")
    held = [getattr(loaded, attr) for attr in tokens]
    if held != list(tokens.values()):
        names = "/".join(attr.removesuffix("_token") for attr in tokens)
        problems.append(f"{names} are {'/'.join(map(str, held))}, expected {'/'.join(tokens.values())}")
    samples = list(round_trip)
    try:
        samples.append(build_prompt(loaded, "What is $1+1$?"))
    except Exception as e:  # a template that fails to render is one more problem to report
        problems.append(f"the chat template does not render: {e}")
    for text in samples:
        ids = loaded(text, add_special_tokens=False)["input_ids"]
        if built is not None and ids != built(text, add_special_tokens=False)["input_ids"]:
            problems.append(f"{text[:40]!r}...: ids differ from the tokenizer that was saved")
        if loaded.decode(ids) != text:
            problems.append(f"{text[:40]!r}...: does not decode back to the same text")
    if problems:
        raise RuntimeError(f"{model_dir}: AutoTokenizer ({type(loaded).__name__}) is not {model}'s tokenizer: "
                           + "; ".join(problems) + " (see docs/architecture.md §The tokenizer trap)")


def seeded_model(model_cls, config, seed: int):
    """``model_cls(config)`` with weights from ``seed`` alone, leaving the caller's RNG as it was."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_cls(config)


def build_model(out_dir: str | Path, *, kind: str, seed: int, spec, tokenizer, config_cls, model_cls,
                vocab_size: int, eos_token_ids: int | list[int], config: dict[str, Any] | None = None,
                after_save: Callable[[Path], None] | None = None, bos_token_id: int | None = None) -> Path:
    """Build and save a random-initialised causal LM with ``tokenizer`` into ``out_dir``.

    ``config``: config fields beyond :data:`ARCH_FIELDS` (e.g. Qwen2's RoPE base); ``eos_token_ids``: the
    generation config's stop ids; ``bos_token_id``: the config's (None: the model has none, as Qwen2); ``after_save(out)``: rewrites after ``save_pretrained`` (before the marker).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_cls(
        vocab_size=vocab_size,
        **{name: getattr(spec, name) for name in ARCH_FIELDS},
        **(config or {}),
        bos_token_id=bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = seeded_model(model_cls, cfg, seed)
    model.generation_config.eos_token_id = eos_token_ids
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if after_save is not None:
        after_save(out)
    (out / MODEL_MARKER).write_text(json.dumps({"kind": kind, "seed": seed, "spec": asdict(spec)}, indent=2) + "\n")
    return out
