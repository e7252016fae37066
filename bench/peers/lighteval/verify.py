"""Score responses with lighteval's own math metric, "extractive_match", as lighteval 0.8.1 runs it.

    bench/.envs/lighteval/bin/python bench/peers/lighteval/verify.py IN.jsonl OUT.json [--repeats 1]
        [--metric auto|expr_gold|latex_gold] [--gold-field FIELD]

IN.jsonl rows: {"id", "response", "gold", "source", ...}; bench/peers/lighteval/make_input.py writes them (with
"label", the source file's own score, and on MATH-500 rows "gold_solution", the full reference solution).

OUT.json: "scores" {id: 0/1}; "extracted" {id: {predictions, golds}} (lighteval's doc.specific); "how" {source:
metric and gold field used}; "lighteval_version" and the versions of what the metric runs on; "metric" (the
construction, as code, and the call); "timing"; "machine"; "agreement_with_source_labels" per source; where rows
carry "source_extracted" (the lighteval details file's own specifics), "extraction_agreement"; lighteval's own
warnings per row; "errors" (exceptions that escaped the metric; none expected).

The metrics (bench/.envs/lighteval comes from make_env.sh; lighteval==0.8.1 has the source of tag v0.8.0, which
holds commit 9c05a83a, the lighteval_sha of the Saturn-1.5B details, unchanged under lighteval/metrics/):

  expr_gold   lighteval.metrics.metrics.Metrics.expr_gold_metric, the metric of lighteval 0.8's own aime24/aime25
              tasks and of open-r1's custom|aime24 (src/open_r1/evaluate.py: the task name, prompt function
              "aime_prompt_fn", hf_repo and generation_size of the Saturn results JSON):
              multilingual_extractive_match_metric(language=Language.ENGLISH, fallback_mode="first_match",
              precision=5, gold_extraction_target=(ExprExtractionConfig(),),
              pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)),
              aggregation_function=max)
  latex_gold  Metrics.latex_gold_metric: the same with gold_extraction_target=(LatexExtractionConfig(),), the metric
              of lighteval's (and open-r1's) math_500 task, whose gold is the FULL reference solution (choices=
              [line["solution"]]; the extraction then takes its \\boxed answer). A bare short gold such as
              \\frac{14}{3} is not extracted by LatexExtractionConfig (it wants $...$ or \\boxed), and lighteval
              then compares the raw gold string: do not pair latex_gold with short golds.
  auto        (default) per source, as lighteval's own tasks do: aime24 and amc -> expr_gold on "gold" (AMC answers
              are integers, like AIME's; lighteval 0.8 has no AMC task), math500 -> latex_gold on "gold_solution"
              (lighteval's math_500 task); any other source -> expr_gold on "gold". --gold-field overrides the field.

How it is called: as lighteval's pipeline calls a generative metric. Each row becomes the Doc the task's prompt
function builds (lighteval.tasks.default_prompts.aime_prompt_fn: choices=[answer]; default_prompts.math_500:
choices=[solution]; gold_index=0; the query, unused by the metric, is the prompt template with the row's "problem"
if it has one), the response a GenerativeResponse(result=[response]), and lighteval.metrics.apply_generative_metric
runs metric.compute(golds=doc.get_golds(), predictions=[response], formatted_doc=doc) -> {"extractive_match": 0/1}.
Timeouts are lighteval's own, untouched (signal.alarm: 5 s per parse and per comparison, 2 s for writing the
specifics); lighteval swallows a timeout silently (the attempt fails), so per-row wall times are kept: a row under
2 s cannot have hit one.

Timing: one warm-up call per metric on a trivial row first (after the imports), then time.perf_counter over the
whole sequential pass, --repeats times. "responses_per_s" is the FIRST pass: what one lighteval run over these
responses costs. Later passes are faster (~1.7x here) and stay so after sympy's cache is cleared: the warm-up
does not warm everything a first pass meets (ANTLR's lazily built DFA of the LaTeX grammar, sympy/latex2sympy
paths imported on first use, ...), so with --repeats > 1 "responses_per_s_later_passes" (their median) is the
steady state. One process, one thread: that is how lighteval's metric runs (sample by sample, main process).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import importlib.metadata as md  # noqa: E402

from lighteval.metrics import apply_generative_metric  # noqa: E402
from lighteval.metrics.metrics import Metrics  # noqa: E402
from lighteval.models.model_output import GenerativeResponse  # noqa: E402
from lighteval.tasks import default_prompts  # noqa: E402

_COMMON = ('language=Language.ENGLISH, fallback_mode="first_match", precision=5, {gold}, '
           "pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)), "
           "aggregation_function=max)  # timeout_seconds=5 (the default); from lighteval.metrics.dynamic_metrics")
METRICS = {
    "expr_gold": {"metric": Metrics.expr_gold_metric.value, "prompt_fn": "aime_prompt_fn", "gold_key": "answer",
                  "construction": "lighteval.metrics.metrics.Metrics.expr_gold_metric = multilingual_extractive_match_metric("
                                  + _COMMON.format(gold="gold_extraction_target=(ExprExtractionConfig(),)")},
    "latex_gold": {"metric": Metrics.latex_gold_metric.value, "prompt_fn": "math_500", "gold_key": "solution",
                   "construction": "lighteval.metrics.metrics.Metrics.latex_gold_metric = multilingual_extractive_match_metric("
                                   + _COMMON.format(gold="gold_extraction_target=(LatexExtractionConfig(),)")},
}
AUTO = {"aime24": ("expr_gold", "gold"), "amc": ("expr_gold", "gold"), "math500": ("latex_gold", "gold_solution")}
AUTO_OTHER = ("expr_gold", "gold")


class _Collect(logging.Handler):
    """Collects lighteval's own warnings (no gold extracted, no prediction extracted, ...)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _kind(message: str) -> str:
    if message.startswith("We did not manage to extract a gold"):
        return "no_gold_extracted"
    if message.startswith("We did not manage to extract a prediction"):
        return "no_prediction_extracted"
    if message.startswith("Timeout when adding"):
        return "timeout_writing_specifics"
    return message[:80]


def score_row(which: str, row: dict, gold_field: str) -> tuple[float, dict]:
    m = METRICS[which]
    # the Doc that lighteval's own prompt function builds from a data set line
    line = {"problem": row.get("problem") or "", m["gold_key"]: row[gold_field]}
    doc = getattr(default_prompts, m["prompt_fn"])(line, task_name="prl|verify")
    (out,) = apply_generative_metric(sample_ids=[row["id"]], responses=[[GenerativeResponse(result=[row["response"]])]],
                                     formatted_docs=[doc], metrics=[m["metric"]])
    return out["extractive_match"], (doc.specific or {})


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"cpu": cpu, "cores": os.cpu_count(), "cores_usable": usable, "loadavg_at_start": os.getloadavg(),
            "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inp", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--metric", choices=["auto", *METRICS], default="auto")
    ap.add_argument("--gold-field", default=None, help="the row field used as the gold (default: see --metric)")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in args.inp.read_text(encoding="utf-8").splitlines() if line.strip()]

    def plan(row: dict) -> tuple[str, str]:
        which, field = (AUTO.get(row.get("source"), AUTO_OTHER) if args.metric == "auto" else (args.metric, "gold"))
        return which, args.gold_field or field

    plans = {row["id"]: plan(row) for row in rows}
    missing = [r["id"] for r in rows if plans[r["id"]][1] not in r]
    if missing:
        ap.error(f"{len(missing)} row(s) lack their gold field ({plans[missing[0]][1]!r}), e.g. {missing[:3]}")
    how: dict[str, dict] = {}
    for row in rows:
        which, field = plans[row["id"]]
        h = how.setdefault(row.get("source", "?"), {"metric": which, "gold_field": field,
                                                      "prompt_fn": "lighteval.tasks.default_prompts." + METRICS[which]["prompt_fn"]})
        if (h["metric"], h["gold_field"]) != (which, field):
            h["mixed"] = True

    collect = _Collect()
    lg = logging.getLogger("lighteval")
    lg.addHandler(collect)
    lg.setLevel(logging.WARNING)
    lg.propagate = False  # collected, not printed (one warning per unextracted prediction would flood the log)

    mach = machine()
    warm_s = {}
    for which in sorted({p[0] for p in plans.values()}):  # warm-up: a trivial row per metric, outside the timing
        t0 = time.perf_counter()
        score_row(which, {"id": "warmup", "response": "So the answer is $\\boxed{\\frac{1}{2}}$.",
                          "gold": "$\\frac{1}{2}$" if which == "latex_gold" else "0.5"}, "gold")
        warm_s[which] = time.perf_counter() - t0
    collect.messages.clear()

    passes, scores, extracted, errors, warnings = [], {}, {}, {}, {}
    row_s: dict[str, float] = {}
    for rep in range(args.repeats):
        t_pass = time.perf_counter()
        for row in rows:
            which, field = plans[row["id"]]
            t_row = time.perf_counter()
            n_before = len(collect.messages)
            try:
                s, spec = score_row(which, row, field)
            except Exception as e:  # lighteval catches its own timeouts and parse errors; anything else lands here
                s, spec = 0.0, {}
                errors[row["id"]] = f"{type(e).__name__}: {e}"
            dt = time.perf_counter() - t_row
            if rep == 0:
                scores[row["id"]] = int(s)
                extracted[row["id"]] = {"predictions": spec.get("extracted_predictions"),
                                        "golds": spec.get("extracted_golds")}
                kinds = [_kind(msg) for msg in collect.messages[n_before:]]
                if kinds:
                    warnings[row["id"]] = kinds
            row_s[row["id"]] = max(row_s.get(row["id"], 0.0), dt)
        passes.append(time.perf_counter() - t_pass)

    first = passes[0]
    later = statistics.median(passes[1:]) if len(passes) > 1 else None
    by_source: dict[str, dict] = {}
    ext_agree: dict[str, dict] = {}
    for row in rows:
        rid, src_name = row["id"], row.get("source", "?")
        src = by_source.setdefault(src_name, {"rows": 0, "lighteval_correct": 0, "labelled": 0, "label_correct": 0,
                                              "agree": 0, "disagree": []})
        src["rows"] += 1
        src["lighteval_correct"] += scores[rid]
        if row.get("label") is not None:
            src["labelled"] += 1
            src["label_correct"] += int(row["label"])
            if int(row["label"]) == scores[rid]:
                src["agree"] += 1
            else:
                src["disagree"].append({"id": rid, "label": int(row["label"]), "lighteval": scores[rid]})
        se = row.get("source_extracted")
        if isinstance(se, dict) and se.get("predictions") is not None:
            e = ext_agree.setdefault(src_name, {"rows": 0, "same": 0, "different": []})
            e["rows"] += 1
            mine = extracted[rid]
            if list(mine["predictions"] or []) == list(se["predictions"]) and list(mine["golds"] or []) == list(se["golds"] or []):
                e["same"] += 1
            else:
                e["different"].append({"id": rid, "ours": mine, "file": se})
    warn_counts: dict[str, int] = {}
    for kinds in warnings.values():
        for k in set(kinds):
            warn_counts[k] = warn_counts.get(k, 0) + 1
    used = sorted({p[0] for p in plans.values()})

    result = {
        "tool": "lighteval",
        "lighteval_version": md.version("lighteval"),
        "versions": {p: md.version(p) for p in ("latex2sympy2_extended", "sympy", "mpmath", "antlr4-python3-runtime",
                                                 "torch", "transformers", "numpy")},
        "how": how,
        "metric": {"name": "extractive_match", "mode": args.metric,
                   "construction": {w: METRICS[w]["construction"] for w in used},
                   "call": "lighteval.metrics.apply_generative_metric(sample_ids=[id], responses=[[GenerativeResponse("
                           "result=[response])]], formatted_docs=[default_prompts.<prompt_fn>({'problem': ..., "
                           "<answer|solution>: gold})], metrics=[metric]) -> metric.compute(golds=doc.get_golds(), "
                           "predictions=[response], formatted_doc=doc)"},
        "input": str(args.inp), "rows": len(rows),
        "timing": {"repeats": args.repeats, "pass_s": passes, "first_pass_s": first,
                   "responses_per_s": len(rows) / first if first > 0 else None,
                   "responses_per_s_later_passes": len(rows) / later if later else None, "warmup_s": warm_s,
                   "slowest_rows_s": sorted(row_s.items(), key=lambda kv: -kv[1])[:10],
                   "rows_over_2s": sorted(r for r, t in row_s.items() if t >= 2.0),
                   "clock": "time.perf_counter over each whole sequential pass (after one warm-up call per metric); "
                            "responses_per_s from the first pass; per-row times are the max over passes"},
        "machine": mach,
        "agreement_with_source_labels": by_source,
        "extraction_agreement": ext_agree,
        "lighteval_warnings": {"rows_by_kind": warn_counts, "by_id": warnings},
        "errors": errors,
        "scores": scores,
        "extracted": extracted,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"lighteval {result['lighteval_version']} extractive_match ({args.metric}): {len(rows)} rows, "
          f"{sum(scores.values())} correct; first pass {first:.2f} s = {result['timing']['responses_per_s']:.1f} "
          f"responses/s" + (f" (later passes, median: {len(rows) / later:.1f}/s)" if later else "")
          + f"; errors {len(errors)}; "
          f"rows over 2 s {len(result['timing']['rows_over_2s'])}; warnings {warn_counts}")
    for name, s in by_source.items():
        lab = f"; agrees with the file's labels on {s['agree']}/{s['labelled']}" if s["labelled"] else ""
        ex = ext_agree.get(name)
        ext = f"; same extractions as the file on {ex['same']}/{ex['rows']}" if ex else ""
        print(f"  {name} [{how[name]['metric']} on {how[name]['gold_field']}]: {s['lighteval_correct']}/{s['rows']} "
              f"correct (file's labels: {s['label_correct']}){lab}{ext}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
