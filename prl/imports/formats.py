"""Other tools' generation files, read as each tool writes them, into one row schema.

    SourceRow(ref, problem_id, problem_text, responses, labels, answers, gold, sample_indices)

One row is one problem as the source file has it, with its response(s): lighteval and
lm-evaluation-harness keep a problem's n responses in one row, Inspect and verl one response per
row (an Inspect epoch is its sample index). ``labels`` are the source's own per-response scores
(1/0 for a pass/fail grader; a response counts as correct in its source when its label is > 0.5),
``answers`` what the source's grader extracted, where it wrote that down.

Formats (``--format``):

===========  =================================================================================
lighteval    the "details" Parquet file (``details_<task>_<time>.parquet``): ``example`` (the
             prompt with the problem), ``predictions`` (list), ``gold`` (list), ``metrics``
             (struct; ``extractive_match`` or the only metric is the label, when there is one
             prediction), ``specifics.extracted_predictions``. The ``results_<time>.json``
             beside it gives the tool's commit, the model and the reported accuracy.
lm-eval      an lm-evaluation-harness ``--log_samples`` file (``samples_<task>_<time>.jsonl``):
             ``doc_id``, ``doc`` (the data set row), ``resps`` (one list per request; with
             ``repeats: n`` one request holds n responses), ``filtered_resps``, the task's
             metrics per row. The ``results_<time>.json`` beside it gives version, model and
             the reported accuracy.
inspect      an Inspect AI ``.eval`` log, read with Inspect's own ``read_eval_log``: one
             sample per (id, epoch); ``output.completion`` is the response, the first scorer's
             value (C/I/P/N or a number) the label and its ``answer`` the extraction.
verl         a verl validation dump (``<step>.jsonl`` from ``trainer.validation_data_dir``,
             written by ``RayPPOTrainer._dump_generations``): ``input`` (the rendered prompt),
             ``output``, ``score`` (the label; verl's rewards may be -1/1), ``gts`` where
             the version writes it.
json         a JSON array of objects or JSONL, with ``--fields`` mapping our names to the
             file's (dotted paths reach into objects): ``problem`` and ``response`` are needed
             (a response may be a list of n), ``label``, ``id``, ``answer`` (the source's
             extraction), ``gold`` and ``sample`` (an explicit sample index) are optional.
             Without ``--fields`` the first present of the usual names is taken (listed in
             :data:`FIELD_GUESSES`) and the mapping used is recorded.
===========  =================================================================================

Every error names the file and the line or row (``FormatError``); a file is read whole before
anything is stored, so a bad file changes nothing.
"""

from __future__ import annotations

from prl_core.errors import UserError
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

FORMATS = ("auto", "lighteval", "lm-eval", "inspect", "verl", "json")

FIELD_NAMES = ("problem", "response", "label", "id", "answer", "gold", "sample")
"""Our names for the fields of a ``json`` row (``--fields problem=question,response=output,…``)."""

FIELD_GUESSES: dict[str, tuple[str, ...]] = {
    "problem": ("problem", "question", "prompt", "input", "query", "instruction"),
    "response": ("response", "generated_output", "output", "completion", "generation", "prediction", "responses",
                 "model_output", "answer_text"),
    "label": ("correct", "is_correct", "label", "score", "reward", "accuracy", "acc"),
    "id": ("id", "problem_id", "unique_id", "idx", "uid"),
    "answer": ("extracted_answer", "pred", "parsed_answer"),
    "gold": ("answer", "gold", "ground_truth", "expected_answer", "target", "expected_expected_answer", "solution"),
    "sample": ("sample_idx", "sample_index", "sample"),
}
"""Without ``--fields``: the file's keys tried, in order, for each of our names."""


class FormatError(UserError, ValueError):
    """A source file cannot be read as the named format; the message names the file and line/row."""


