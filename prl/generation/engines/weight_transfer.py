"""In-memory weight sync into a vLLM engine in the trainer's own process, through vLLM's RL weight-transfer API.

vLLM 0.32 ships a weight-transfer API for RL trainers (``vllm/distributed/weight_transfer/``): a worker-side
``WeightTransferEngine`` chosen by ``WeightTransferConfig(backend=...)``, driven through the worker methods
``init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` / ``finish_weight_update``,
and a trainer-side ``TrainerWeightTransferEngine`` whose ``send_weights()`` streams a ``WeightSource`` of
named tensors, one layer group at a time. Its built-in backends move tensors between processes
(``ipc``: CUDA IPC handles; ``nccl``: a broadcast) and need CUDA.

Training here runs one engine per rank *inside* the rank's own process (colocated: vLLM's
``external_launcher`` executor, as TRL's colocate mode), so the tensors need no transport at all: this
module registers a backend, ``prl_inprocess``, under the same interface, whose update info carries the
tensors themselves. The worker loads each group with vLLM's layerwise reload (as the ``ipc`` backend
does), on CPU and on GPU alike, so the CPU tests make exactly the calls a GPU run makes.

On top of what the built-in backends do, the worker side
* gives a tied LM head (``tie_word_embeddings``: SmolLM2, Qwen2.5-1.5B, the tiny model) the embedding,
  which the trainer's state dict names once: during a layerwise reload the head is a layer of its own,
  and one that receives nothing kept its old (CPU pre-packed) copy;
* marks computed non-persistent buffers (a rotary embedding's cos/sin cache) as never loaded, so the
  reload does not wait for them (:func:`mark_derived_buffers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (ParamMeta, TrainerInitInfo, TrainerWeightTransferEngine,
                                                   WeightSource, WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

BACKEND = "prl_inprocess"

Group = tuple[list[str], list[torch.Tensor]]
"""One layer's parameters: their checkpoint names and tensors (whole, gathered if the trainer shards them)."""


class _WarningsOf(logging.Handler):
    """Collects ``name: message`` of the WARNING+ records a logger tree emits inside the block (they are
    still logged as usual)."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.WARNING)
        self.logger = logging.getLogger(logger)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")

    def __enter__(self) -> "_WarningsOf":
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)


def mark_derived_buffers(model) -> set[str]:
    """Tell vLLM's layerwise reload not to wait for tensors no checkpoint holds.

    The reload counts every parameter and buffer of a layer as loadable and warns "<Layer>: Failed to
    load weights" for a layer that received none. A rotary embedding holds only ``cos_sin_cache``, a
    non-persistent buffer computed from the config, so it warned at every reload although nothing was
    missing. vLLM keeps the names of such never-loaded tensors in ``SKIP_LOAD_TENSORS`` (upstream adds to
    it the same way); add the buffers of every layer that has no parameters and only non-persistent
    buffers, unless the name is a loadable tensor elsewhere in the model.
    """
    try:
        from vllm.model_executor.model_loader.reload.meta import SKIP_LOAD_TENSORS
    except ImportError:  # another vLLM layout: reloads still work, the warning may return
        return set()
    derived: set[str] = set()
    loadable: set[str] = set()
    for module in model.modules():
        params = [n for n, p in module._parameters.items() if p is not None]
        buffers = [n for n, b in module._buffers.items() if b is not None]
        persistent = [n for n in buffers if n not in module._non_persistent_buffers_set]
        loadable.update(params, persistent)
        if buffers and not params and not persistent:
            derived.update(buffers)
    derived -= loadable
    SKIP_LOAD_TENSORS.update(derived)
    return derived


def tied_heads(model) -> dict[str, str]:
    """``{head parameter: embedding parameter}`` for LM heads that share the embedding's weight."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, VocabParallelEmbedding):
            for name, param in module.named_parameters(remove_duplicate=False):
                qualname = f"{prefix}.{name}" if prefix else name
                if first.setdefault(id(param), qualname) != qualname:
                    tied[qualname] = first[id(param)]
    return tied


def with_tied_heads(named: Iterable[tuple[str, torch.Tensor]], heads: dict[str, str]
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """``named``, with each embedding in ``heads``' values yielded again right after it under its tied
    head's name (both write the same values into the one shared parameter)."""
    by_embedding = {embed: head for head, embed in heads.items()}
    for name, tensor in named:
        yield name, tensor
        if name in by_embedding:
            yield by_embedding[name], tensor


# ─── worker side (runs in vLLM's worker: here, the trainer's own process) ─────────────────────────────

@dataclass
class InProcessInitInfo(WeightTransferInitInfo):
    """Nothing to rendezvous: the trainer and the worker share a process."""


@dataclass
class InProcessUpdateInfo(WeightTransferUpdateInfo):
    """One group of named tensors, handed over as the tensors themselves."""

    names: list[str]
    tensors: list[Any]

    def __post_init__(self) -> None:
        if len(self.names) != len(self.tensors):
            raise ValueError(f"names and tensors differ in length: {len(self.names)} and {len(self.tensors)}")


class InProcessWeightTransferEngine(WeightTransferEngine[InProcessInitInfo, InProcessUpdateInfo]):
    """Loads tensors of the trainer's process into the model with vLLM's layerwise reload."""

    init_info_cls = InProcessInitInfo
    update_info_cls = InProcessUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self._heads: dict[str, str] = {}
        self._names: set[str] = set()
        self._warnings: _WarningsOf | None = None
        self.report: dict[str, Any] = {}

    def init_transfer_engine(self, init_info: InProcessInitInfo) -> None:
        """Nothing to set up."""

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self._t0 = time.perf_counter()
        derived = mark_derived_buffers(self.model)
        self._heads = tied_heads(self.model)
        self._names = set()
        self._warnings = _WarningsOf("vllm").__enter__()
        self.report = {"derived_buffers": sorted(derived), "tied_heads_fed": [], "groups": 0, "tensors": 0}
        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronises the accelerator after each chunk; a CPU process has none.
        self.receive_weights(self.parse_update_info(update_info))
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: InProcessUpdateInfo) -> None:
        named = list(zip(update_info.names, update_info.tensors))
        heads = {h: e for h, e in self._heads.items() if e in update_info.names and h not in update_info.names}
        self.report["tied_heads_fed"] += sorted(heads)
        self.report["groups"] += 1
        self.report["tensors"] += len(named)
        self._names.update(update_info.names)
        self.model.load_weights(with_tied_heads(named, heads))

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        try:
            finalize_layerwise_reload(self.model, self.model_config)
        finally:
            if self._warnings is not None:
                self._warnings.__exit__(None, None, None)
                self.report["warnings"] = self._warnings.messages
                self._warnings = None
        self.report["seconds"] = time.perf_counter() - self._t0

    def shutdown(self) -> None:
        """Nothing to release."""


# ─── trainer side ─────────────────────────────────────────────────────────────────────────────────────

class GroupSource(WeightSource):
    """A :class:`WeightSource` over the trainer's layer groups of one sync: ``iter_groups`` yields them one at
    a time as the trainer produces them (a ZeRO-3 trainer gathers each group's partitions while it is
    yielded, never the whole model at once)."""

    def __init__(self, groups: Iterable[Group], metadata: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> None:
        self._groups = groups
        self._metadata = metadata

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name, dtype, tuple(shape)) for name, dtype, shape in self._metadata]

    def iter_groups(self) -> Iterator[Group]:
        yield from self._groups

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for names, tensors in self.iter_groups():
            yield from zip(names, tensors)


@dataclass
class InProcessTrainerInitInfo(TrainerInitInfo):
    """The trainer side of ``prl_inprocess``. Every training rank drives its own colocated engine, so each
    is the sender to that engine (``rank`` 0 here is the rank among that engine's trainers, always 0)."""

    backend: ClassVar[str] = BACKEND
    rank: int = field(default=0, kw_only=True)


class InProcessTrainerWeightTransferEngine(TrainerWeightTransferEngine[InProcessTrainerInitInfo]):
    """Streams the source's groups to the colocated worker: start → one ``update_weights`` per group → finish."""

    init_info_cls = InProcessTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: InProcessTrainerInitInfo, *, client, source: WeightSource | None = None
                     ) -> "InProcessTrainerWeightTransferEngine":
        if source is None:
            raise ValueError("the in-process weight transfer needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        if engine.is_sender:
            engine.client.init_weight_transfer_engine({})
        return engine

    def send_weights(self) -> None:
        assert self.source is not None
        self.client.start_weight_update()
        try:
            for names, tensors in self.source.iter_groups():
                self.client.update_weights({"names": list(names), "tensors": [t.detach() for t in tensors]})
        finally:
            self.client.finish_weight_update()


class CollectiveRpcClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over an ``LLM`` in this process: each call is the worker method
    of the same name, through ``LLM.collective_rpc`` (in-process, so arguments are passed, not serialised)."""

    def __init__(self, llm) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.collective_rpc("init_weight_transfer_engine", args=(init_info,))

    def start_weight_update(self) -> None:
        self.llm.collective_rpc("start_weight_update")

    def update_weights(self, update_info) -> None:
        self.llm.collective_rpc("update_weights", args=(update_info,))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.collective_rpc("finish_weight_update")


def register() -> None:
    """Register ``prl_inprocess`` with vLLM's worker and trainer factories (once per process; vLLM's
    registries refuse a second registration)."""
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, InProcessWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, InProcessTrainerWeightTransferEngine)
