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
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

ARCH_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings")
"""The spec fields every tiny model's config takes as they are."""
MODEL_MARKER = "prl_model.json"
"""Written last by a build: what was built (kind, seed, spec)."""


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
