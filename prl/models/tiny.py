"""The embedded tiny model: a byte-level BPE tokenizer trained on the synthetic task, a chat
template, and a small Llama-architecture causal LM initialised from fixed seeds.

Llama, not Qwen2, on purpose (docs/architecture.md §The tokenizer trap): ``AutoTokenizer`` — and
therefore vLLM — loads a directory whose config says ``qwen2`` with Qwen2's own pre-tokenizer
whatever tokenizer.json says, so a custom BPE would load with different ids. With ``llama`` the file's tokenizer is
kept; :func:`check_tokenizer_round_trip` verifies it after every build.

head_dim = hidden / heads = 32: vLLM's CPU attention needs head_dim ≥ 32.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from prl.data import synthetic
from prl.generation.prompts import build_prompt
from prl.models.build import build_model

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Architecture and tokenizer of the embedded model (Llama family)."""

    vocab_size: int = 512
    """BPE vocabulary size target, special tokens included."""
    hidden_size: int = 128
    """Model width; hidden_size / num_attention_heads must be >= 32 for vLLM CPU."""
    intermediate_size: int = 384
    """MLP width."""
    num_hidden_layers: int = 4
    """Transformer blocks."""
    num_attention_heads: int = 4
    """Query heads (head_dim = hidden_size / heads = 32)."""
    num_key_value_heads: int = 2
    """KV heads (grouped-query attention, as Llama-3.2 and Qwen2.5)."""
    max_position_embeddings: int = 4096
    """Context length."""
    tokenizer_corpus_size: int = 4000
    """Train-split problems whose text trains the tokenizer."""


def _train_tokenizer(spec: TinyModelSpec, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    records = synthetic.generate("train", spec.tokenizer_corpus_size, seed=seed)
    # The BPE must also see the chat markup and the system prompt it will encode at every call.
    texts = list(synthetic.corpus(records))
    texts += [_render_without_tokenizer(r["problem"]) for r in records[:200]]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=spec.max_position_embeddings,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _render_without_tokenizer(problem: str) -> str:
    from prl.generation.prompts import messages_for

    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages_for(problem))
    return out + "<|im_start|>assistant\n"


def build_tiny(out_dir: str | Path, *, seed: int = 0, spec: TinyModelSpec | None = None) -> Path:
    """Build tokenizer + randomly initialised model into ``out_dir`` (a standard HF directory).

    Same seed and spec → byte-identical files on one machine, and across x86-64 CPUs whose torch CPU
    capability is AVX2 or AVX512 (measured: the same hashes natively on AVX512 and under
    ``ATEN_CPU_CAPABILITY=avx2``). Without torch's vector kernels (``ATEN_CPU_CAPABILITY=default``;
    builds for other CPUs may differ too) a third of the weights differ in the last bits: ``normal_``'s
    scalar and vectorised paths round differently (docs/reproducibility.md).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = spec or TinyModelSpec()
    if spec.hidden_size // spec.num_attention_heads < 32:
        raise ValueError("hidden_size / num_attention_heads must be >= 32 (vLLM CPU attention)")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(spec, seed)
    out = build_model(out_dir, kind="tiny", seed=seed, spec=spec, tokenizer=tok, config_cls=LlamaConfig,
                      model_cls=LlamaForCausalLM, vocab_size=len(tok), eos_token_ids=tok.eos_token_id)
    check_tokenizer_round_trip(out, tok)
    return out


def check_tokenizer_round_trip(model_dir: str | Path, trained=None) -> None:
    """``AutoTokenizer.from_pretrained(dir)`` — what vLLM uses — must give the training ids."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(model_dir))
    reference = trained if trained is not None else loaded
    samples = [r["problem"] + "\n\n" + r["solution"] for r in synthetic.generate("test", 8)]
    samples.append(build_prompt(loaded, samples[0]))
    for text in samples:
        a = loaded(text, add_special_tokens=False)["input_ids"]
        b = reference(text, add_special_tokens=False)["input_ids"]
        if a != b or loaded.decode(a) != text:
            raise RuntimeError(
                f"{model_dir}: AutoTokenizer does not reproduce the training token ids "
                f"({type(loaded).__name__}); see docs/architecture.md §The tokenizer trap"
            )


def file_hashes(model_dir: str | Path) -> dict[str, str]:
    """sha256 of every file in a model directory (for reproducibility checks and manifests)."""
    root = Path(model_dir)
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }
