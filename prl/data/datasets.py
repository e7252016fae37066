"""Evaluation data: the five bundled benchmarks, the synthetic task and user files, loaded into
one problem schema with stable ids and normalised golds
(docs/architecture.md §Benchmarks and their golds).

    Problem(dataset, problem_id, problem, gold_normalized, gold_raw, meta)

``gold`` is what the verifier compares against; ``gold_raw`` is the field exactly as the file
has it (JSON-encoded), kept beside it. Normalisation, for every data set (bundled, synthetic, user files, imports): ``$…$`` wrappers are
stripped, e-notation (``4.5e33``) is rewritten as ``4.5 \\times 10^{33}`` (Math-Verify reads
``4.5e33`` as 4.5·e·33) and integral floats become integers. Per data set, before that:

- minerva_math: the ``answer`` field is a whole solution; the gold is its (last) ``\\boxed{}``
  content.
- olympiad_bench: ``answer`` is a list; ``$…$`` wrappers are stripped and several answers are
  joined with ", ". A null ``context`` is recorded in ``meta`` (some problems refer to a part
  that is not there).
- amc23: float answers (``27.0``) become integers when integral.
- aime24: zero padding (``'025'``) is removed.

Golds that Math-Verify does not read whole are flagged ``meta["gold_raw_only"] = True`` with
``meta["gold_flag"]`` saying why (:func:`gold_flag`): a correct answer written any other way
than the raw string will be scored wrong. This finds the six listed in
docs/architecture.md §Benchmarks and their golds (minerva #27, #38, #268, #269; olympiad #34, #96)
and a few more of the same kinds.
"""

from __future__ import annotations

from prl_core.errors import UserError
import functools
import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

BENCHMARKS = ("math500", "minerva_math", "olympiad_bench", "aime24", "amc23")
SYNTHETIC = "synth_test"
DATASETS = BENCHMARKS + (SYNTHETIC,)


class DatasetError(UserError, ValueError):
    """A data file or row is unusable; the message names the file, line and field."""


@dataclass(frozen=True)
class Problem:
    dataset: str
    problem_id: str
    problem: str
    gold_normalized: str
    """The gold answer as the verifier compares it (normalize_gold; the store's gold_normalized column)."""
    gold_raw: str
    """The gold answer as the data set wrote it, JSON-encoded (the store's gold column)."""
    meta: dict[str, Any] = field(default_factory=dict)


# ─── gold normalisation ─────────────────────────────────────────────────────────────────────

