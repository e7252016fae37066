"""The memory a training rank needs, term by term, and whether it fits a named GPU (``prl train --dry-run``).

A rank holds, on its device:

=====================  ===================================================================================
term                   how it is computed
=====================  ===================================================================================
model states           bf16: DeepSpeed's own estimators (``estimate_zero{2,3}_model_states_mem_needs``:
                       bf16 weights and gradients, fp32 master weights and Adam moments, ZeRO-partitioned);
                       fp32 (the CPU): weights and two Adam moments (12 bytes per parameter, the moments
                       partitioned from ZeRO 1, everything from ZeRO 3); at ZeRO 0 the 4-byte gradients
                       exist only in the update, where DeepSpeed also copies them into a flat bucket (up to
                       5e8 elements) to all-reduce them; other stages keep the gradients in every phase
reference              the frozen copy: bytes per parameter × parameters; under ZeRO-3 partitioned like the
                       policy, plus its largest layer gathered; none on the device with ``ref_offload``
engine                 the colocated rollout engine. vLLM on a GPU takes its share of the device
                       (``rollout_memory_utilization``; or its weights + ``rollout_kv_cache_gib`` + 1 GiB of
                       work space) and, asleep (``rollout_sleep_level`` ≥ 1), keeps ~0.5 GiB; on the CPU its
                       weights, oneDNN copies of the embedding and the LM head, its KV cache (zero-filled
                       when built: all resident) and :data:`VLLM_CPU_RUNTIME_GIB` stay. transformers: its
                       weights, the generation's KV cache and last-token logits
activations            what autograd keeps for one micro-batch (rows × its longest sequence, or the token
                       budget): per token and layer, measured on one real decoder layer of the model's own
                       architecture (:func:`probe_layer`), × layers; plus what that layer's backward adds
                       (its recomputed forward first, with gradient checkpointing); in the no-gradient
                       passes, one layer's peak
log-prob chunk         ``CHUNK_BYTES_PER_LOGIT`` × ``logprob_chunk_tokens`` × vocabulary
                       (:mod:`prl_core.logprobs`: two fp32 chunk × V tensors at a time); its backward also
                       holds the LM head's fp32 gradient (V × H), which each chunk adds into in place
overhead               GPU: the CUDA context, NCCL's buffers (several ranks) and 10% of the activations for
                       the allocator's fragmentation; CPU: the process's own resident memory before any model
                       (Python, torch, vLLM), as the dry run measures it in itself
=====================  ===================================================================================

The peak is the largest of three phases: rollouts (engine awake, no activations), the no-gradient
log-prob passes and the update (engine asleep when sleep mode is on). Activations, the log-prob chunk and
the gradients do not peak together, so a phase is planned at each moment where its peak can fall — the
no-gradient pass inside a decoder layer or in a log-prob chunk; the update in the chunks' backward (every
activation still kept), in the last layer's backward, or in DeepSpeed's gradient reduction — and its
value is its largest moment, each term valued at that moment (``peak_moments``, ``moments_added_gib``).
``bench/memory.py`` measures each term on the CPU for several configurations and compares it with this
model (``bench/results/memory.json``).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1024 ** 3
PHASES = ("rollout", "logprobs", "update", "export")
"""The moments of a step a plan values: generation, the no-gradient log-prob passes, the update, and the
checkpoint's export (after the weight sync, the engine awake)."""

GPUS: dict[str, float] = {
    "H100-80GB": 81559 / 1024,
    "H200-141GB": 143771 / 1024,
    "A100-80GB": 81920 / 1024,
    "A100-40GB": 40960 / 1024,
}
"""Usable memory in GiB as ``nvidia-smi`` reports each device's total (MiB / 1024)."""

CUDA_CONTEXT_GIB = 0.75
"""The CUDA context, cuBLAS/cuDNN work spaces and kernels loaded by torch (≈ 0.5–1 GiB on Hopper)."""
NCCL_GIB = 1.0
"""NCCL's communicators with more than one rank: DeepSpeed's ``init_distributed`` binds each rank's
``device_id``, so the default group's communicator is created at start, not lazily, and vLLM's external
launcher adds its own groups over the same ranks; each holds its channels' buffers (``NCCL_BUFFSIZE``, 4 MiB, per
channel and peer) and NCCL's kernels. 0.5 GiB was the lazy single-communicator figure; ``bench/gpu_check.sh``
measures it (device memory before and after the group starts)."""
FRAGMENTATION = 0.10
"""The caching allocator's fragmentation, as a share of the activations and the log-prob chunk."""
VLLM_WORKSPACE_GIB = 1.0
"""vLLM's own activations and CUDA graphs beside its weights and KV cache, when the KV cache is given in GiB."""
VLLM_ASLEEP_GIB = 0.5
"""What a sleeping vLLM engine keeps on the device besides its CUDA graphs: the allocator's state, NCCL and
sampler buffers."""
VLLM_CUDAGRAPH_GIB = 1.0
"""vLLM's CUDA graphs, which its sleep mode keeps on the device (vLLM 0.32's ``sleep_mode_offload_cudagraph`` is
off by default): its log line "Graph capturing finished … took X GiB" reads 0.3-1.5 GiB for 1.5-7 B models at
the default capture sizes; none with ``enforce_eager``. ``bench/gpu_check.sh`` measures a sleeping engine."""
VLLM_DEFAULT_BATCHED_TOKENS = 16_384
"""vLLM's ``max_num_batched_tokens`` for the offline ``LLM`` class on an H100-class GPU when not given: the size of
the dummy batch it profiles its activations with before sizing the KV cache."""
VLLM_DEFAULT_MAX_SEQS = 1_024
"""vLLM's ``max_num_seqs`` for the offline ``LLM`` class on an H100-class GPU when not given (its sampler's rows)."""
VLLM_CPU_RUNTIME_GIB = 0.25
"""vLLM's own resident memory on the CPU beside its weights, their oneDNN copies and its KV cache: the modules it
imports when it builds an engine (its engine core, CPU worker and model runner: ~0.17 GiB that ``import vllm``,
what the CPU overhead term measures, does not load), its tokenizer and its worker's buffers. Measured by
bench/memory.py on the tiny model, whose 3 MB of weights leave only this; checked there on SmolLM2."""
DS_ALLREDUCE_BUCKET = 500_000_000
"""Elements per flat bucket of DeepSpeed's gradient all-reduce at ZeRO 0 (``MEMORY_OPT_ALLREDUCE_SIZE``)."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model the plan needs (from its config.json and a parameter count on the meta device)."""

    params: int
    largest_layer: int
    layers: int
    hidden: int
    vocab: int
    kv_dim: int
    """Key/value width per layer (kv heads × head dim)."""
    intermediate: int = 0
    """The MLP's width (config.json's intermediate_size; 0: 4 × hidden)."""


@dataclass(frozen=True)
class LayerProfile:
    """Bytes per token of one decoder layer, measured on the architecture's own code (:func:`probe_layer`)."""

    saved: float
    """What autograd keeps for the backward pass (the forward's saved tensors)."""
    saved_checkpointed: float
    """The same with gradient checkpointing (the layer's inputs only)."""
    dtype: str
    nograd: float = 0.0
    """The peak of the layer's tensors in a no-gradient forward pass, its output included (its input is not)."""
    backward: float = 0.0
    """The peak the layer's backward pass adds to what the forward kept (gradients of its activations, net of
    the saved tensors it frees as it goes)."""
    backward_checkpointed: float = 0.0
    """The same with gradient checkpointing: the recomputed forward's saved tensors, then the backward."""
    computed: bool = True
    """False where the layer's matrix products and attention allocated their outputs without computing them
    (:func:`probe_layer`'s default, ``compute=False``)."""


def _peak_allocated(fn) -> int:
    """The peak of CPU tensor bytes allocated and not yet freed while ``fn`` runs, above the start: torch's
    profiler records every allocation and free of the CPU allocator, in order. (Its start-up lines on stderr are
    silenced.)"""
    import os

    from torch.profiler import ProfilerActivity, profile

    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    live = top = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        top = max(top, live)
    return top


SHAPES_ONLY_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
                             "_scaled_dot_product_flash_attention_for_cpu_backward"})
"""The operators of a decoder layer that :func:`probe_layer` runs shapes-only (:func:`_shapes_only`): its matrix
products and CPU fused attention, forward and backward."""


