"""The ``hf`` engine: ``transformers`` ``generate`` behind the same interface as vLLM.

For machines where vLLM does not install. Prompts are left-padded and batched
(``batch_size`` sequences per ``generate`` call, whole prompts × n samples via
``num_return_sequences``). Sampling settings are applied by logits processors this module
controls, in vLLM's order (temperature, then top-p; no top-k), and the model's own
``generation_config.json`` sampling defaults (top_k=50 from transformers, repetition
penalties, ...) are *not* applied, so both engines sample from the same distribution.

Per step, a recorder keeps the log-softmax of the distribution sampled from, and a stopping
criterion reads the chosen token's log-prob from it, tracks EOS / stop strings (checked on the
generated text only, like vLLM) and the context limit per row, and records where each row
finished. No ``output_scores`` tensors (steps × batch × vocab) are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import LogitsProcessor, StoppingCriteria

from prl.generation.engines.base import (Engine, EngineError, Sample, SamplingConfig, _torch_dtype, check_weights_dir, derive_seed,
                   response_text)


class HFEngine(Engine):
    """``transformers.AutoModelForCausalLM.generate`` behind the Engine interface."""

    name = "hf"

    def __init__(self, model_dir: str | Path, *, dtype: str = "float32", seed: int = 0,
                 max_model_len: int | None = None, logprobs_mode: str = "processed",
                 batch_size: int = 256, device: str | None = None, attn_implementation: str | None = None,
                 require_chat_template: bool = False) -> None:
        super().__init__(model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len,
                         logprobs_mode=logprobs_mode, require_chat_template=require_chat_template)
        import torch

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise EngineError(f"batch_size: expected an integer >= 1 (sequences per generate call), got {batch_size!r}")
        self.batch_size = batch_size
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.attn_implementation = attn_implementation
        self.model = self._load_model(self.model_dir)
        gen = self._original_generation_config
        eos = set()
        for value in (self.tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)):
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, (list, tuple)):
                eos.update(int(v) for v in value)
        self.eos_token_ids = sorted(eos)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = getattr(gen, "pad_token_id", None)
        if pad is None:
            pad = self.eos_token_ids[0] if self.eos_token_ids else 0
        self.pad_token_id = int(pad)
        if self.max_model_len is None:  # no context length in config.json: the tokenizer's, if it sets one
            limit = getattr(self.tokenizer, "model_max_length", None)
            self.max_model_len = int(limit) if isinstance(limit, int) and 0 < limit < 10**7 else None

    def _load_model(self, path: Path):
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig

        kw: dict[str, Any] = {"dtype": "auto" if self.dtype == "auto" else _torch_dtype(self.dtype)}
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        try:
            model = AutoModelForCausalLM.from_pretrained(str(path), **kw)
        except Exception as e:  # noqa: BLE001
            raise EngineError(f"{path}: transformers cannot load the model ({type(e).__name__}: {e})") from e
        model.to(self.device).eval()
        original = model.generation_config
        # A neutral generation config: generate() fills unset fields from the model's own
        # config (e.g. top_k=20, repetition_penalty=1.05 for some chat models) and then from
        # transformers' defaults (top_k=50); neither is part of SamplingConfig.
        # EOS ids are passed per call (None when SamplingConfig.ignore_eos), so none is kept here.
        model.generation_config = GenerationConfig(pad_token_id=getattr(original, "pad_token_id", None))
        self._original_generation_config = original
        del torch
        return model

    def _engine_version(self) -> str:
        import transformers

        return transformers.__version__

    def info(self) -> dict[str, Any]:
        d = super().info()
        d.update(device=str(self.device), batch_size=self.batch_size,
                 batching=f"left-padded batches of up to {self.batch_size} sequences (whole prompts x n)",
                 attn_implementation=getattr(self.model.config, "_attn_implementation", None))
        return d

    # ---- generation ----------------------------------------------------------------------------

    def generate(self, prompts: list[str], sampling: SamplingConfig | None = None, *,
                 progress: bool = False) -> list[Sample]:
        self._require_awake()
        self._event("generate")
        sampling = self._check_sampling(sampling)
        ids = self.encode(prompts)
        per_batch = max(1, self.batch_size // sampling.n)
        batches = [list(range(s, min(s + per_batch, len(ids)))) for s in range(0, len(ids), per_batch)]
        bar = None
        if progress and batches:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(ids) * sampling.n, desc="hf generate", unit="sample")
        samples: list[Sample] = []
        for b, rows in enumerate(batches):
            samples += self._generate_batch([ids[i] for i in rows], rows, sampling, derive_seed(sampling.seed, "hf", b))
            if bar is not None:
                bar.update(len(rows) * sampling.n)
        if bar is not None:
            bar.close()
        return samples

    def _generate_batch(self, batch_ids: list[list[int]], rows: list[int], sampling: SamplingConfig,
                        seed: int) -> list[Sample]:
        import torch
        from transformers import (GenerationConfig, LogitsProcessorList, StoppingCriteriaList,
                                  TemperatureLogitsWarper, TopPLogitsWarper)

        n = sampling.n
        width = max(len(x) for x in batch_ids)
        input_ids = torch.full((len(batch_ids), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(batch_ids), width), dtype=torch.long)
        for r, x in enumerate(batch_ids):  # left padding
            input_ids[r, width - len(x):] = torch.tensor(x)
            attention[r, width - len(x):] = 1
        # Per-sequence limit: max_tokens or what is left of the context.
        limits = []
        for x in batch_ids:
            room = sampling.max_tokens if self.max_model_len is None else min(sampling.max_tokens,
                                                                                self.max_model_len - len(x))
            limits += [room] * n
        recorder = _LogprobRecorder(enabled=sampling.logprobs)
        processors: list = []
        if self.logprobs_mode == "raw" and not sampling.greedy:
            processors.append(recorder)
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1.0:
                processors.append(TopPLogitsWarper(sampling.top_p))
        if recorder not in processors:
            processors.append(recorder)
        criteria = _StopCriteria(
            prompt_width=width, limits=torch.tensor(limits), eos_ids=[] if sampling.ignore_eos else self.eos_token_ids,
            stop=sampling.stop, tokenizer=self.tokenizer, recorder=recorder,
        )
        # Sampling flags only when sampling (transformers warns about them under greedy decoding);
        # top_k=0 explicitly, or transformers' default top_k=50 would apply.
        flags = {} if sampling.greedy else {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
        config = GenerationConfig(
            do_sample=not sampling.greedy, num_beams=1, **flags,
            max_new_tokens=max(limits), num_return_sequences=n,
            eos_token_id=None if sampling.ignore_eos else self.eos_token_ids, pad_token_id=self.pad_token_id,
            repetition_penalty=1.0, use_cache=True, return_dict_in_generate=False, output_scores=False,
        )
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), generation_config=config,
                logits_processor=LogitsProcessorList(processors), stopping_criteria=StoppingCriteriaList([criteria]),
            )
        generated = out[:, width:].cpu()
        logprobs = torch.stack(criteria.logprobs, dim=1) if sampling.logprobs and criteria.logprobs else None
        samples = []
        for seq in range(generated.shape[0]):
            r = seq // n
            length = int(criteria.done_at[seq]) if criteria.done_at[seq] > 0 else generated.shape[1]
            token_ids = generated[seq, :length].tolist()
            reason = criteria.reason[seq]
            text = response_text(self.tokenizer, token_ids, sampling.stop, reason == _STOP_STRING)
            samples.append(Sample(
                prompt_index=rows[r], sample_index=seq % n, text=text, token_ids=token_ids,
                logprobs=logprobs[seq, :length].tolist() if logprobs is not None else None,
                finish_reason="stop" if reason in (_EOS, _STOP_STRING) else "length", prompt_tokens=len(batch_ids[r]),
                n_tokens=len(token_ids),
            ))
        return samples

    # ---- weights ----------------------------------------------------------------------------

    def update_weights(self, model_dir: str | Path) -> None:
        """Load weights saved by a trainer (same architecture) into this engine's model.

        With a config.json next to the weights (``save_pretrained``) the model is re-read with
        ``from_pretrained``; with weight files only, their tensors are copied into the running model.
        """
        path = check_weights_dir(model_dir, self.config).resolve()
        if (path / "config.json").is_file():
            self.model = self._load_model(path)
        else:
            self._copy_weights(path)
        self.weights_path = path
        self.weight_updates += 1
        self._event("update_weights(disk)")

    def _copy_weights(self, path: Path) -> None:
        import torch

        state: dict = {}
        files = sorted(path.glob("*.safetensors"))
        if files:
            from safetensors.torch import load_file

            for f in files:
                state.update(load_file(str(f)))
        else:
            for f in sorted(path.glob("*.bin")):
                state.update(torch.load(f, map_location="cpu", weights_only=True))
        self._copy_state(state, str(path))

    def load_weight_groups(self, groups) -> None:
        """Copy ``(names, tensors)`` groups (a trainer's ``state_dict`` names) into the model, from memory, one
        group at a time (each is copied before the next is produced); every weight must arrive once."""
        import torch

        own = self.model.state_dict()
        seen: set[str] = set()
        with torch.no_grad():
            for names, tensors in groups:
                for name, tensor in zip(names, tensors):
                    if name not in own:
                        raise EngineError(f"the weights handed over in memory: a tensor the model does not have: {name}")
                    if tuple(tensor.shape) != tuple(own[name].shape):
                        raise EngineError(f"the weights handed over in memory: {name} has shape {tuple(tensor.shape)}, "
                                          f"the model {tuple(own[name].shape)}")
                    own[name].copy_(tensor)
                    seen.add(name)
        loaded = {own[k].data_ptr() for k in seen}
        missing = sorted(k for k in set(own) - seen if own[k].data_ptr() not in loaded)  # tied ones are fine
        if missing:
            raise EngineError(f"the weights handed over in memory: weights missing for {', '.join(missing[:5])}")
        self.weight_updates += 1
        self.memory_updates += 1
        self._event("load_weight_groups")

    def _sleep(self, level: int) -> None:
        """Both levels move the weights to the CPU (transformers keeps no KV cache between calls) and return
        the freed blocks to the device; :meth:`_wake_up` with 'weights' moves them back."""
        import torch

        self.model.to("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _wake_up(self, tags: list[str]) -> None:
        if "weights" in tags:
            self.model.to(self.device)

    loads_from_memory = True

    def _copy_state(self, state: dict, source: str) -> None:
        import torch

        own = self.model.state_dict()
        unexpected = sorted(set(state) - set(own))
        if unexpected:
            raise EngineError(f"{source}: tensors the model does not have: {', '.join(unexpected[:5])}")
        loaded_ptrs = {own[k].data_ptr() for k in state}
        missing = sorted(k for k in set(own) - set(state) if own[k].data_ptr() not in loaded_ptrs)  # tied ones are fine
        if missing:
            raise EngineError(f"{source}: weights missing for {', '.join(missing[:5])}")
        for k, v in state.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise EngineError(f"{source}: {k} has shape {tuple(v.shape)}, the model {tuple(own[k].shape)}")
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)

    def close(self) -> None:
        self.model = None


_EOS, _STOP_STRING, _LENGTH = 1, 2, 3


class _LogprobRecorder(LogitsProcessor):
    """A logits processor that keeps the log-softmax of this step's scores (one step only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = None

    def __call__(self, input_ids, scores):
        import torch

        if self.enabled:
            self.last = torch.log_softmax(scores.float(), dim=-1)
        return scores


class _StopCriteria(StoppingCriteria):
    """Per row: EOS, stop strings in the generated text, the row's token limit; log-prob of each token."""

    def __init__(self, *, prompt_width: int, limits, eos_ids: list[int], stop: tuple[str, ...], tokenizer,
                 recorder: _LogprobRecorder) -> None:
        import torch

        self.prompt_width = prompt_width
        self.limits = limits
        self.eos = torch.tensor(eos_ids, dtype=torch.long) if eos_ids else None
        self.stop = stop
        self.tokenizer = tokenizer
        self.recorder = recorder
        self.window = 4 * max((len(s) for s in stop), default=0) + 8
        self.done_at = torch.zeros(len(limits), dtype=torch.long)  # generated length when finished (0: not yet)
        self.reason = [0] * len(limits)
        self.logprobs: list = []

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        step = input_ids.shape[1] - self.prompt_width  # tokens generated so far (>= 1)
        new = input_ids[:, -1].cpu()
        if self.recorder.enabled and self.recorder.last is not None:
            self.logprobs.append(self.recorder.last.gather(1, input_ids[:, -1:]).squeeze(1).cpu())
        active = self.done_at == 0
        eos_now = torch.zeros_like(active)
        if self.eos is not None:
            eos_now = active & torch.isin(new, self.eos)
        string_now = torch.zeros_like(active)
        if self.stop:
            rows = (active & ~eos_now).nonzero().squeeze(1).tolist()
            if rows:
                lo = max(self.prompt_width, input_ids.shape[1] - self.window)
                texts = self.tokenizer.batch_decode(input_ids[rows, lo:].cpu(), skip_special_tokens=True,
                                                    clean_up_tokenization_spaces=False)
                for r, text in zip(rows, texts):
                    if any(s in text for s in self.stop):
                        string_now[r] = True
        length_now = active & ~eos_now & ~string_now & (step >= self.limits)
        for mask, reason in ((eos_now, _EOS), (string_now, _STOP_STRING), (length_now, _LENGTH)):
            for r in mask.nonzero().squeeze(1).tolist():
                self.reason[r] = reason
        self.done_at[eos_now | string_now | length_now] = step
        return (self.done_at > 0).to(input_ids.device)
