"""Generation engines behind one interface: ``make_engine('vllm' | 'hf', model_dir)``.

Kept import-light: vLLM worker processes import ``prl.engines.vllm_engine`` (its worker
extension), and neither vLLM nor torch is imported until an engine is built.
"""

from .base import (
    ENGINE_KINDS,
    Engine,
    EngineError,
    PromptError,
    Sample,
    SamplingConfig,
    check_model_dir,
    make_engine,
)

__all__ = ["ENGINE_KINDS", "Engine", "EngineError", "PromptError", "Sample", "SamplingConfig",
           "check_model_dir", "make_engine"]