def _shapes_only():
    """A dispatch mode in which the operators of :data:`SHAPES_ONLY_OPS` allocate their outputs, uninitialised, with
    the shapes, strides and dtypes their meta kernels give, and compute nothing; every other operator runs as
    usual. Autograd, its saved tensors and the profiler's allocation record see the same tensors as in a computed
    pass (tests/test_dry_run.py checks the probe both ways); only the values are not computed, and memory does not
    depend on them."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    def meta(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t

    def real(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu") if isinstance(t, torch.Tensor) else t

    class ShapesOnly(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.overloadpacket.__name__ not in SHAPES_ONLY_OPS or func._schema.is_mutable:
                return func(*args, **kwargs)
            return tree_map(real, func(*tree_map(meta, args), **tree_map(meta, kwargs)))

    return ShapesOnly()


def probe_layer(config, dtype, tokens: tuple[int, int] = (16, 48),
                backward_tokens: tuple[int, int] = (64, 192), compute: bool = False) -> LayerProfile:
    """Bytes per token of one decoder layer of ``config``'s architecture: what it keeps for backward, with and
    without gradient checkpointing (every tensor autograd saves, counted once by storage); the peak of its
    no-gradient forward; and the peak its backward adds, with and without checkpointing (the last three from
    the profiler's record of every allocation and free). The layer is built at its real width (uninitialised
    weights, one layer only) and run on two sequence lengths; the difference between them divided by the tokens
    is the per-token cost (attention here is linear in length). For the backward the layer's parameters are
    frozen, so that their gradients (counted in the model states, and no per-token cost) do not blur the
    difference; ``backward_tokens`` are longer for the same reason.

    By default (``compute=False``) the layer runs with its matrix products and fused attention allocating their
    outputs without computing them (:func:`_shapes_only`): the per-token cost of the tensors the layer makes, the
    same on any CPU, in seconds. Computed (``compute=True``), the CPU kernels' own scratch enters the record
    too: on a CPU with AMX, bfloat16 attention's blocked work buffers made the computed per-token peaks at these
    short lengths 25-35 % lower than at 256 tokens and more, where they equal the shapes-only figures; on an
    AVX2-only CPU a computed bfloat16 probe of one 7 B layer takes over 15 minutes (tests/test_dry_run.py;
    docs/architecture.md §The layer probe counts tensors, not a CPU's kernels)."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(config)
    cfg.num_hidden_layers = 1
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    layer = meta.get_decoder().layers[0].to_empty(device="cpu")
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.02)
    rotary = type(meta.get_decoder().rotary_emb)(config=cfg)
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}

    def inputs(n: int, grad: bool):
        hidden = torch.randn(1, n, cfg.hidden_size, dtype=dtype, requires_grad=grad)
        pos = torch.arange(n)[None]
        return hidden, pos, rotary(hidden, pos)

    def checkpointing(on: bool) -> None:
        layer.train()
        if on:
            from functools import partial

            from torch.utils.checkpoint import checkpoint

            layer.gradient_checkpointing, layer._gradient_checkpointing_func = True, partial(checkpoint, use_reentrant=False)
        else:
            layer.gradient_checkpointing = False

    def saved_bytes(n: int, checkpointed: bool) -> int:
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = t.untyped_storage()
            if st.data_ptr() not in params:
                seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
            return t

        hidden, pos, rope = inputs(n, True)
        checkpointing(checkpointed)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(hidden, position_ids=pos, position_embeddings=rope)
        return sum(seen.values())

    def nograd_peak(n: int) -> int:
        hidden, pos, rope = inputs(n, False)
        checkpointing(False)
        with torch.no_grad():
            return _peak_allocated(lambda: layer(hidden, position_ids=pos, position_embeddings=rope))

    def backward_peak(n: int, checkpointed: bool) -> int:
        hidden, pos, rope = inputs(n, True)
        checkpointing(checkpointed)
        layer.requires_grad_(False)
        try:
            out = layer(hidden, position_ids=pos, position_embeddings=rope)
            out = out[0] if isinstance(out, tuple) else out
            grad = torch.randn_like(out)
            return _peak_allocated(lambda: out.backward(grad))
        finally:
            layer.requires_grad_(True)

    def per_token(f, lengths) -> float:
        a, b = lengths
        return (f(b) - f(a)) / (b - a)

    with contextlib.nullcontext() if compute else _shapes_only():
        per = {ck: per_token(lambda n: saved_bytes(n, ck), tokens) for ck in (False, True)}
        back = {ck: per_token(lambda n: backward_peak(n, ck), backward_tokens) for ck in (False, True)}
        nograd = per_token(nograd_peak, tokens)
    if not (nograd > 0 and back[False] > 0 and back[True] > 0):  # a torch whose profiler records no memory
        nograd, back = per[False], {False: per[False], True: 2 * per[False]}  # the saved tensors: an upper bound
    return LayerProfile(saved=per[False], saved_checkpointed=per[True], dtype=str(dtype).removeprefix("torch."),
                        nograd=nograd, backward=back[False], backward_checkpointed=back[True], computed=compute)


