"""Generation engines behind one interface: ``make_engine('vllm' | 'hf', model_dir)``.

``base`` holds the interface (:class:`Engine`, :class:`SamplingConfig`, :class:`Sample`) and the
checks both engines share; ``vllm_engine`` and ``hf_engine`` implement it. The backends are
imported when an engine is built, not with this package: they pull in torch, transformers and
vLLM (seconds), and vLLM's worker processes import ``vllm_engine`` for its worker extension.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from prl.generation.engines.base import (
    DTYPES,
    ENGINE_KINDS,
    Engine,
    EngineError,
    Sample,
    SamplingConfig,
    check_model_dir,
)
from prl.generation.prompts import PromptError

__all__ = ["DTYPES", "ENGINE_KINDS", "Engine", "EngineError", "PromptError", "Sample", "SamplingConfig",
           "check_model_dir", "make_engine"]


def make_engine(kind: str, model_dir: str | Path, *, dtype: str = "float32", seed: int = 0,
                max_model_len: int | None = None, **kw: Any) -> Engine:
    """Build a generation engine: ``kind`` is 'vllm' (vLLM ``LLM``) or 'hf' (``transformers.generate``).

    Extra keyword arguments go to the engine (``VLLMEngine``: gpu_memory_utilization,
    enforce_eager, logprobs_mode, other ``vllm.LLM`` arguments; ``HFEngine``: batch_size,
    device, logprobs_mode).
    """
    if kind == "vllm":
        from prl.generation.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len, **kw)
    if kind == "hf":
        from prl.generation.engines.hf_engine import HFEngine

        accepted = set(inspect.signature(HFEngine.__init__).parameters) - {"self", "model_dir"}
        unknown = sorted(set(kw) - accepted)
        if unknown:
            raise EngineError(f"engine 'hf' does not take {', '.join(unknown)}; its options: {', '.join(sorted(accepted))}")
        return HFEngine(model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len, **kw)
    raise EngineError(f"engine: expected one of {ENGINE_KINDS}, got {kind!r}")