def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` (or ``\\fbox{…}``) in ``text``, braces balanced; None if absent.

    Linear in ``len(text)``: the scan from one opening stops at the next opening, because an
    earlier box that has not closed by then cannot close after a later box that never closed.
    """
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    limit = len(text)
    for start in reversed(starts):
        depth, i = 1, start
        while i < limit and depth:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        if depth == 0:
            return text[start:i - 1].strip()
        limit = start - 1  # the later box's own "{"
    return None


_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)(?![\w.])")


def e_notation_to_latex(s: str) -> str:
    """``4.5e33`` → ``4.5 \\times 10^{33}`` (only numbers, never inside words)."""
    return _E_NOTATION.sub(lambda m: f"{m.group(1)} \\times 10^{{{int(m.group(2))}}}", s)


def _strip_dollars(s: str) -> str:
    s = s.strip()
    if s.endswith("$."):  # a sentence period after the math ("$(-\infty, 0) \cup\{1\}$.")
        s = s[:-1]
    while len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1].strip()
    return s


def normalize_gold(dataset: str, answer: Any) -> str:
    """The verifier's gold for one raw ``answer`` field of ``dataset``: the data set's own step, then the
    normalisation every data set gets (:func:`generic_gold`)."""
    return generic_gold(_dataset_gold(dataset, answer))


def generic_gold(gold: str) -> str:
    """What every gold gets, whatever its data set: ``$…$`` stripped, e-notation rewritten."""
    return e_notation_to_latex(_strip_dollars(gold))


def _dataset_gold(dataset: str, answer: Any) -> str:
    if dataset == "minerva_math":
        boxed = last_boxed(str(answer))
        return boxed if boxed is not None else str(answer).strip()
    if dataset == "olympiad_bench":
        items = answer if isinstance(answer, list) else [answer]
        return ", ".join(_strip_dollars(str(a)) for a in items)
    if dataset == "amc23":
        try:
            value = float(answer)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {str(answer)[:60]!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {answer!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if dataset == "aime24":
        s = _strip_dollars(str(answer))
        return (s.lstrip("0") or "0") if s.isdigit() else s
    if isinstance(answer, float) and answer.is_integer():
        return str(int(answer))
    return str(answer)


_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_TEXT_ARG = re.compile(r"\\(?:text|mathrm|mbox|operatorname)\s*\{[^{}]*\}")
_LONE_LETTER = re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])")


@functools.lru_cache(maxsize=4096)
def gold_flag(gold: str) -> str | None:
    """Why a gold can only match as written, or None if Math-Verify reads it whole.

    ``"raw_only"``: parsing yields no math object, only the string itself, so a correct answer
    written any other way is scored wrong. ``"parse_drops_symbols"``: the gold has variables
    (``\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}``) but parses to a constant fragment (``2/3``),
    so a response is compared with the fragment, not the gold. Both are flagged, not fixed:
    the scores they give are the published protocol's, and the user should see them.
    """
    from math_verify import parse

    try:
        parsed = parse("\\boxed{" + gold + "}", parsing_timeout=5)
    except BaseException:  # TimeoutException derives from BaseException
        return "raw_only"
    objects = [x for x in parsed if not isinstance(x, str)]
    if not objects:
        return "raw_only"
    letters = _LONE_LETTER.findall(_LATEX_CMD.sub(" ", _TEXT_ARG.sub(" ", gold)))
    symbols = getattr(objects[0], "free_symbols", None)
    if letters and symbols is not None and not symbols:
        return "parse_drops_symbols"
    return None


# ─── loading ────────────────────────────────────────────────────────────────────────────────

def bundled_path(dataset: str) -> Path:
    if dataset not in BENCHMARKS:
        raise DatasetError(f"dataset: unknown {dataset!r}; bundled: {', '.join(BENCHMARKS)} (or pass a file path)")
    return Path(str(resources.files("prl") / "data" / "benchmarks" / f"{dataset}.jsonl"))


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, not a data file") from None
    with fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:  # per line, so the error names it
                yield line_no, DatasetError(f"{path}:{line_no}: not UTF-8 (byte {raw[e.start]:#04x} at column "
                                            f"{e.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as e:
                yield line_no, DatasetError(f"{path}:{line_no}: malformed JSON ({e.msg} at column {e.colno})")
            except RecursionError:
                yield line_no, DatasetError(f"{path}:{line_no}: JSON nested too deeply")


def _problem_text(dataset: str, row: dict) -> str:
    if dataset == "olympiad_bench" and row.get("context"):
        return f"{row['context']}\n\n{row['problem']}"
    return row["problem"]


def _meta(dataset: str, row: dict) -> dict[str, Any]:
    keep = {k: v for k, v in row.items() if k not in ("problem", "answer", "solution", "question")}
    if dataset == "olympiad_bench" and "context" in row and row["context"] is None:
        keep["context_missing"] = True
    return keep


def load_file(path: str | Path, dataset: str | None = None, *, strict: bool = True) -> tuple[list[Problem], list[str]]:
    """Load a JSONL file of rows with ``problem`` and ``answer`` into :class:`Problem` s.

    ``dataset`` names the normalisation (a bundled name) or, for any other file, the data set
    label (default: the file's stem). Stable ids: the row's ``id``/``unique_id``/``idx`` when it
    has one, else its line number. ``strict`` raises :class:`DatasetError` on the first bad row;
    lenient mode skips bad rows and returns their messages.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        return _load_parquet(path, dataset, strict=strict)
    name = dataset or path.stem
    problems, skipped, seen = [], [], set()
    for line_no, row in _rows(path):
        err = _check_row(path, line_no, row)
        if err is None:
            pid = _stable_id(row, line_no)
            if pid in seen:
                err = f"{path}:{line_no}: duplicate id {pid!r}"
            else:
                seen.add(pid)
        if err is not None:
            if strict:
                raise DatasetError(err + " (use --lenient to skip bad rows)")
            skipped.append(err)
            continue
        try:
            gold = normalize_gold(name, row["answer"])
        except (ValueError, TypeError, OverflowError) as e:  # e.g. a non-numeric answer in a file named amc23
            err = f"{path}:{line_no}: field 'answer' cannot be read as a {name} answer ({e})"
            if strict:
                raise DatasetError(err + " (use --lenient to skip bad rows)") from None
            skipped.append(err)
            continue
        problems.append(Problem(name, f"{name}/{pid}", _problem_text(name, row), gold,
                                json.dumps(row["answer"], ensure_ascii=False), _meta(name, row)))
    return problems, skipped


def _stable_id(row: dict, line_no: int) -> str:
    for key in ("id", "unique_id", "idx", "problem_id"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    return f"line{line_no}"


def _check_row(path: Path, line_no: int, row: Any) -> str | None:
    if isinstance(row, DatasetError):
        return str(row)
    if not isinstance(row, dict):
        return f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}"
    if not isinstance(row.get("problem"), str) or not row["problem"].strip():
        return f"{path}:{line_no}: field 'problem' is missing or not a non-empty string"
    answer = row.get("answer")
    if answer is None or answer == "" or answer == []:
        return f"{path}:{line_no}: field 'answer' is missing or empty"
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float, list)):
        return f"{path}:{line_no}: field 'answer' has unsupported type {type(answer).__name__}"
    if isinstance(answer, list) and not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in answer):
        return f"{path}:{line_no}: field 'answer' is a list with non-scalar items"
    return None


def _load_parquet(path: Path, dataset: str | None, *, strict: bool) -> tuple[list[Problem], list[str]]:
    import duckdb

    con = duckdb.connect()
    try:
        rel = con.execute("SELECT * FROM read_parquet(?)", [str(path)])
    except duckdb.Error as e:
        raise DatasetError(f"{path}: not a readable Parquet file ({e})") from None
    cols = [d[0] for d in rel.description]
    name = dataset or path.stem
    problems, skipped = [], []
    for i, values in enumerate(rel.fetchall(), start=1):
        row = dict(zip(cols, values))
        err = _check_row(path, i, row)
        if err is not None:
            err = err.replace(f"{path}:{i}:", f"{path}: row {i}:")
            if strict:
                raise DatasetError(err + " (use --lenient to skip bad rows)")
            skipped.append(err)
            continue
        pid = _stable_id(row, i)
        problems.append(Problem(name, f"{name}/{pid}", row["problem"], normalize_gold(name, row["answer"]),
                                json.dumps(row["answer"], ensure_ascii=False, default=str), _meta(name, row)))
    return problems, skipped


def load_dataset(name_or_path: str, *, strict: bool = True, flag_raw_only: bool = True) -> tuple[list[Problem], list[str]]:
    """A bundled benchmark by name, the synthetic test set (``synth_test``), or a file path."""
    if name_or_path == SYNTHETIC:
        from prl.data import synthetic

        problems = [Problem(SYNTHETIC, f"{SYNTHETIC}/{r['id']}", r["problem"], r["answer"], json.dumps(r["answer"]),
                            {"level": r["level"], "solution": r["solution"]}) for r in synthetic.generate("test", synthetic.TEST_SIZE)]
        return problems, []
    if name_or_path in BENCHMARKS:
        problems, skipped = load_file(bundled_path(name_or_path), name_or_path, strict=True)
    elif Path(name_or_path).suffix in (".jsonl", ".parquet") or Path(name_or_path).exists():
        problems, skipped = load_file(name_or_path, strict=strict)
    else:
        raise DatasetError(
            f"dataset: unknown {name_or_path!r}; use one of {', '.join(DATASETS)} or a .jsonl/.parquet path"
        )
    return (flag_golds(problems) if flag_raw_only else problems), skipped


def flag_golds(problems: list[Problem]) -> list[Problem]:
    """``problems`` with ``meta["gold_raw_only"]`` and ``meta["gold_flag"]`` set where :func:`gold_flag`
    finds a reason (one Math-Verify parse per gold, ~6 ms: flag the problems a run uses, not the file)."""
    out = []
    for p in problems:
        flag = gold_flag(p.gold_normalized)
        out.append(p if flag is None else Problem(p.dataset, p.problem_id, p.problem, p.gold_normalized, p.gold_raw,
                                                  {**p.meta, "gold_raw_only": True, "gold_flag": flag}))
    return out