@dataclass
class Term:
    """One line of the plan."""

    name: str
    gib: float
    how: str
    phases: dict[str, float] = field(default_factory=dict)
    """GiB of this term in each phase (rollout, logprobs, update, export) when it differs between them."""


def grad_accum_bytes(params: int, world: int, zero_stage: int, grad_accum_dtype: str) -> float:
    """The fp32 gradient-accumulation buffer a bf16 run adds beyond DeepSpeed's estimator (which counts bf16
    gradients): ZeRO-2/3 accumulate each rank's partition in fp32 (4 bytes per parameter / ranks); ZeRO-1's
    BF16 optimizer keeps the whole model's fp32 gradients (4 bytes per parameter); ZeRO-0 accumulates in bf16
    whatever the config says (DeepSpeed takes no other mix there)."""
    if grad_accum_dtype != "fp32" or zero_stage == 0:
        return 0.0
    return 4 * params / (1 if zero_stage == 1 else world)


def _model_states(shape: ModelShape, *, dtype: str, zero_stage: int, world: int, deepspeed_gpu_bytes: float | None,
                  grad_accum_dtype: str = "bf16") -> tuple[float, float, float, str]:
    """(bytes at rest, gradients added during the update, DeepSpeed's reduction copy of them, how).

    fp32 ZeRO 0 (measured on the CPU, bench/memory.py): weights and Adam's two moments stay; the gradients exist
    from the backward pass to the optimizer step (DeepSpeed then sets them to None), and at the accumulation
    boundary DeepSpeed's ``buffered_allreduce_fallback`` copies them into flat buckets of up to
    :data:`DS_ALLREDUCE_BUCKET` elements (with one rank too) — the update's peak when activations are small.
    Other stages and bf16 (DeepSpeed's estimator): the same bytes in every phase."""
    P, N = shape.params, world
    if dtype == "bfloat16" and deepspeed_gpu_bytes is not None:
        how = f"DeepSpeed's ZeRO-{zero_stage} estimator (bf16 + fp32 master and Adam)"
        accum = grad_accum_bytes(P, N, zero_stage, grad_accum_dtype)
        if accum:
            how += (f" + fp32 gradient accumulation ({accum / GIB:.2f} GiB: 4 bytes/param"
                    + ("" if zero_stage == 1 else " / ranks") + ", grad_accum_dtype: fp32)")
        return deepspeed_gpu_bytes + accum, 0.0, 0.0, how
    if zero_stage == 3:
        return 16 * P / N + 4 * shape.largest_layer, 0.0, 0.0, "fp32: (4 weights + 4 grads + 8 Adam) bytes/param / ranks"
    optim = 8 * P / (N if zero_stage >= 1 else 1)
    grads = 4 * P / (N if zero_stage >= 2 else 1)
    if zero_stage == 0:
        bucket = 4 * min(P, DS_ALLREDUCE_BUCKET)
        return (4 * P + optim, grads, bucket,
                "fp32: 4 weights + 8 Adam bytes/param; in the update + 4 gradients and DeepSpeed's flat copy of them "
                f"for the reduction ({bucket / GIB:.2f} GiB)")
    return 4 * P + grads + optim, 0.0, 0.0, "fp32: 4 weights + 4 grads + 8 Adam bytes/param (moments partitioned from ZeRO 1)"


def vllm_profile_bytes(shape: ModelShape, e: int, batched_tokens: int | None, max_seqs: int | None) -> float:
    """The activations of vLLM's profile pass, which it takes off the KV cache: one forward over
    ``max_num_batched_tokens`` (the MLP's gate and up projections, 2 × intermediate, and ~4 hidden-wide tensors
    per token at once) and the sampler's fp32 logits for ``max_num_seqs`` rows (logits and their softmax).
    None: vLLM's defaults (:data:`VLLM_DEFAULT_BATCHED_TOKENS`, :data:`VLLM_DEFAULT_MAX_SEQS`)."""
    tokens = batched_tokens or VLLM_DEFAULT_BATCHED_TOKENS
    seqs = max_seqs or VLLM_DEFAULT_MAX_SEQS
    inter = shape.intermediate or 4 * shape.hidden
    return float(tokens * (2 * inter + 4 * shape.hidden) * e + seqs * shape.vocab * 4 * 2)


def plan_memory(*, shape: ModelShape, profile: LayerProfile, t, world: int, device: str, capacity_gib: float,
                prompt_tokens: int, rollouts_per_rank: int, deepspeed_gpu_bytes: float | None = None,
                baseline_bytes: float = 0.0, with_reference: bool = True) -> dict[str, Any]:
    """The plan of one rank: terms, phase peaks, and the verdict against ``capacity_gib``.

    ``t``: the TrainConfig. ``device``: 'cpu' or a GPU name of :data:`GPUS` ('gpu' for an unnamed one).
    ``prompt_tokens``: the longest prompt expected. ``baseline_bytes``: the CPU process's memory before any
    model (measured by the caller); unused on GPUs.
    """
    from prl_core.logprobs import CHUNK_BYTES_PER_LOGIT

    on_gpu = device != "cpu"
    e = 2 if t.dtype == "bfloat16" else 4
    P, L, H, V = shape.params, shape.layers, shape.hidden, shape.vocab
    seq = prompt_tokens + t.max_tokens
    rows = t.micro_batch_size
    tokens = t.max_tokens_per_micro_batch or rows * seq  # positions of one micro-batch (its longest × rows)
    response_tokens = min(tokens, rows * t.max_tokens) if not t.max_tokens_per_micro_batch else tokens

    rest, grads, bucket, states_how = _model_states(shape, dtype=t.dtype, zero_stage=t.zero_stage, world=world,
                                                    deepspeed_gpu_bytes=deepspeed_gpu_bytes,
                                                    grad_accum_dtype=getattr(t, "grad_accum_dtype", "bf16"))
    if not with_reference:
        ref, ref_how = 0.0, "none: nothing reads it (ref_kl_metric: false, no KL loss, an estimator without it)"
    elif t.ref_offload:
        ref, ref_how = 0.0, f"on the CPU (ref_offload): {e * P / GIB:.1f} GiB of host memory, forward on the CPU"
    elif t.zero_stage == 3:
        ref, ref_how = e * P / world + e * shape.largest_layer, "partitioned over the ranks (ZeRO-3) + one gathered layer"
    else:
        ref, ref_how = float(e * P), f"{e} bytes x {P / 1e9:.3f} B parameters"

    weights = e * P
    if t.engine == "vllm":
        if on_gpu:
            profile_bytes = vllm_profile_bytes(shape, e, getattr(t, "rollout_max_num_batched_tokens", None),
                                               getattr(t, "rollout_max_num_seqs", None))
            graphs = VLLM_CUDAGRAPH_GIB * GIB
            work = max(VLLM_WORKSPACE_GIB * GIB, profile_bytes + graphs)  # beside the weights and the KV cache
            work_how = (f"work space {work / GIB:.2f} GiB (vLLM's profile pass at its batch {profile_bytes / GIB:.2f} "
                        f"GiB + CUDA graphs {graphs / GIB:.1f} GiB, at least {VLLM_WORKSPACE_GIB} GiB)")
            if t.rollout_kv_cache_gib is not None:
                kv_bytes = t.rollout_kv_cache_gib * GIB
                awake = weights + kv_bytes + work
                eng_how = f"vLLM: weights + {t.rollout_kv_cache_gib} GiB KV cache + {work_how}"
            else:
                awake = t.rollout_memory_utilization * capacity_gib * GIB
                kv_bytes = awake - weights - work
                eng_how = (f"vLLM's share {t.rollout_memory_utilization} of the device: weights {weights / GIB:.1f} GiB, "
                           f"{work_how}, the rest KV cache")
            per_token = L * 2 * shape.kv_dim * e
            need = rollouts_per_rank * seq
            eng_how += (f"; KV cache for ~{max(kv_bytes, 0) / per_token:,.0f} tokens, the rank's rollouts need up to "
                        f"{need:,}" + ("" if kv_bytes >= need * per_token else
                                       " (vLLM then runs them in waves: slower, not out of memory)"))
            asleep = VLLM_ASLEEP_GIB * GIB + graphs if t.rollout_sleep_level else awake
            if t.rollout_sleep_level:
                eng_how += (f"; asleep during the update (level {t.rollout_sleep_level}): ~{asleep / GIB:.1f} GiB "
                            f"({VLLM_ASLEEP_GIB} GiB + its CUDA graphs, which sleep keeps)")
        else:
            kv = (t.rollout_kv_cache_gib or 1.0) * GIB
            packed = 2 * V * H * e  # VocabParallelEmbedding keeps its weight beside its oneDNN copy: embedding, head
            awake = asleep = weights + packed + kv + VLLM_CPU_RUNTIME_GIB * GIB
            eng_how = (f"vLLM on the CPU: weights + oneDNN copies of the embedding and the LM head "
                       f"({packed / GIB:.2f} GiB) + {kv / GIB:.1f} GiB KV cache (zero-filled at start: all resident) + "
                       f"{VLLM_CPU_RUNTIME_GIB} GiB of its own; its CPU build keeps them while asleep")
    else:
        in_flight = min(256, rollouts_per_rank)  # the hf engine's batch_size
        cache = in_flight * seq * L * 2 * shape.kv_dim * e
        awake = weights + cache + in_flight * V * 4 * 3
        asleep = 0.0 if t.rollout_sleep_level else awake
        eng_how = f"transformers: weights + KV cache of {in_flight} rows x {seq} tokens + last-token logits"

    # Activations and the log-prob chunk at the moments of a phase where its peak can fall; a phase's peak is its
    # largest moment, and each term's value in that phase is its value at that moment.
    ck = t.gradient_checkpointing
    per_layer = profile.saved_checkpointed if ck else profile.saved
    boundary = 4 * H * e  # embedding output, final norm, the hidden states read off the decoder
    kept = tokens * (L * per_layer + boundary)  # what autograd holds when the backward pass starts
    in_backward = tokens * (profile.backward_checkpointed if ck else profile.backward)
    chunk_tokens = min(t.logprob_chunk_tokens, response_tokens)
    logits = CHUNK_BYTES_PER_LOGIT * chunk_tokens * V  # two fp32 chunk x V tensors at once
    head_grad = 4 * V * H  # the backward's fp32 accumulator of the LM head's gradient (each chunk adds into it in place)
    rows_h = response_tokens * H * e  # the response tokens' hidden states (and, backward, their gradient)
    chunk_fwd = logits + rows_h
    chunk_bwd = head_grad + logits + 2 * rows_h
    moments = {  # (model states, activations, log-prob chunk) in bytes
        "logprobs": {"decoder layers": (rest, tokens * (H * e + profile.nograd), 0.0),
                     "log-prob chunks": (rest, tokens * H * e, chunk_fwd)},
        "update": {"backward of the log-prob chunks": (rest, kept, chunk_bwd),
                   "backward of the last layer": (rest + (e * V * H if grads else 0.0), kept + in_backward, 0.0)},
    }
    if grads:
        moments["update"]["gradient reduction"] = (rest + grads + bucket, 0.0, 0.0)

    if on_gpu:
        base = (CUDA_CONTEXT_GIB + (NCCL_GIB if world > 1 else 0.0)) * GIB

        def over(_phase: str, acts: float, chunk: float) -> float:
            return base + FRAGMENTATION * (acts + chunk)
        over_how = (f"CUDA context {CUDA_CONTEXT_GIB} GiB" + (f" + NCCL {NCCL_GIB} GiB" if world > 1 else "")
                    + f" + {FRAGMENTATION:.0%} of the phase's activations and chunk (fragmentation)")
    else:
        def over(_phase: str, acts: float, chunk: float) -> float:
            return baseline_bytes
        over_how = "the process before any model (Python, torch, vLLM), measured"

    engine_in = {"rollout": awake, "logprobs": asleep, "update": asleep, "export": awake}
    at: dict[str, tuple[str, float, float, float, float]] = {"rollout": ("generation", rest, 0.0, 0.0, over("rollout", 0, 0))}
    added: dict[str, dict[str, float]] = {}
    for phase, ms in moments.items():
        totals = {name: st + a + c + over(phase, a, c) for name, (st, a, c) in ms.items()}
        added[phase] = {name: (st - rest + a + c) / GIB for name, (st, a, c) in ms.items()}
        name = max(totals, key=totals.get)
        st, a, c = ms[name]
        at[phase] = (name, st, a, c, over(phase, a, c))
    # The checkpoint's export runs after the weight sync, the engine awake: ZeRO-3 gathers one module at a time
    # onto rank 0's host (prl.training.weight_sync.policy_state_dict), so a rank holds one module's 16-bit
    # weights more; stages 0-2 hold whole weights already and save_pretrained copies them to the host one by one.
    gathered = float(e * shape.largest_layer) if t.zero_stage == 3 else 0.0
    at["export"] = ("module-by-module gather" if gathered else "writing whole weights", rest, 0.0, 0.0,
                    over("rollout", 0, 0))
    phases = {phase: st + ref + engine_in[phase] + a + c + o for phase, (_n, st, a, c, o) in at.items()}
    phases["export"] += gathered
    export_how = (f"ZeRO-3: one module's {e}-byte weights gathered at a time ({gathered / GIB:.2f} GiB), copied to "
                  f"rank 0's host ({e * P / GIB:.1f} GiB of host memory), engine awake; the whole model at once "
                  f"would add {e * P / GIB:.1f} GiB" if gathered else
                  "stages 0-2: the weights are whole already; each is copied to the host as it is written")
    acts_how = (f"{tokens:,} tokens x ({L} layers x {per_layer / 1024:.1f} KiB{' (checkpointed)' if ck else ''} kept "
                f"+ {(profile.backward_checkpointed if ck else profile.backward) / 1024:.1f} KiB for the layer in "
                f"backward{', recomputed first' if ck else ''}); no-gradient: one layer's {profile.nograd / 1024:.1f} KiB"
                f"/token; the update peaks at: {at['update'][0]}")
    chunk_how = (f"{CHUNK_BYTES_PER_LOGIT} B x {chunk_tokens} tokens x {V:,} vocabulary (fp32 logits, two at a time); "
                 f"backward + the LM head's fp32 gradient ({head_grad / GIB:.2f} GiB)")

    def by_phase(i: int) -> dict[str, float]:
        return {phase: v[i] / GIB for phase, v in at.items()}

    all_moments = [m for ms in moments.values() for m in ms.values()]
    terms = [
        Term("model states", max(by_phase(1).values()), states_how, by_phase(1)),
        Term("reference", ref / GIB, ref_how),
        Term("engine", awake / GIB, eng_how, {k: v / GIB for k, v in engine_in.items()}),
        Term("activations", max(m[1] for m in all_moments) / GIB, acts_how, by_phase(2)),
        Term("log-prob chunk", max(m[2] for m in all_moments) / GIB, chunk_how, by_phase(3)),
        Term("overhead", max(by_phase(4).values()), over_how, by_phase(4)),
        Term("export gather", gathered / GIB, export_how,
             {"rollout": 0.0, "logprobs": 0.0, "update": 0.0, "export": gathered / GIB}),
    ]
    peak_phase = max(phases, key=phases.get)
    peak = phases[peak_phase]
    fits = peak <= capacity_gib * GIB
    out = {"device": device, "capacity_gib": capacity_gib, "terms": [asdict(x) for x in terms],
           "phases_gib": {k: v / GIB for k, v in phases.items()}, "peak_phase": peak_phase, "peak_gib": peak / GIB,
           "fits": fits, "headroom_gib": capacity_gib - peak / GIB,
           "peak_moments": {phase: v[0] for phase, v in at.items()}, "moments_added_gib": added,
           "inputs": {"micro_batch_tokens": tokens, "sequence": seq, "prompt_tokens": prompt_tokens,
                      "layer_bytes_per_token": asdict(profile), "world": world}}
    return out