@dataclass
class SourceRow:
    """One problem's response(s) as the source file holds them."""

    ref: str
    """Where it came from: ``FILE:LINE`` (JSONL), ``FILE: row N`` (Parquet, JSON arrays) or ``FILE: sample ID epoch E``."""
    problem_id: str | None
    """The source's id for the problem, where it has one (matched against the benchmark's ids)."""
    problem_text: str | None
    """The problem as the source wrote it, or a prompt that contains it."""
    responses: list[str]
    labels: list[float | None]
    """The source's own score of each response (None where it wrote none per response)."""
    answers: list[str | None]
    """The answer the source's grader extracted from each response, where it wrote one."""
    gold: str | None = None
    """The source's gold answer (shown next to ours; golds differ between tools)."""
    sample_indices: list[int] | None = None
    """Explicit sample indices (Inspect's epochs, a json ``sample`` field); else assigned in file order."""


@dataclass
class SourceFile:
    """A read source file: its rows and what it says about itself."""

    path: str
    format: str
    rows: list[SourceRow]
    tool: str
    tool_version: str | None = None
    model_name: str | None = None
    reported_accuracy: float | None = None
    """The accuracy the tool reported for this file (its results file or log), where it reports one."""
    reported_metric: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """Format specifics worth keeping (task name, field mapping used, sampling settings the file records)."""


_MISSING = object()

# ─── labels ─────────────────────────────────────────────────────────────────────────────────

_TRUE = {"true", "correct", "c", "yes", "pass", "passed", "1", "1.0"}
_FALSE = {"false", "incorrect", "wrong", "i", "no", "fail", "failed", "0", "0.0"}
_INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


def to_label(value: Any, where: str) -> float | None:
    """A source's per-response score as a float (True/'C'/'correct' → 1.0, False/'I' → 0.0, numbers as they are)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        s = value.strip()
        if s in _INSPECT_VALUES:
            return _INSPECT_VALUES[s]
        low = s.lower()
        if low in _TRUE:
            return 1.0
        if low in _FALSE:
            return 0.0
        try:
            return float(s)
        except ValueError:
            pass
    raise FormatError(f"{where}: label {str(value)[:60]!r} is not a score (a boolean, a number, C/I/P/N, "
                      "correct/incorrect)")


def label_correct(label: float | None) -> bool | None:
    """Whether a source label counts as correct (> 0.5); None where there is no label."""
    return None if label is None else label > 0.5


# ─── readers ────────────────────────────────────────────────────────────────────────────────

def _jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) of a JSONL file; a line that is not JSON is a FormatError naming it."""
    try:
        fh = path.open("rb")
    except OSError as e:
        raise FormatError(f"{path}: cannot be read ({e.strerror})") from None
    with fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield line_no, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise FormatError(f"{path}:{line_no}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            except json.JSONDecodeError as e:
                raise FormatError(f"{path}:{line_no}: not JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise FormatError(f"{path}:{line_no}: JSON nested too deeply") from None


def _is_json_array(path: Path) -> bool:
    """Whether the file is one JSON array (its first non-blank character is "["), not JSONL."""
    try:
        with path.open("rb") as fh:
            return fh.read(4096).lstrip().startswith(b"[")
    except OSError as e:
        raise FormatError(f"{path}: cannot be read ({e.strerror})") from None


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(ref, object) of a JSON array file or a JSONL file (told apart by the first character)."""
    if _is_json_array(path):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise FormatError(f"{path}: not UTF-8 (at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}:{e.lineno}: not JSON ({e.msg} at column {e.colno})") from None
        for i, obj in enumerate(data, start=1):
            yield f"{path}: item {i}", obj
    else:
        for line_no, obj in _jsonl(path):
            yield f"{path}:{line_no}", obj


def _jsonl_of(path: Path, fmt: str) -> Iterator[tuple[int, Any]]:
    """The rows of a JSONL file a tool writes one object per line; a JSON array is named as the wrong format."""
    if _is_json_array(path):
        raise FormatError(f"{path}: a JSON array, not a {fmt} file (one JSON object per line); for a JSON array "
                          "give --format json")
    return _jsonl(path)


def _need_object(ref: str, obj: Any, fmt: str) -> dict:
    if not isinstance(obj, dict):
        raise FormatError(f"{ref}: expected a JSON object, got {type(obj).__name__} (is this a {fmt} file?)")
    return obj


def _missing(ref: str, obj: dict, keys: tuple[str, ...], fmt: str) -> None:
    absent = [k for k in keys if k not in obj]
    if absent:
        present = ", ".join(sorted(map(str, obj))[:12])
        raise FormatError(f"{ref}: field(s) {', '.join(absent)} missing: not a {fmt} file as that tool writes it "
                          f"(fields present: {present})")


def _text(ref: str, value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise FormatError(f"{ref}: field {name!r} is {type(value).__name__}, expected text")
    return value


def _companion_results(path: Path) -> Path | None:
    """The ``results_<time>.json`` written with a ``details_/samples_<task>_<time>`` file: same time stamp, same
    folder, else the only results file there."""
    stamp = re.search(r"_(\d{4}-\d{2}-\d{2}T[\d\-.:]+)\.(?:parquet|jsonl)$", path.name)
    if stamp:
        exact = path.with_name(f"results_{stamp.group(1)}.json")
        if exact.is_file():
            return exact
    found = sorted(path.parent.glob("results_*.json"))
    return found[0] if len(found) == 1 else None


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: not a readable JSON results file ({e})") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path}: expected a JSON object")
    return data


def read_lighteval(path: Path) -> SourceFile:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # truncated, not Parquet
        raise FormatError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    needed = ("example", "predictions", "gold", "metrics")
    absent = [c for c in needed if c not in table.column_names]
    if absent:
        raise FormatError(f"{path}: column(s) {', '.join(absent)} missing: not a lighteval details file "
                          f"(columns: {', '.join(table.column_names[:12])})")
    rows, metric_names = [], set()
    for i, r in enumerate(table.to_pylist(), start=1):
        ref = f"{path}: row {i}"
        preds = r["predictions"] or []
        if not isinstance(preds, list) or not all(isinstance(p, str) for p in preds):
            raise FormatError(f"{ref}: field 'predictions' is not a list of text")
        metrics = r["metrics"] or {}
        metric_names.update(metrics)
        key = "extractive_match" if "extractive_match" in metrics else (next(iter(metrics)) if len(metrics) == 1 else None)
        row_label = to_label(metrics.get(key), ref) if key else None
        labels = [row_label] if len(preds) == 1 else [None] * len(preds)  # one score per row, not per response
        extracted = ((r.get("specifics") or {}).get("extracted_predictions") or [])
        answers = [extracted[0] if extracted else None] if len(preds) == 1 else (
            list(extracted) if len(extracted) == len(preds) else [None] * len(preds))
        gold = r["gold"][0] if isinstance(r["gold"], list) and r["gold"] else None
        rows.append(SourceRow(ref, None, _text(ref, r["example"], "example"), preds, labels, answers, gold))
    src = SourceFile(str(path), "lighteval", rows, "lighteval")
    res_path = _companion_results(path)
    if res_path is not None:
        res = _load_json(res_path)
        general = res.get("config_general", {})
        src.tool_version = f"git {general['lighteval_sha']}" if general.get("lighteval_sha") else None
        src.model_name = general.get("model_name")
        overall = res.get("results", {}).get("all", {})
        metric = "extractive_match" if "extractive_match" in overall else next(
            (k for k in overall if not k.endswith("_stderr")), None)
        if metric is not None:
            src.reported_accuracy, src.reported_metric = float(overall[metric]), metric
        src.info = {"results_file": str(res_path), "tasks": sorted(res.get("results", {}).keys() - {"all"}),
                    "generation": general.get("generation_parameters")}
    return src


def read_lm_eval(path: Path) -> SourceFile:
    rows, metrics_seen = [], []
    task_hint = re.match(r"samples_(.+?)_\d{4}-\d{2}-\d{2}T", path.name)
    first_filter, other_filter_rows = _MISSING, 0
    for line_no, obj in _jsonl_of(path, "lm-eval --log_samples"):
        ref = f"{path}:{line_no}"
        obj = _need_object(ref, obj, "lm-eval --log_samples")
        _missing(ref, obj, ("doc_id", "doc", "resps"), "lm-eval --log_samples")
        # a task with several filters writes each doc once per filter, with the same responses: the first
        # filter's rows are the responses (and its score the label); the others are counted, not imported
        if first_filter is _MISSING:
            first_filter = obj.get("filter")
        if obj.get("filter") != first_filter:
            other_filter_rows += 1
            continue
        doc = obj["doc"] if isinstance(obj["doc"], dict) else {}
        resps = [r for req in obj["resps"] for r in (req if isinstance(req, list) else [req])]
        if not all(isinstance(r, str) for r in resps):
            raise FormatError(f"{ref}: field 'resps' is not a list of lists of text")
        problem = next((doc[k] for k in ("problem", "question", "input") if isinstance(doc.get(k), str)), None)
        if problem is None:
            args = obj.get("arguments")
            first = (args.get("gen_args_0") or {}).get("arg_0") if isinstance(args, dict) else (
                args[0][0] if isinstance(args, list) and args and isinstance(args[0], list) else None)
            problem = first if isinstance(first, str) else None
        scores = {k: v for k, v in obj.items() if k not in ("doc_id", "doc", "target", "arguments", "resps",
                                                             "filtered_resps", "doc_hash", "prompt_hash",
                                                             "target_hash", "filter", "metrics")
                  and isinstance(v, (bool, int, float))}
        names = obj.get("metrics") if isinstance(obj.get("metrics"), list) else sorted(scores)
        metric = next((m for m in names if m in scores), None)
        metrics_seen.append(metric)
        row_label = to_label(scores[metric], ref) if metric else None
        filtered = obj.get("filtered_resps")
        # lm-eval scores a row once (on the first filtered response unless the task votes): with one response
        # that score is the response's; with repeats it belongs to the row, not to each response
        # with repeats, a filter that ends in take_first (lm-eval's default) keeps one filtered response, the
        # first one's: the score is response 0's. A voting filter's score belongs to no one response.
        voting = any(w in str(obj.get("filter", "")).lower() for w in ("maj", "vote"))
        labels, answers = [None] * len(resps), [None] * len(resps)
        if isinstance(filtered, list) and len(filtered) == len(resps) and all(isinstance(f, str) for f in filtered):
            answers = list(filtered)
        if isinstance(filtered, list) and len(filtered) == 1 and isinstance(filtered[0], str) and not voting:
            labels[0], answers[0] = row_label, filtered[0]
        elif len(resps) == 1:
            labels[0] = row_label
        pid = next((str(doc[k]) for k in ("id", "unique_id", "problem_id", "idx") if doc.get(k) not in (None, "")), None)
        target = obj.get("target")
        rows.append(SourceRow(ref, pid, problem, resps, labels, answers,
                              str(target) if isinstance(target, (str, int, float)) else None))
    src = SourceFile(str(path), "lm-eval", rows, "lm-evaluation-harness")
    metric = next((m for m in metrics_seen if m), None)
    res_path = _companion_results(path)
    if res_path is not None:
        res = _load_json(res_path)
        src.tool_version = res.get("lm_eval_version") or (f"git {res['git_hash']}" if res.get("git_hash") else None)
        cfg = res.get("config", {})
        args = str(cfg.get("model_args") or "")
        pretrained = re.search(r"(?:^|,)pretrained=([^,]+)", args)
        src.model_name = res.get("model_name") or (Path(pretrained.group(1)).name if pretrained else args or None)
        task = task_hint.group(1) if task_hint else None
        task_res = res.get("results", {}).get(task) or next(iter(res.get("results", {}).values()), {})
        wanted = f"{metric},{first_filter}" if isinstance(first_filter, str) else None
        key = wanted if wanted in task_res else next((k for k in task_res if metric and k.split(",")[0] == metric), None)
        if key is not None:
            src.reported_accuracy, src.reported_metric = float(task_res[key]), key
        src.info = {"results_file": str(res_path), "task": task,
                    "repeats": (res.get("configs", {}).get(task) or {}).get("repeats")}
    src.info.update({"filter": None if first_filter is _MISSING else first_filter,
                     "rows_of_other_filters": other_filter_rows})
    return src


def read_inspect(path: Path) -> SourceFile:
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise FormatError(f"{path}: reading Inspect logs needs the inspect_ai package (pip install "
                          "'prl-pipeline[inspect]')") from None
    if path.suffix == ".eval" and not zipfile.is_zipfile(path):
        raise FormatError(f"{path}: not an Inspect .eval log (not a zip archive; truncated?)")
    try:
        log = read_eval_log(str(path))
    except Exception as e:  # the reader's own errors: bad JSON, missing members
        raise FormatError(f"{path}: not a readable Inspect log ({type(e).__name__}: {str(e)[:200]})") from None
    rows = []
    for s in sorted(log.samples or [], key=lambda s: (s.epoch, str(s.id))):
        ref = f"{path}: sample {s.id} epoch {s.epoch}"
        text = s.input if isinstance(s.input, str) else "\n".join(
            m.text for m in s.input if getattr(m, "role", "") == "user")
        completion = s.output.completion if s.output is not None else ""
        label = answer = None
        if s.scores:
            score = next(iter(s.scores.values()))
            value = score.value
            if isinstance(value, dict):  # a scorer with several values: take the first
                value = next(iter(value.values()), None)
            label = to_label(value, ref)
            answer = score.answer
        target = s.target if isinstance(s.target, str) else (", ".join(s.target) if s.target else None)
        rows.append(SourceRow(ref, str(s.id), text, [completion], [label], [answer], target, [s.epoch - 1]))
    src = SourceFile(str(path), "inspect", rows, "inspect_ai", tool_version=(log.eval.packages or {}).get("inspect_ai"),
                     model_name=log.eval.model)
    if log.results is not None and log.results.scores:
        first = log.results.scores[0]
        metric = "accuracy" if "accuracy" in first.metrics else next(iter(first.metrics), None)
        if metric is not None:
            src.reported_accuracy, src.reported_metric = float(first.metrics[metric].value), f"{first.name}/{metric}"
    src.info = {"task": log.eval.task, "status": log.status, "epochs": getattr(log.eval.config, "epochs", None)}
    return src


def read_verl(path: Path) -> SourceFile:
    rows = []
    step = None
    for line_no, obj in _jsonl_of(path, "verl validation dump"):
        ref = f"{path}:{line_no}"
        obj = _need_object(ref, obj, "verl validation dump")
        _missing(ref, obj, ("input", "output", "score"), "verl validation dump")
        step = obj.get("step", step)
        gts = obj.get("gts")
        rows.append(SourceRow(ref, None, _text(ref, obj["input"], "input"), [_text(ref, obj["output"], "output")],
                              [to_label(obj["score"], ref)], [obj.get("pred") if isinstance(obj.get("pred"), str) else None],
                              str(gts) if isinstance(gts, (str, int, float)) else None))
    return SourceFile(str(path), "verl", rows, "verl", info={"step": step})


def parse_fields(spec: str | None) -> dict[str, str]:
    """``problem=question,response=output`` → {"problem": "question", "response": "output"}."""
    if not spec:
        return {}
    mapping = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        ours, sep, theirs = part.partition("=")
        ours, theirs = ours.strip(), theirs.strip()
        if not sep or not theirs:
            raise FormatError(f"--fields: {part!r} is not NAME=FIELD (e.g. problem=question,response=output)")
        if ours not in FIELD_NAMES:
            raise FormatError(f"--fields: unknown name {ours!r}; names: {', '.join(FIELD_NAMES)}")
        mapping[ours] = theirs
    return mapping


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return _MISSING
    return obj


def read_json(path: Path, fields: dict[str, str] | None = None) -> SourceFile:
    fields = dict(fields or {})
    given = set(fields)
    rows: list[SourceRow] = []
    mapping: dict[str, str] | None = None
    for ref, obj in _records(path):
        obj = _need_object(ref, obj, "json")
        if mapping is None:  # resolved on the first row, then required on every row
            mapping = dict(fields)
            for name, guesses in FIELD_GUESSES.items():
                if name not in mapping:
                    hit = next((g for g in guesses if g in obj and g not in mapping.values()), None)
                    if hit is not None:
                        mapping[name] = hit
            absent = [n for n in ("problem", "response") if n not in mapping]
            if absent:
                raise FormatError(f"{ref}: no field for {', '.join(absent)} (fields present: "
                                  f"{', '.join(sorted(map(str, obj))[:12])}); name them with --fields, e.g. "
                                  "--fields problem=question,response=output,label=correct")
        values = {}
        for name, key in mapping.items():
            v = _get(obj, key)
            if v is _MISSING:
                if name in ("problem", "response") or name in given:
                    raise FormatError(f"{ref}: field {key!r} ({name}) missing")
                v = None
            values[name] = v
        resp = values["response"]
        responses = resp if isinstance(resp, list) else [resp]
        if not all(isinstance(r, str) for r in responses):
            raise FormatError(f"{ref}: field {mapping['response']!r} (response) is not text or a list of text")
        lab = values.get("label")
        labels = [to_label(x, ref) for x in lab] if isinstance(lab, list) else [to_label(lab, ref)] * len(responses)
        if len(labels) != len(responses):
            raise FormatError(f"{ref}: {len(labels)} labels for {len(responses)} responses")
        ans = values.get("answer")
        answers = [a if isinstance(a, str) else None for a in ans] if isinstance(ans, list) else (
            [ans if isinstance(ans, str) else None] * len(responses))
        sample = values.get("sample")
        if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool) or sample < 0
                                   or len(responses) != 1):
            raise FormatError(f"{ref}: field {mapping['sample']!r} (sample) must be an integer >= 0 on a row with "
                              "one response")
        pid = values.get("id")
        gold = values.get("gold")
        rows.append(SourceRow(ref, None if pid is None else str(pid), _text(ref, values["problem"], mapping["problem"]),
                              responses, labels, answers if len(answers) == len(responses) else [None] * len(responses),
                              None if gold is None else (gold if isinstance(gold, str) else json.dumps(gold)),
                              None if sample is None else [sample]))
    return SourceFile(str(path), "json", rows, "json", info={"fields": mapping or fields})


READERS: dict[str, Callable[..., SourceFile]] = {"lighteval": read_lighteval, "lm-eval": read_lm_eval,
                                                "inspect": read_inspect, "verl": read_verl, "json": read_json}


def detect_format(path: Path) -> str:
    """The format of a file, from its name and first record (``--format auto``)."""
    if path.suffix == ".eval":
        return "inspect"
    if path.suffix == ".parquet":
        return "lighteval"
    if path.suffix in (".json", ".jsonl"):
        try:
            ref, first = next(_records(path))
        except StopIteration:
            raise FormatError(f"{path}: empty file") from None
        if isinstance(first, dict):
            if {"doc_id", "doc", "resps"} <= first.keys():
                return "lm-eval"
            if {"input", "output", "score"} <= first.keys():
                return "verl"
        return "json"
    raise FormatError(f"{path}: cannot tell the format from the name; give --format "
                      f"({', '.join(f for f in FORMATS if f != 'auto')})")


def read_source(path: str | Path, fmt: str = "auto", fields: dict[str, str] | None = None) -> SourceFile:
    """Read one source file whole (raising :class:`FormatError` on the first thing that is wrong)."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: no such file")
    if path.is_dir():
        raise FormatError(f"{path}: is a directory; name the files (e.g. {path}/details_*.parquet)")
    if fmt not in FORMATS:
        raise FormatError(f"--format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")
    if fmt == "auto":
        fmt = detect_format(path)
    if fields and fmt != "json":
        raise FormatError(f"--fields applies to --format json only (this file is read as {fmt})")
    src = READERS[fmt](path, fields) if fmt == "json" else READERS[fmt](path)
    if not src.rows:
        raise FormatError(f"{path}: no rows")
    return src