def fixes(plan: dict[str, Any], t) -> list[tuple[dict[str, Any], str]]:
    """What to change when the plan does not fit: ``(config changes, why)``, for the largest terms of the peak
    phase first. The caller re-plans with each change to say what it would give."""
    phase = plan["peak_phase"]
    by_term = {x["name"]: (x["phases"].get(phase, x["gib"]) if x["phases"] else x["gib"]) for x in plan["terms"]}
    out: list[tuple[dict[str, Any], str]] = []
    for name in sorted(by_term, key=by_term.get, reverse=True):
        if by_term[name] <= 0:
            continue
        if name == "activations" and phase != "rollout":
            if not t.gradient_checkpointing:
                out.append(({"gradient_checkpointing": True}, "activations: keep one layer boundary per layer"))
            if t.micro_batch_size > 1 and not t.max_tokens_per_micro_batch:
                out.append(({"micro_batch_size": max(1, t.micro_batch_size // 2)},
                            f"activations: half the rows per micro-batch (now {t.micro_batch_size})"))
        elif name == "engine" and t.engine == "vllm":
            if not t.rollout_sleep_level and phase != "rollout":
                out.append(({"rollout_sleep_level": 2}, "engine: give its memory back during the update"))
            if phase == "rollout" and t.rollout_memory_utilization > 0.1:
                out.append(({"rollout_memory_utilization": round(t.rollout_memory_utilization / 2, 2)},
                            f"engine: a smaller share of the device (now {t.rollout_memory_utilization})"))
        elif name in ("model states", "reference") and t.zero_stage < 3:
            out.append(({"zero_stage": 3}, f"{name}: partition it over the ranks (now ZeRO {t.zero_stage})"))
        elif name == "log-prob chunk" and t.logprob_chunk_tokens > 256:
            out.append(({"logprob_chunk_tokens": t.logprob_chunk_tokens // 4},
                        f"log-prob chunk: fewer tokens at once (now {t.logprob_chunk_tokens})"))
    unique: dict[str, tuple[dict[str, Any], str]] = {}
    for change, why in out:
        unique.setdefault(repr(sorted(change.items())), (change, why))
    return list(unique.values())


# ─── measurement: what a rank really holds, phase by phase ────────────────────────────────────────

class PeakMeter:
    """The peak memory of each phase of a step, measured where the trainer runs.

    GPU: the caching allocator's peak of allocated bytes (``torch.cuda.max_memory_allocated``, reset at every
    phase start) and, at the end of a phase, the device memory the process uses beyond what the allocator
    reserved (the CUDA context, NCCL: the plan's overhead). CPU: the process's peak resident set size (the
    kernel's VmHWM, reset at every phase start by writing 5 to /proc/self/clear_refs; where that is not allowed,
    the peak since the process started).
    """

    def __init__(self, device) -> None:
        import torch

        self.device = device
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self._torch = torch
        self.resettable = self.cuda or _reset_rss_peak()

    def start(self) -> None:
        """A phase begins: its peak is measured from here (CPU: after giving freed memory back)."""
        if self.cuda:
            self._torch.cuda.reset_peak_memory_stats(self.device)
            return
        release_freed_memory()
        if self.resettable:
            _reset_rss_peak()

    def peak_gib(self) -> float:
        """The peak since :meth:`start`: allocated bytes on a GPU, resident bytes on the CPU."""
        if self.cuda:
            return self._torch.cuda.max_memory_allocated(self.device) / GIB
        return _status_kib("VmHWM") * 1024 / GIB

    def now_gib(self) -> float:
        if self.cuda:
            return self._torch.cuda.memory_allocated(self.device) / GIB
        return _status_kib("VmRSS") * 1024 / GIB

    def outside_allocator_gib(self) -> float | None:
        """GPU: device memory in use that the allocator did not reserve (context, NCCL, other processes)."""
        if not self.cuda:
            return None
        free, total = self._torch.cuda.mem_get_info(self.device)
        return (total - free - self._torch.cuda.memory_reserved(self.device)) / GIB


HOST_MMAP_THRESHOLD = 4 << 20
"""Bytes from which glibc's malloc maps each allocation on its own (and unmaps it when freed), pinned by a CPU
trainer (:func:`pin_mmap_threshold`)."""


def _libc():
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def host_mmap_threshold() -> int | None:
    """The mmap threshold a CPU trainer runs with: the environment's ``MALLOC_MMAP_THRESHOLD_`` where the user set
    one (glibc read it at start; it wins), else :data:`HOST_MMAP_THRESHOLD`, pinned here; None without glibc."""
    import os

    env = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if env is not None and env.strip().isdigit():
        return int(env)
    return HOST_MMAP_THRESHOLD if pin_mmap_threshold() else None


def pin_mmap_threshold(nbytes: int = HOST_MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold (``mallopt(M_MMAP_THRESHOLD)``), so that every tensor of ``nbytes`` or more is
    its own mapping and goes back to the system when freed. By default glibc raises the threshold to the size
    of each large block freed (up to 32 MiB), after which activations come from its heaps and a phase's freed
    memory stays resident and fragments the next: measured on SmolLM2's README run, the update's peak RSS was
    17.2–18.4 GiB pinned off against 14.4 GiB pinned on (the plan: 14.7 GiB), at ~13% more time per step
    (page faults on fresh mappings). False where there is no glibc."""
    libc = _libc()
    try:
        return bool(libc is not None and libc.mallopt(-3, int(nbytes)) == 1)  # M_MMAP_THRESHOLD = -3
    except AttributeError:
        return False


def release_freed_memory() -> bool:
    """Give the pages of freed host memory back to the system (glibc's ``malloc_trim(0)``; False elsewhere).

    glibc keeps the memory of freed tensors smaller than its mmap threshold in its heaps, and that threshold
    rises with every large block freed (up to 32 MiB): a CPU trainer's activations then stay resident after
    the update, and the next phase starts from them (measured on SmolLM2: 12.8 GiB resident between steps
    with 4.5 GiB live). The trainer calls this at each phase start, so a phase's peak is its own."""
    libc = _libc()
    try:
        return bool(libc is not None and libc.malloc_trim(0) is not None)
    except AttributeError:
        return False


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
