"""Render every benchmark figure of README.md and bench/RESULTS.md from bench/results/*.json.

    python bench/render.py            # rewrite the generated regions of both files in place
    python bench/render.py --check    # change nothing; exit 1 listing each region that differs
                                      # and each results file whose measured code changed since it was recorded

A generated region is the text between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->``;
REGIONS maps each NAME to the function that renders it from the results files, and EXPECTED lists
the regions each Markdown file must hold. Text outside the regions is written by hand and states
no benchmark figure (it points at the regions). Every region names the machine its figures come
from (CPU model, cores) and flags, in the text, figures of one table or list that come from
different machines. Rendering is deterministic: the same JSON gives byte-identical Markdown (no
clock, no environment, results read in a fixed order).

Figures that cannot go stale: every results file records its provenance (bench/common.py's
``write_json``: the commit, whether the code was committed, the paths of the code it measures).
``--check`` also fails for each results file behind a figure whose measured paths differ, in the
checkout, from the recorded commit (:func:`stale_results`): a figure of code that has changed since
cannot stay under "met". It needs the git history (a shallow clone fails with a message saying so).

One home for rendering: bench/run_all.py and every bench script call :func:`write_all` after
writing their results. ``--results DIR`` renders from another results folder (the tests use a
modified copy), ``--root DIR`` reads and writes the Markdown files of another checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
FILES = ("README.md", "bench/RESULTS.md")

DEMO_TARGET_MIN = 15.0
DEMO_COMMAND = "python bench/demo.py"


class Results:
    """The results files, read lazily from one folder; remembers which ones a region used."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self._cache: dict[str, dict | None] = {}
        self.used: list[str] = []

    def get(self, name: str) -> dict | None:
        if name not in self.used:
            self.used.append(name)
        if name not in self._cache:
            path = self.dir / f"{name}.json"
            self._cache[name] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        return self._cache[name]

    def path(self, name: str) -> str:
        return f"bench/results/{name}.json"


# --- formatting ---------------------------------------------------------------------------------

def machine_label(m: dict | None) -> str:
    """Short: CPU model and cores (the usable ones when an affinity mask leaves fewer), GPU if any."""
    if not m:
        return "machine not recorded"
    cores, aff = m.get("cores"), m.get("affinity_cores")
    label = f"{m.get('cpu') or 'unknown CPU'}, " + (f"{aff} of {cores} cores" if aff not in (None, cores) else f"{cores} cores")
    return label + (f", {m['gpu']}" if m.get("gpu") else "")


def machine_detail(m: dict | None) -> str:
    """The label, steal share and load average (1 minute, at the start and the end) where recorded, commit and date."""
    if not m:
        return "machine not recorded"
    parts = [machine_label(m)]
    if "steal_share" in m:
        parts[0] += "" if m["steal_share"] is None else f", {m['steal_share']:.1%} CPU steal"
    la = m.get("load_average")
    if isinstance(la, dict) and la.get("start") and la.get("end"):
        parts[0] += f", load average {la['start'][0]:.1f} at the start, {la['end'][0]:.1f} at the end"
    if m.get("git_commit"):
        parts.append(f"commit {m['git_commit']}")
    if m.get("date"):
        parts.append(m["date"])
    return ", ".join(parts)


def machines_line(res: Results, names: list[str]) -> tuple[str, bool]:
    """("Machine: …" or a mixed-machines warning, mixed?) for the results files ``names`` that exist."""
    by_label: dict[str, list[str]] = {}
    for name in names:
        r = res.get(name)
        if r is not None:
            by_label.setdefault(machine_label(r.get("machine")), []).append(f"{name}.json")
    if not by_label:
        return "", False
    if len(by_label) == 1:
        return f"Machine: {next(iter(by_label))} (every figure here).", False
    return ("**Mixed machines: these figures come from " + str(len(by_label)) + " different machines; do not compare "
            "them as if measured on one** — " + "; ".join(f"{label}: {', '.join(files)}" for label, files in by_label.items())
            + "."), True


def met(ok: bool | None) -> str:
    return "—" if ok is None else ("**met**" if ok else "**missed**")


def duration(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def pp(x: float) -> str:
    return f"{x * 100:+.1f} pp".replace("-", "−")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def missing(name: str, command: str) -> str:
    return f"`bench/results/{name}.json` has not been recorded yet: `{command}` records it."


# --- the targets (shared by RESULTS.md's summary and README's Performance) -----------------------

def target_rows(res: Results, with_faults: bool = True, with_demo: bool = True) -> list[tuple[str, str, str, str, str]]:
    """(target, measured, baseline, met, results name) for each target of docs/architecture.md §Targets and issue 8."""
    rows: list[tuple[str, str, str, str, str]] = []
    adv = res.get("advantages")
    if adv:
        c = adv["allocators"]["default"]["cases"]["fixed:256"]
        shape = adv["allocators"]["default"]["shape"]
        rows.append((f"PRL advantages, B={shape['B']}, L={shape['T']}: ≥ 20× a per-sample loop", f"{c['speedup_vs_loop']:.0f}×",
                     "per-token Python loop (authors' shape)", met(c["meets_loop_target_20x"]), "advantages"))
        rows.append(("… and ≤ 3× one `torch.cumsum`", f"{c['ratio_to_cumsum']:.2f}×", "one torch.cumsum",
                     met(c["meets_cumsum_target_3x"]), "advantages"))
    ts = res.get("train_step")
    if ts:
        worst = max(v["ratio_to_grpo"] for k, v in ts["cases"].items() if k != "grpo")
        rows.append(("PRL training step within 5% of GRPO's", f"{worst:.3f}× (slowest PRL split)"
                     + (f"; whole steps {ts['whole_steps']['prl_over_grpo_paired']['step']:.2f}×" if "whole_steps" in ts else ""),
                     "GRPO step, same rollouts" + ("; whole steps alternated" if "whole_steps" in ts else ""),
                     met(worst <= 1.05), "train_step"))
    mem = res.get("memory")
    if mem and mem.get("logprob_pass"):
        default = mem["logprob_pass"].get("default_chunk_tokens", 1024)  # the trainer's default chunk, measured
        cases = [c for c in mem["logprob_pass"]["cases"] if c["chunk_tokens"] == default]
        small = min(c["response_tokens"] for c in cases)
        at = {c["pass"]: c for c in cases if c["response_tokens"] == small}
        train, nograd = at["forward + backward"], at["no gradient"]
        rows.append((f"Log-prob + entropy peak memory ≥ {mem['logprob_pass']['target_ratio']:.0f}× lower than full "
                     f"logits (vocabulary {mem['logprob_pass']['vocab']:,}, {small:,} response tokens, the default "
                     f"{default:,}-token chunk)",
                     f"{train['ratio']:.1f}× training pass, {nograd['ratio']:.1f}× no-gradient pass", "full logits (the "
                     "trainer before issue 26)", met(train["meets_target"] and nograd["meets_target"]), "memory"))
    pv = (mem or {}).get("plan_vs_measured")
    if pv:
        for sample, label in (("in", "the configurations its constants were set on"),
                              ("out", "out of sample (constants frozen, configurations never used to set them)")):
            configs = [c for c in pv["configs"] if c.get("sample", "in") == sample]
            if not configs:
                continue
            cells = [x for c in configs for x in c["terms"] + [c["peak"]]]
            big = [x for x in cells if x["measured_gib"] * 2**30 >= 2 * pv["resolution_bytes"] and x["ratio"]]
            rows.append((f"Memory plan within ±{pv['tolerance']:.0%} of measured, every term, {len(configs)} CPU "
                         f"configurations: {label}", f"{sum(x['within'] for x in cells)} of {len(cells)} within; ratios "
                         f"{min(x['ratio'] for x in big):.2f}–{max(x['ratio'] for x in big):.2f} (terms ≥ "
                         f"{2 * pv['resolution_bytes'] / 2**20:.0f} MiB; smaller ones within "
                         f"{pv['resolution_bytes'] / 2**20:.0f} MiB)",
                         "peak RSS per phase, measured", met(all(x["within"] for x in cells)), "memory"))
    st_ = (mem or {}).get("step_time")
    if st_:
        rows.append((f"Training step with chunked log-probs, checkpointing, trimmed micro-batches ≤ {st_['target']}× without",
                     f"{st_['ratio']:.2f}× (medians; {st_['median_paired_ratio']:.2f}× median of pairs)",
                     "full logits, no checkpointing, step-wide padding", met(st_["meets_target"]), "memory"))
    gen = res.get("generation")
    if gen:
        best = max(v["in_process"] for v in gen["ratio_summary"].values())
        rows.append((f"vLLM ≥ {gen.get('target', 3.0):.0f}× `transformers.generate`", f"{best:.2f}× (in-process, best workload)",
                     "transformers, best batch size", met(best >= gen.get("target", 3.0)), "generation"))
    rm = res.get("real_model")
    if rm:
        g, w = rm["generation"], rm["weight_sync"]
        rows.append(("vLLM ≥ 3× `transformers.generate` on a real model (SmolLM2-135M)", f"{g['ratio']:.2f}×",
                     "transformers, same prompts and tokens", met(g["meets_target"]), "real_model"))
        rows.append(("Weight sync from memory ≥ 5× the disk round trip (SmolLM2-135M)", f"{w['ratio']:.1f}×",
                     "save_pretrained + vLLM reload", met(w["meets_target"]), "real_model"))
    ver = res.get("verify")
    if ver:
        rows.append((f"Verify {ver['responses']:,} responses: pool + cache ≥ 2× sequential", f"{ver['speedup']:.2f}×",
                     "sequential uncached loop", met(ver["meets_target_2x"]), "verify"))
    for name in ("store", "store_10m"):
        st = res.get(name)
        if st:
            label = f"{st['rows'] / 1e6:.0f} M"
            worst = max(q["p95_ms"] for q in st["queries"].values())
            rows.append((f"Store {label} samples: ingest < {st['target_ingest_s']:.0f} s",
                         f"{st['ingest_s']:.1f} s ({st['ingest_ratio_to_parquet']:.0f}× Parquet)",
                         "Parquet write of the same rows", met(st["meets_ingest_target"]), name))
            rows.append((f"… every dashboard query < 300 ms at {label}", f"p95 ≤ {worst:.0f} ms",
                         f"count(*) {st['count_baseline_ms']:.2f} ms", met(worst < 300), name))
    dash = res.get("dashboard")
    if dash:
        worst = max(p["median_s"] for p in dash["pages"].values())
        rows.append((f"Every dashboard page < 1 s at {dash['rows'] / 1e6:.0f} M samples", f"≤ {worst:.2f} s",
                     f"empty page {dash['baseline_s']:.2f} s", met(worst < 1.0), "dashboard"))
    rel = res.get("relevance")
    for d, x in ((rel or {}).get("swapped") or {}).items():
        h = x.get("held_out")
        if h is None or d not in ("math500", "olympiad_bench"):
            continue
        t = rel["targets"]
        rows.append((f"Appendix-C flag on {d}: ≥ {t['recall']:.0%} swapped solutions, ≤ {t['false_flags']:.0%} own flagged",
                     f"{100 * h['recall']:.1f}% / {100 * h['false_flags']:.1f}% (held-out half)",
                     "the overlap rule alone: " + f"{100 * x['held_out_overlap_rule_only']['recall']:.1f}%",
                     met(h["recall"] >= t["recall"] and h["false_flags"] <= t["false_flags"]), "relevance"))
    sus = res.get("suspicious")
    if sus:
        t = sus["totals"]
        rows.append(("Appendix-C flag on real correct responses (outside files): every listed case read",
                     f"{t['listed']} of {t['correct']} listed: {t['confirmed']} real, {t['not_suspicious']} false; "
                     f"swapped real responses {100 * t['swapped_flagged'] / max(1, t['swapped']):.1f}% listed",
                     f"read under the earlier rule: {t['read_earlier_false']} false flags, no longer listed",
                     met(all(not x.get("unread") for x in sus["sets"].values())), "suspicious"))
    load = res.get("load")
    if load:
        w = load["with_writer"]
        fresh = w["monotonic"] and w["seen_last"] == w["writer"]["samples_added"]
        rows.append((f"{w['clients']} dashboard clients while `prl eval` writes: no errors, fresh rows seen",
                     f"{len(w['errors'])} errors; p50 {w['p50_ms']:.0f} ms, p95 {w['p95_ms']:.0f} ms "
                     f"({load['p95_ratio_to_quiet']:.2f}× quiet p95); rows seen {w['seen_first']} → {w['seen_last']}; "
                     f"the writer {load['writer_slowdown']:.2f}× its time alone",
                     "same clients, no writer; same eval, no clients", met(not w["errors"] and fresh), "load"))
        ww = load.get("write_waits")
        if ww:
            on, off = ww["writers_first"], ww["no_priority"]
            rows.append((f"… a write waiting under {w['clients']} clients goes next (turnstile)",
                         f"median {on['median_s']:.2f} s, worst {on['max_s']:.2f} s",
                         f"turnstile off: median {off['median_s']:.2f} s, worst {off['max_s']:.2f} s", "—", "load"))
        rw = load.get("reader_waits")
        if rw:
            on, off = rw["turnstile"], rw["no_turnstile"]
            rows.append(("… a reader beside a writer committing back to back is not starved",
                         f"worst wait {on['max_ms']:.0f} ms (p95 {on['p95_ms']:.0f} ms)",
                         f"turnstile off: worst {off['max_ms']:.0f} ms (p95 {off['p95_ms']:.0f} ms)", "—", "load"))
    faults = res.get("faults") if with_faults else None
    if faults and faults["chains"]:
        k = kill_totals(faults["chains"])
        rows.append(("kill -9 at named stages (" + ", ".join(f["name"] for f in faults["chains"]) + "): nothing lost, "
                     "the rest equal by value",
                     f"{k['kills']} kills at {k['stages']} stages ({k['per_chain']}), {k['recovered']} recovered, "
                     f"{k['rows_lost']} rows lost, {k['values_differ']} of {k['rows_compared']:,} compared rows different",
                     "an uninterrupted run's rows", met(k["ok"]), "faults"))
    demo = res.get("demo") if with_demo else None
    if demo:
        rows.append((f"Demo: fresh clone → dashboard < {DEMO_TARGET_MIN:.0f} min", f"{duration(demo['seconds'])} "
                     f"{demo_span(demo)}", "—", demo_met(demo), "demo"))
    return rows


def targets_table(res: Results, rows: list[tuple[str, str, str, str, str]]) -> list[str]:
    names = list(dict.fromkeys(r[4] for r in rows))
    line, mixed = machines_line(res, names)
    header = ["target", "measured", "baseline (same run)", ""]
    body = [[a, b, c, d] for a, b, c, d, _ in rows]
    if mixed:
        header.append("machine")
        for row, r in zip(body, rows):
            row.append(machine_label(res.get(r[4]).get("machine")))
    return [line, ""] + table(header, body)


# --- README regions ------------------------------------------------------------------------------

def region_status(res: Results) -> str:
    parts = []
    demo = res.get("demo")
    if demo:
        parts.append(f"the demo: {duration(demo['seconds'])} {demo_span(demo)} "
                     f"(target < {DEMO_TARGET_MIN:.0f} min fresh clone → dashboard: {demo_met(demo)})")
    else:
        parts.append(f"the demo: not recorded yet (`{DEMO_COMMAND}` records it)")
    faults = res.get("faults")
    if faults and faults["chains"]:
        k = kill_totals(faults["chains"])
        parts.append(f"kill chains: {k['kills']} kills at {k['stages']} named stages, {k['recovered']} recovered, "
                     f"{k['rows_lost']} rows lost, {k['values_differ']} of {k['rows_compared']:,} rows different by value")
    load = res.get("load")
    if load:
        w = load["with_writer"]
        parts.append(f"{w['clients']} dashboard clients + a writer: {len(w['errors'])} errors")
    line, _ = machines_line(res, ["demo", "faults", "load"])
    return ("Latest recorded figures — " + "; ".join(parts) + ". " + line
            + " Every figure: [bench/RESULTS.md](bench/RESULTS.md).")


def _check_fraction(where: str, x: float) -> float:
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"bench/results/demo.json: {where} = {x!r} is not a fraction in [0, 1]")
    return x


def _check_diff(where: str, x: float) -> float:
    if not -1.0 <= x <= 1.0:
        raise ValueError(f"bench/results/demo.json: {where} = {x!r} is not a difference of fractions in [-1, 1]")
    return x


def demo_span(demo: dict) -> str:
    """What the demo's recorded ``seconds`` covers (bench/demo.py's ``span_label``); a file from before the
    field measured the pipeline flow alone, data → report."""
    return demo.get("span_label") or "data → report, the pipeline flow alone"


def demo_met(demo: dict) -> str:
    """The < 15 min target is for a fresh clone to the dashboard: a shorter span cannot meet it."""
    if demo.get("span") != "fresh_clone":
        return "not measured: the recorded span is shorter"
    return met(demo["seconds"] < DEMO_TARGET_MIN * 60)


def region_demo(res: Results) -> str:
    """The demo's time per phase and held-out results, from bench/results/demo.json.

    Expected schema (written by bench/demo.py): {"machine": {...}, "commit": str, "phases": {name: seconds},
    "seconds": total, "held_out": {model: {"average", "lo", "hi", "working_share"}}, "paired": {"A vs B":
    {"diff", "lo", "hi"}}}; averages, bounds and shares are fractions in [0, 1], differences in [-1, 1].
    """
    demo = res.get("demo")
    if demo is None:
        return ("The demo's result file (`bench/results/demo.json`) has not been recorded yet, so its time and "
                f"held-out results are not shown here: `{DEMO_COMMAND}` runs the demo from a fresh clone and records "
                "them, and `python bench/render.py` then renders them in this place.")
    phases = demo.get("phases") or {}
    lines = [f"Recorded by `{DEMO_COMMAND}` at commit {demo.get('commit') or '?'} on {machine_detail(demo.get('machine'))}."]
    steps = demo.get("end_to_end") or {}
    if steps:
        cache = demo.get("pip_cache_mib")
        lines.append(f"Time measured {demo_span(demo)}: " + ", ".join(f"{k.replace('_', ' ')} {duration(v)}"
                                                                    for k, v in steps.items())
                     + f"; **{duration(demo['seconds'])} in all** (target < {DEMO_TARGET_MIN:.0f} min: {demo_met(demo)})"
                     + ("" if cache is None else f"; pip's cache held {cache:,.0f} MiB before the install") + ".")
    flow_s = demo.get("pipeline_seconds", demo["seconds"])
    lines.append(("The pipeline flow inside it, data → report: " if steps else
                  f"Time measured {demo_span(demo)}: ") + ", ".join(f"{k} {duration(v)}" for k, v in phases.items())
                 + ("; " if phases else "") + f"{duration(flow_s)} in all"
                 + ("." if steps else f" (target < {DEMO_TARGET_MIN:.0f} min fresh clone → dashboard: {demo_met(demo)})."))
    held = demo.get("held_out") or {}
    if held:
        lines += ["", "Held-out results (average@n, 95% bootstrap CI over problems; *shows its working*: the share of "
                  "answers that show the working; *worked* / *direct*: the average of the answers of each style):", ""]
        rows = []
        for model, h in held.items():
            cells = [model, pct(_check_fraction(f"held_out.{model}.average", h["average"])),
                     f"[{pct(_check_fraction(f'held_out.{model}.lo', h['lo']))}, "
                     f"{pct(_check_fraction(f'held_out.{model}.hi', h['hi']))}]"]
            for key in ("working_share", "working_average", "direct_average"):
                v = h.get(key)
                cells.append("—" if v is None else pct(_check_fraction(f"held_out.{model}.{key}", v)))
            rows.append(cells)
        lines += table(["model", "average", "95% CI", "shows its working", "worked", "direct"], rows)
    paired = demo.get("paired") or {}
    if paired:
        lines += ["", "Paired comparisons (same problems, bootstrap over problems):", ""]
        rows = []
        for name, p in paired.items():
            lo = _check_diff(f"paired.{name}.lo", p["lo"])
            hi = _check_diff(f"paired.{name}.hi", p["hi"])
            verdict = "within noise: the CI includes 0" if lo <= 0 <= hi else "the CI excludes 0"
            rows.append([name, pp(_check_diff(f"paired.{name}.diff", p["diff"])), f"[{pp(lo)}, {pp(hi)}]", verdict])
        lines += table(["comparison", "difference", "95% CI", ""], rows)
    alerts = demo.get("alerts")
    if alerts is not None:  # recorded since issue 35: the run monitors read the demo's own training runs
        fired = {run: rows for run, rows in alerts.items() if rows}
        lines += ["", "Run monitors (docs/architecture.md §Runs that say when they go wrong) on the demo's training runs "
                  f"({', '.join(f'`{r}`' for r in alerts)}): "
                  + ("no alert." if not fired else "; ".join(f"`{r}`: " + ", ".join(f"step {a['step']} `{a['monitor']}`"
                                                                                     for a in rows)
                                                          for r, rows in fired.items()))]
    return "\n".join(lines)


def region_performance(res: Results) -> str:
    return "\n".join(targets_table(res, target_rows(res, with_faults=False, with_demo=False)))


def region_reliability(res: Results) -> str:
    items = []
    faults = res.get("faults")
    if faults and faults["chains"]:
        k = kill_totals(faults["chains"])
        items.append(f"- kill chains ({k['per_chain']} kills at {k['stages']} named stages; after {k['as_aimed']} of them "
                     f"the store and files showed the stage aimed at): {k['recovered']} recovered; of {k['rows_expected']:,} "
                     f"rows {k['rows_lost']} lost, {k['duplicates']} duplicated, {k['rows_extra']} extra, and "
                     f"{k['values_differ']} of the {k['rows_compared']:,} compared by value different;")
    else:
        items.append("- kill chains: " + missing("faults", "python bench/run_all.py --only faults"))
    st = res.get("store_10m")
    if st:
        worst = max(q["p95_ms"] for q in st["queries"].values())
        items.append(f"- the store at {st['rows'] / 1e6:.0f} M samples: ingest {st['ingest_s']:.0f} s "
                     f"(target < {st['target_ingest_s']:.0f} s), every named query p95 ≤ {worst:.0f} ms;")
    load = res.get("load")
    if load:
        w = load["with_writer"]
        text = (f"- {w['clients']} dashboard clients while an evaluation writes: {len(w['errors'])} errors, rows seen "
                f"{w['seen_first']} → {w['seen_last']} of the {w['writer']['samples_added']} written")
        ww, rw = load.get("write_waits"), load.get("reader_waits")
        if ww:
            text += (f"; a waiting write's worst case {ww['no_priority']['max_s']:.1f} s without the turnstile, "
                     f"{ww['writers_first']['max_s']:.2f} s with it")
        if rw:
            text += (f"; a waiting read's worst case {rw['no_turnstile']['max_ms']:.0f} ms without it, "
                     f"{rw['turnstile']['max_ms']:.0f} ms with it")
        items.append(text + ".")
    line, _ = machines_line(res, ["faults", "store_10m", "load"])
    return "\n".join(["Figures of the last recorded runs (details in [bench/RESULTS.md](bench/RESULTS.md)):", ""]
                     + items + ["", line])


# --- RESULTS.md regions --------------------------------------------------------------------------

def region_summary(res: Results) -> str:
    rows = target_rows(res)
    if not rows:
        return "No results recorded yet: `python bench/run_all.py` records them."
    return "\n".join(targets_table(res, rows) + ["", "Each benchmark's section below gives its machine, date and commit."])


def region_advantages(res: Results) -> str:
    r = res.get("advantages")
    if r is None:
        return missing("advantages", "python bench/advantages.py")
    first = next(iter(r["allocators"].values()))
    m = r["machine"]
    lines = [f"B = {first['shape']['B']}, L = {first['shape']['T']}, η = {first['shape']['eta']}; {machine_detail(m)}; "
             f"torch {m.get('torch')} ({m.get('torch_threads')} threads). One `torch.cumsum` over the same tensor: "
             + ", ".join(f"{a['baseline_cumsum_ms']:.2f} ms ({mode})" for mode, a in r["allocators"].items()) + ".", ""]
    rows = []
    cum_met, cum_missed, loop_missed = [], [], []
    for mode, a in r["allocators"].items():
        for name, c in a["cases"].items():
            rows.append([mode, name, f"{c['prl_advantages_ms']:.2f} ms",
                         f"**{c['ratio_to_cumsum']:.2f}×** {'(met)' if c['meets_cumsum_target_3x'] else '(missed)'}",
                         f"{c['loop_ms']:.0f} ms",
                         f"**{c['speedup_vs_loop']:.0f}×** {'(met)' if c['meets_loop_target_20x'] else '(missed)'}",
                         f"{c['speedup_vs_per_sample_torch_loop']:.1f}×", f"{c['max_abs_diff_vs_loop']:.1e}"])
            (cum_met if c["meets_cumsum_target_3x"] else cum_missed).append(f"{name} ({mode})")
            if not c["meets_loop_target_20x"]:
                loop_missed.append(f"{name} ({mode})")
    lines += table(["allocator", "split", "prl_advantages", "× one torch.cumsum (target ≤ 3×)",
                    "per-token Python loop (authors' shape)", "speed-up (target ≥ 20×)",
                    "per-sample torch loop speed-up", "max abs diff vs loops"], rows)
    lines += ["", f"`step_boundaries(mask, 'fixed:256')`: {first['step_boundaries_fixed256_ms']:.2f} ms per batch "
              "(not in the timings).", "",
              "≥ 20× the per-sample loop: " + (("missed for " + ", ".join(loop_missed)) if loop_missed else "met in every case")
              + ". ≤ 3× one `torch.cumsum`: met for " + (", ".join(cum_met) or "none") + "; missed for "
              + (", ".join(cum_missed) or "none") + "."]
    return "\n".join(lines)


def region_generation(res: Results) -> str:
    g = res.get("generation")
    if g is None:
        return missing("generation", "python bench/generation.py")
    target = g.get("target", 3.0)
    summ = g["ratio_summary"]
    ok = any(any(v["meets_target"].values()) for v in summ.values())

    def tokens(w: dict) -> int:
        return round(next(iter(w["vllm"].values()))["generated_tokens"] / (g["prompts"] * g["n"]))

    wl = g["workloads"]
    names = [f"{tokens(w)} tokens" for w in wl.values()]
    inproc = " and ".join(f"{summ[k]['in_process']:.2f}× ({n})" for k, n in zip(wl, names))
    sep = " and ".join(f"{summ[k]['separate_processes']:.2f}×" for k in wl)
    md, eng = g["model"], g.get("vllm_engine", {})
    la = g.get("load_average_before_after")
    lines = [f"**Target (docs/architecture.md §Targets): vLLM ≥ {target:.0f}× `transformers.generate` "
             "generated tokens/s. "
             f"{'Met' if ok else 'Not met'} on the embedded model with a tuned transformers baseline: {inproc} with vLLM "
             f"in-process, {sep} with vLLM's default separate processes.**", "",
             f"Setup: {md['dir']}; {md['model_type']}, hidden {md['hidden_size']}, {md['num_hidden_layers']} layers, "
             f"head_dim {md['head_dim']}, vocab {md['vocab_size']}, {md['dtype']}; {g['prompts']} prompts "
             f"({g['prompt_tokens_mean']:.0f} tokens on average) × {g['n']} samples; {g['sampling']}; both engines "
             f"through `prl.generation.engines`. {machine_detail(g['machine'])}; torch {g['machine'].get('torch')}, vLLM "
             f"{eng.get('engine_version', '?')} on {eng.get('device', '?')}"
             + (f"; load average {la[0]} at the start, {la[1]} at the end"
                if la and not g["machine"].get("load_average") else "") + ".", ""]  # machine_detail says it
    rows = []
    for w, name in zip(wl.values(), names, strict=True):
        tf = w["transformers"]
        best = tf[w["transformers_best"]]["tokens_per_s"]
        speeds = [v["tokens_per_s"] for v in tf.values()]
        batches = [k.removeprefix("batch_") for k in tf]
        r = w["ratio_vs_best_transformers"]
        rows.append([f"{g['prompts'] * g['n']} × {name}",
                     f"{best:,.0f} tok/s ({w['transformers_best'].removeprefix('batch_')}; "
                     f"{min(speeds) / 1e3:.1f}–{max(speeds) / 1e3:.1f}k for {batches[0]}–{batches[-1]})",
                     f"{w['vllm']['separate_processes']['tokens_per_s']:,.0f} tok/s",
                     f"{w['vllm']['in_process']['tokens_per_s']:,.0f} tok/s",
                     f"{r['separate_processes']:.2f}× / **{r['in_process']:.2f}×**"])
    lines += table(["workload", "transformers, best batch (sequences)", "vLLM, separate processes", "vLLM, in-process",
                    "ratio (separate / in-process)"], rows)
    st = g.get("engine_start_s", {})
    if st.get("vllm"):
        lines += ["", f"Engine start: vLLM {st['vllm']['separate_processes']:.1f} s with separate processes, "
                  f"{st['vllm']['in_process']:.1f} s in-process ({st.get('note', 'excluded from tokens/s')})."]
    return "\n".join(lines)


def region_verify(res: Results) -> str:
    v = res.get("verify")
    if v is None:
        return missing("verify", "python bench/verify.py")
    st = v["pool_stats"]
    lines = [f"{v['responses']:,} responses (1,517 benchmark problems × 8, synthetic text with repeated answers); "
             f"{machine_detail(v['machine'])}.", ""]
    lines += table(["sequential, no cache", "pool + cache", "speed-up (target ≥ 2×)", "cache hits", "verdict mismatches"],
                   [[f"{v['sequential_s']:.1f} s", f"{v['pool_cache_s']:.1f} s ({v['workers']} workers, start "
                     f"{v['pool_start_s']:.1f} s)", f"**{v['speedup']:.2f}×** {'(met)' if v['meets_target_2x'] else '(missed)'}",
                     f"{st['cache_hits']:,} ({st['cache_hits'] / st['items']:.0%} of the items)", str(v["verdict_mismatches"])]])
    lines += ["", f"Verdicts: {', '.join(f'{k} {n:,}' for k, n in sorted(v['verdicts'].items()))}."]
    return "\n".join(lines)


def _run_by(by: list[str]) -> str:
    """Who ran a query, short: the pages by title, ``prl report`` by its options."""
    pages = [b.removeprefix("page ") for b in by if b.startswith("page ")]
    reports = [" ".join(t for t in b.split() if t.startswith("--")) for b in by if b.startswith("prl report")]
    other = [b for b in by if not b.startswith(("page ", "prl report"))]
    parts = ([", ".join(pages)] if pages else []) + ([f"`prl report {' / '.join(dict.fromkeys(reports))}`"]
                                                      if reports else []) + other
    return "; ".join(parts)


def _store(res: Results, name: str, command: str) -> str:
    s = res.get(name)
    if s is None:
        return missing(name, command)
    context = (f" + {s['context_rows']:,} rows of an imported run; a training run's metrics, rollouts and segments; a "
               "study of 2 cells × 3 seeds" if "context_rows" in s else "")
    lines = [f"{s['rows']:,} generated sample rows ({s['runs']} runs × 1,517 problems × 8){context}, "
             f"{machine_detail(s['machine'])}. Store file {s['store_mib']:.0f} MiB.", ""]
    lines += table([f"ingest ({s['ingest_chunks']} idempotent chunks)", "baseline: Parquet write of the same rows", "ratio",
                    f"target < {s['target_ingest_s']:.0f} s", "re-ingest of a stored chunk"],
                   [[f"{s['ingest_s']:.2f} s", f"{s['parquet_write_s']:.2f} s", f"{s['ingest_ratio_to_parquet']:.1f}×",
                     "met" if s["meets_ingest_target"] else "MISSED",
                     f"{s['reingest_chunk_s']:.2f} s, {s['reingest_added']} rows added"]])
    traced = all("run_by" in q for q in s["queries"].values())
    which = (f"Every query the dashboard's {len(s['dashboard_pages'])} pages and `prl report` ran on this store, "
             "recorded from their code (each page rendered once, `prl report` run with `--runs A,B`, `--agreement`, "
             "`--agreement B --against A` and `--study`; bench/dashboard_pages.py), with the arguments of its first "
             "call, and the named queries their modules name that no default view ran. Timed through `Store.rows` "
             if traced and "dashboard_pages" in s else "Queries through `Store.rows` ")
    lines += ["", which + "(each opens and closes a read-only connection, as the report and dashboard "
              f"do; opening one costs ~{s['connect_ms']:.0f} ms). Baseline: `count(*)` on an open connection, "
              f"{s['count_baseline_ms']:.2f} ms" + (f"; median and p95 of {s['repeats']} calls each" if "repeats" in s else "")
              + ".", ""]
    header = ["named query", "median", "p95", "× baseline", "target p95 < 300 ms"] + (["run by"] if traced else [])
    lines += table(header,
                   [[f"`{k}`", f"{q['median_ms']:.1f} ms", f"{q['p95_ms']:.1f} ms", f"{q['ratio_to_count']:.0f}×",
                     "met" if q["meets_target"] else "MISSED"] + ([_run_by(q["run_by"])] if traced else [])
                    for k, q in s["queries"].items()])
    return "\n".join(lines)


def region_store(res: Results) -> str:
    return _store(res, "store", "python bench/store.py")


def region_store_10m(res: Results) -> str:
    return _store(res, "store_10m", "python bench/store.py --rows 10000000 --repeats 7 --name store_10m")


def region_relevance(res: Results) -> str:
    r = res.get("relevance")
    if r is None:
        return missing("relevance", "python bench/relevance.py")
    thresholds = list(next(iter(r["datasets"].values()))["below"])
    lines = ["Reference solutions scored against their own problem (should be high) and against a random other problem "
             "of the same set (the Appendix-C case, should be low). Share of solutions below each threshold; the store's "
             f"`suspicious_passes` view uses {r['threshold']}. {machine_detail(r['machine'])}.", ""]
    lines += table(["data set", "pairs", "median own", "median other"] + [f"< {t} own / other" for t in thresholds],
                   [[d, str(x["pairs"]), f"{x['median_own']:.2f}", f"{x['median_other']:.2f}"]
                    + [f"{x['below'][t]['own']:.0%} / {x['below'][t]['other']:.0%}" for t in thresholds]
                    for d, x in r["datasets"].items()])
    key = str(r["threshold"])
    if all(key in x["below"] for x in r["datasets"].values()):
        worst = max(r["datasets"], key=lambda d: r["datasets"][d]["below"][key]["own"])
        lines += ["", f"Most own-problem solutions below {r['threshold']}: {worst}, "
                  f"{r['datasets'][worst]['below'][key]['own']:.0%} of them."]
    sw = r.get("swapped")
    if sw:
        t = r["targets"]
        pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
        ci = lambda c: f"[{100 * c[0]:.1f}, {100 * c[1]:.1f}]"  # noqa: E731
        lines += ["", "**The Appendix-C case (swapped solutions).** Each problem that shares its gold answer with another "
                  "problem of the benchmark is given that problem's reference solution. The whole suspicious-pass rule "
                  f"(answer only, or the reasoning fits another problem > (1 + {r['fit_margin']})x better) is scored on "
                  "the held-out half of the problems; the margin was tuned on the other half (smallest margin with "
                  f"<= {t['false_flags']:.0%} own solutions flagged). Targets: >= {t['recall']:.0%} of swapped cases "
                  f"flagged, <= {t['false_flags']:.0%} of own solutions flagged; 95% Wilson CIs.", ""]
        rows = []
        for d, x in sw.items():
            h = x.get("held_out")
            if h is None:
                continue
            met = h["recall"] >= t["recall"] and h["false_flags"] <= t["false_flags"]
            old = x["held_out_overlap_rule_only"]
            rows.append([d, str(h["swapped"]), f"{pct(h['recall'])} {ci(h['recall_ci'])}", str(h["own"]),
                         f"{pct(h['false_flags'])} {ci(h['false_flags_ci'])}", str(x["tuned_margin_half_a"]),
                         f"{pct(old['recall'])} / {pct(old['false_flags'])}",
                         ("met" if met else "missed") if d in ("math500", "olympiad_bench") else "no target"])
        lines += table(["data set", "swapped (held out)", "flagged", "own (held out)", "own flagged",
                        "margin tuned on half A", "overlap rule alone: swapped / own flagged", "target"], rows)
    lines += ["", suspicious_real(res)]
    return "\n".join(lines)


def suspicious_real(res: Results) -> str:
    """bench/suspicious.py: the same rules on real models' correct responses, every listed case read."""
    r = res.get("suspicious")
    if r is None:
        return missing("suspicious", "python bench/suspicious.py")
    t = r["totals"]
    pct = lambda k, n: f"{100 * k / n:.1f}%" if n else "—"  # noqa: E731
    lines = [f"**Real correct responses (false flags).** The outside files of tests/data/external imported with "
             f"`prl import` (verifier timeout {r['verify_timeout_s']} s), every correct sample the "
             "`suspicious_passes` view lists read by a person (the readings: `bench/suspicious_readings.csv`), and "
             "each correct response also given to a random other problem of its benchmark (the Appendix-C case "
             f"made of real reasoning). Long-form: at least {r['long_chars']:,} characters. "
             f"{machine_detail(r['machine'])}.", ""]
    rows = []
    for name, x in r["sets"].items():
        if x.get("absent"):
            rows.append([x["what"], "file absent", "", "", "", "", "", ""])
            continue
        rules = ", ".join(f"{k} {v}" for k, v in x["by_rule"].items() if v) or "—"
        sw = x["swapped_real"]
        rows.append([f"{x['what']} (`{x['dataset']}`)", f"{x['correct']} ({x['long_form']})",
                     f"{x['median_chars']:,.0f}", f"{len(x['listed'])} ({pct(len(x['listed']), x['correct'])})",
                     rules, f"{x['confirmed']} / {x['not_suspicious']}" + (f" / {len(x['unread'])} unread" if x["unread"] else ""),
                     f"{sw['flagged']} / {sw['swapped']} ({pct(sw['flagged'], sw['swapped'])})",
                     str(len(x["read_earlier_not_listed_now"]))])
    rows.append(["all", f"{t['correct']} ({t['long_form']})", "", f"{t['listed']} ({pct(t['listed'], t['correct'])})",
                 "", f"{t['confirmed']} / {t['not_suspicious']}",
                 f"{t['swapped_flagged']} / {t['swapped']} ({pct(t['swapped_flagged'], t['swapped'])})",
                 str(t["read_earlier_not_listed_now"])])
    lines += table(["file", "correct (long-form)", "median characters", "listed", "by rule", "real / false (read)",
                    "swapped real responses listed", "read under an earlier rule, not listed now"], rows)
    lines += ["", f"On long-form correct responses: {t['listed_long_form']} of {t['long_form']} listed "
              f"({pct(t['listed_long_form'], t['long_form'])}). The cases read under the earlier rule and no longer "
              f"listed: {t['read_earlier_not_listed_now']}, of which {t['read_earlier_false']} were false flags."]
    cases = [(name, c) for name, x in r["sets"].items() for c in x.get("listed", [])]
    if cases:
        lines += ["", "Every listed case and its reading:", ""]
        lines += table(["file", "problem", "sample", "listed by", "characters", "reading", "why"],
                       [[name, c["problem_id"], str(c["sample_idx"]), ", ".join(c["flagged_by"]), f"{c['chars']:,}",
                         c["judgement"] or "**unread**", (c["why"] or "").replace("|", "/")] for name, c in cases])
    earlier = [(name, e) for name, x in r["sets"].items() for e in x.get("read_earlier_not_listed_now", [])]
    if earlier:
        lines += ["", "Read when an earlier rule listed them, not listed now:", ""]
        lines += table(["file", "problem", "sample", "reading", "why"],
                       [[name, e["problem_id"], str(e["sample_idx"]), e["judgement"], e["why"].replace("|", "/")]
                        for name, e in earlier])
    return "\n".join(lines)


def region_train_step(res: Results) -> str:
    r = res.get("train_step")
    if r is None:
        return missing("train_step", "python bench/train_step.py --model DIR")
    sh, m, once = r["shape"], r["machine"], r["once_ms"]
    split = all("update_ms" in c for c in r["cases"].values())
    model = r.get("model") or {}
    warm = f" ({model['sft_steps']} SFT steps)" if model.get("sft_steps") else ""
    lines = [f"**1. Same rollouts.** {sh['rollouts']} rollouts (≤ {sh['max_response_tokens']} tokens, mean "
             f"{sh['mean_response_tokens']:.0f}) of the warm-started tiny model{warm}; DeepSpeed fp32 on {machine_detail(m)}. "
             "Timed: " + ("advantages, the step's diagnostics and the PPO update, each on its own" if split else
                          "advantages + PPO update") + ", alternating, median"
             + (f" of {r['repeats']}" if "repeats" in r else "") + ". Same for all estimators and "
             f"not timed: generate {once['generate']:.0f} ms, verify {once['verify']:.0f} ms, log-probs "
             f"{once['logprobs']:.0f} ms.", ""]
    if split:
        lines += table(["estimator", "advantages", "diagnostics", "update", "all three", "× GRPO (target ≤ 1.05×)"],
                       [[k, f"{c['advantages_ms']:.1f} ms", f"{c['diagnostics_ms']:.1f} ms", f"{c['update_ms']:.0f} ms",
                         f"{c['median_ms']:.0f} ms",
                         f"**{c['ratio_to_grpo']:.3f}×** {'(met)' if c['meets_target'] else '(missed)'}"]
                        for k, c in r["cases"].items()])
    else:
        lines += table(["estimator", "advantages + update", "× GRPO (target ≤ 1.05×)"],
                       [[k, f"{c['median_ms']:.0f} ms", f"**{c['ratio_to_grpo']:.3f}×** {'(met)' if c['meets_target'] else '(missed)'}"]
                        for k, c in r["cases"].items()])
    w = r.get("whole_steps")
    if not w:
        return "\n".join(lines)
    md, pr = w["median"], w["prl_over_grpo_paired"]
    measured = w["steps"] - w["warmup_steps"]
    lines += ["", f"**2. Whole steps, as bench/peers.py's RL step runs them** ({w['settings']['prompts_per_step']} prompts × "
              f"{w['settings']['group']}, ≤ {w['settings']['max_tokens']} tokens, the reference pass on; PRL with "
              "`text:\\n\\n`, η = 20): a GRPO and a PRL trainer in one process stepping alternately from the same seed, "
              f"each on its own rollouts; medians of {measured} steps after {w['warmup_steps']} warm-up. `update` is the "
              "trainer's `time/update`: advantages + diagnostics + the PPO update. The last column is bench/peers.py's "
              "RL step (each side a run of its own, in its own processes, one after the other; medians).", ""]
    peers = (res.get("peers") or {}).get("rl_step") or {}
    psm = peers.get("summary") or {}
    pg, pp_ = psm.get("grpo:hf"), psm.get("prl:hf")
    keys = {"generate": "generate_s", "verify": "reward_s", "logprobs": "logprobs_s", "update": "update_s", "step": "step_s"}

    def peer(phase: str) -> str:
        k = keys.get(phase)
        if not (pg and pp_ and k and pg.get(k)):
            return "—"
        return f"{pp_[k] / pg[k]:.2f}×"

    rows = [[ph, f"{md['grpo'][f'{ph}_s']:.3f} s", f"{md['prl'][f'{ph}_s']:.3f} s", f"**{pr[ph]:.2f}×**", peer(ph)]
            for ph in ("generate", "verify", "logprobs", "update", "sync", "step")]
    rows.append(["response tokens (mean per response)", f"{md['grpo']['response_tokens']:.1f}",
                 f"{md['prl']['response_tokens']:.1f}", "",
                 f"{pg['completion_tokens']:.1f} / {pp_['completion_tokens']:.1f}" if pg and pp_ else "—"])
    rows.append(["garbage collector, whole step", f"{md['grpo']['gc_s']:.3f} s", f"{md['prl']['gc_s']:.3f} s", "", ""])
    lines += table(["phase", "GRPO", "PRL", "PRL / GRPO (median of the step pairs)",
                    "bench/peers.py: PRL / GRPO" + (f" (commit {peers['machine']['git_commit']})" if peers.get("machine") else "")],
                   rows)
    lines += ["", f"The two sides sampled the same {w['responses_per_step']} responses at "
              f"{w['steps_with_identical_responses']} of the {measured} measured steps. PRL / GRPO without generation "
              f"(verify + log-probs + update): **{w['prl_over_grpo_without_generation']:.2f}×**."]
    lines += ["", *train_step_reconciled(r, peers)]
    return "\n".join(lines)


def train_step_reconciled(r: dict, peers: dict) -> list[str]:
    """Why the PRL / GRPO ratio of a phase differs between the same-rollouts timing, the whole steps and
    bench/peers.py's run, from the three records (the prose of bench/RESULTS.md points here)."""
    w = r["whole_steps"]
    rows = {k: [x for x in v if not x["warmup"]] for k, v in w["rows"].items()}
    n = w["responses_per_step"]
    differ = [x["responses_same_as_other_side"] for x in rows["grpo"] if x["responses_same_as_other_side"] != n]
    upd = [x["update_s"] for x in rows["grpo"]]
    text = r["cases"].get("prl text:\\n\\n") or r["cases"].get("prl text:\n\n") or max(
        r["cases"].values(), key=lambda c: c["ratio_to_grpo"])
    grpo = r["cases"]["grpo"]
    own = [c.get("advantages_ms", 0) + c.get("diagnostics_ms", 0) for c in (text, grpo)]
    extra = [f"{x:.1f} ms" for x in own]
    out = [f"**Why the ratios differ.** Part 1 times, on one batch and alternating, what depends on the estimator "
           "(advantages, diagnostics) together with the update; part 2 and bench/peers.py time whole steps, each side "
           "drawing its own rollouts. With the same seed and prompts the sides drew the same responses: here all "
           f"{n} were the same texts at {w['steps_with_identical_responses']} of {len(rows['grpo'])} measured steps"
           + (f" (at the others {', '.join(str(d) for d in differ)} of {n})" if differ else "") + "."]
    sides = (peers.get("ours") or {}) if peers else {}
    pg, pp_ = sides.get("grpo:hf"), sides.get("prl:hf")
    if pg and pp_:
        key = lambda st: (st["run"], st["step"])  # noqa: E731
        a = {key(st): st["mean_completion_tokens"] for st in pg["steps"]}
        b = {key(st): st["mean_completion_tokens"] for st in pp_["steps"]}
        both = sorted(set(a) & set(b))
        same = sum(a[k] == b[k] for k in both)
        ratio = {k: pp_s / pg_s for k, pg_s, pp_s in ((k, peers["summary"]["grpo:hf"][k], peers["summary"]["prl:hf"][k])
                                                      for k in ("generate_s", "logprobs_s", "update_s"))}
        out[-1] += (f" In bench/peers.py's run the two sides' mean completion tokens were equal at {same} of "
                    f"{len(both)} steps, and its PRL / GRPO ratios were generate {ratio['generate_s']:.2f}×, log-probs "
                    f"{ratio['logprobs_s']:.2f}×, update {ratio['update_s']:.2f}×.")
    out[-1] += (" The same responses mean the same generation, log-prob and update work on both sides; what PRL adds "
                f"is its advantages and diagnostics, {extra[0]} against GRPO's {extra[1]} a step (part 1). So a phase "
                "ratio far from 1 in whole steps is the machine, not PRL: with the same responses GRPO's own update took "
                f"{min(upd):.2f}–{max(upd):.2f} s across this run's measured steps; bench/peers.py runs each side in "
                "processes of its own one after another, so a slower minute falls on one side only. The estimator's "
                f"own cost is the difference in part 1's advantages and diagnostics: +{own[0] - own[1]:.1f} ms a step, "
                f"{(own[0] - own[1]) / grpo['median_ms']:.1%} of GRPO's whole update phase; part 1's ratio column, a "
                "median of alternated pairs, carries the update's noise too (the update is the same work for every "
                "estimator).")
    return out


def region_real_model(res: Results) -> str:
    r = res.get("real_model")
    if r is None:
        return missing("real_model", "python bench/real_model.py")
    g, w, m = r["generation"], r["weight_sync"], r["model"]
    wl = g["workload"]
    lines = [f"{m['name']}: {m['architecture']}, {m['n_parameters'] / 1e6:.1f} M parameters, {wl['dtype']}; "
             f"{machine_detail(r['machine'])}.", "",
             f"**Generation** ({wl['prompts']} prompts × {wl['n']} samples × {wl['max_tokens']} tokens, EOS ignored; "
             "engine start and a warm-up call excluded):", ""]
    lines += table(["engine", "generated tokens/s", "start"],
                   [["vLLM, in-process", f"{g['vllm']['tokens_per_s']:,.0f}", f"{g['vllm']['start_s']:.1f} s"],
                    ["transformers (`hf` engine)", f"{g['hf']['tokens_per_s']:,.0f}", f"{g['hf']['start_s']:.1f} s"],
                    ["ratio (target ≥ 3×)", f"**{g['ratio']:.2f}×** {'(met)' if g['meets_target'] else '(missed)'}", ""]])
    lines += ["", f"**Weight sync** of the {w['weights_bytes'] / 2**20:.0f} MiB policy into the running vLLM engine, "
              f"median of {w['repeats']} alternating rounds: from memory {w['memory_s'] * 1e3:.0f} ms, disk round trip "
              f"(save_pretrained + reload) {w['disk_s'] * 1e3:.0f} ms: **{w['ratio']:.1f}×** "
              f"{'(met, target ≥ 5×)' if w['meets_target'] else '(missed, target ≥ 5×)'}; after every sync vLLM's "
              f"greedy log-probs matched transformers on the policy within {w['max_logprob_diff_after_sync']:.1e}.", "",
              "**A PRL step on SmolLM2** through `prl train` (16 rollouts of ≤ 64 tokens, DeepSpeed fp32 ZeRO-0, "
              "mean of steps 2-3):", ""]
    keys = ("time/generate", "time/verify", "time/logprobs", "time/update", "time/sync", "time/step")
    rows = []
    for sync, t in r["train"].items():
        rows.append([f"weight_sync: {sync}"] + [f"{t['mean'].get(k, float('nan')):.2f} s" for k in keys])
    lines += table(["run"] + [k.removeprefix("time/") for k in keys], rows)
    return "\n".join(lines)


def region_external(res: Results) -> str:
    r = res.get("external")
    if r is None:
        return missing("external", "python bench/external.py")

    def code(text: str | None, n: int = 40) -> str:  # untrusted text (a response's answer) as an inline code cell
        if text is None:
            return "—"
        text = " ".join(str(text).replace("`", "'").replace("|", "/").split())
        return f"`{text[:n] + ('…' if len(text) > n else '')}`"

    def pair(c: dict) -> str:
        return f"{c['false_pass']} / {c['false_fail']}"

    lines = ["Real generations from other tools (tests/data/external/, sources in its README), imported with "
             "`prl import` and scored by our verifier; compared with each source's per-row labels, the accuracy its "
             "authors published, and lighteval 0.8.1's verdicts on the same responses (`tests/data/peers/"
             f"lighteval_verdicts.json`). {machine_detail(r['machine'])}.", ""]
    rows = []
    for name, x in r["sets"].items():
        t = x["table"]
        pub = "—" if x["published_accuracy"] is None else f"{x['published_accuracy']:.4f}"
        kappa = "—" if x["kappa"] is None else f"{x['kappa']:.2f}"
        rows.append([f"{x['what']} (`{x['dataset']}`)", f"{x['rows_matched']} of {x['rows']}", pub,
                     f"{x['theirs_accuracy']:.4f}", f"{x['lighteval_accuracy']:.4f}", f"**{x['ours_accuracy']:.4f}**",
                     f"{t['both_correct']} / {t['ours_only']} / {t['theirs_only']} / {t['both_wrong']}", kappa])
    lines += table(["set", "rows matched", "published", "their labels (matched rows)", "lighteval", "ours",
                    "ours vs theirs: both ✓ / only ours ✓ / only theirs ✓ / both ✗", "κ"], rows)
    lines += ["", "Each sample where ours, the source's label or lighteval disagree, or where a rule of our verifier "
              "overrode Math-Verify, is read by a person (`bench/external_review.json`: the response's final answer "
              "and whether it is the gold), and every grader is checked against that reading. False pass: scored "
              "correct, the final answer is not the gold; false fail: scored wrong, it is. A false fail of theirs on "
              "MATH-500 is named by its mechanism from the source row: the format gate (no "
              "`</think> <answer>…</answer>`) or the strict match (the tag's whole content must be the gold string). "
              "Samples all three graders agree on are not read.", ""]
    rows = []
    for name, x in r["sets"].items():
        c, mech = x["counts"], x["their_false_fail_by_mechanism"]
        how = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(mech.items(), key=lambda kv: -kv[1]))
        rows.append([name, str(len(x["read"])), f"**{pair(c['ours'])}**",
                     pair(c["theirs"]) + (f" ({how})" if how else ""), pair(c["lighteval"]),
                     str(len(x["unreviewed"]) + len(x["inconsistent"]))])
    lines += table(["set", "samples read", "ours: false pass / false fail", "theirs: false pass / false fail",
                    "lighteval: false pass / false fail", "not read or misread (must be 0)"], rows)
    shown = [(name, d) for name, x in r["sets"].items() for d in x["read"]
             if set(d["outcomes"]) != {"theirs"} or d["their_mechanism"] != "format_gate"]
    if shown:
        lines += ["", "Every sample read where a grader is wrong other than by the source's format gate, one by one "
                  "(✓ correct, ✗ wrong):", ""]
        mark = {"correct": "✓", "wrong": "✗", None: "—"}
        lines += table(["set", "problem", "gold", "final answer (read)", "ours", "theirs", "lighteval", "wrong", "note"],
                       [[name, d["problem_id"], code(d["gold"]), code(d["final_answer"]),
                         f"{mark.get(d['ours'], '✗')} {code(d['ours_answer'], 30)}", mark[d["theirs"]], mark[d["lighteval"]],
                         ", ".join(f"{g} {o.replace('_', ' ')}" + (f" ({d['their_mechanism'].replace('_', ' ')})"
                                                                   if g == "theirs" and d["their_mechanism"] else "")
                                   for g, o in d["outcomes"].items()),
                         d["note"].replace("|", "/")] for name, d in shown])
    return "\n".join(lines)


def region_dashboard(res: Results) -> str:
    r = res.get("dashboard")
    if r is None:
        return missing("dashboard", "python bench/dashboard.py")
    traced = all("queries" in x for x in r["pages"].values())
    store = ("the store of bench/store.py: 82 evaluation runs × 1,517 problems × 8, an imported run, a training run of "
             "500 steps and a study of 2 cells × 3 seeds (each a training run of 200 steps)" if traced else
             "82 runs × 1,517 problems × 8 + 500 training steps")
    lines = [f"{r['rows']:,} samples ({store}); {machine_detail(r['machine'])}. "
             + (f"Every page of the dashboard's navigation (`dashboard/app.py`: {len(r['pages'])}). " if traced else "")
             + "Cold render (data cache cleared) of each page with Streamlit's AppTest, median"
             + (f" of {r['repeats']}" if "repeats" in r else "") + f"; baseline: a page with only a title, "
             f"{r['baseline_s'] * 1e3:.0f} ms.", ""]
    lines += table(["page", "render", "× empty page", "target < 1 s"] + (["queries it ran"] if traced else []),
                   [[p, f"{x['median_s'] * 1e3:.0f} ms", f"{x['ratio_to_baseline']:.1f}×", "met" if x["meets_target"] else "MISSED"]
                    + ([", ".join(f"`{q}`" for q in x["queries"]) or "—"] if traced else [])
                    for p, x in r["pages"].items()])
    return "\n".join(lines)


def region_load(res: Results) -> str:
    r = res.get("load")
    if r is None:
        return missing("load", "python bench/load.py")
    q, w, m = r["quiet"], r["with_writer"], r["machine"]
    lines = [
        f"{w['clients']} client processes, each running every page's "
        + (f"data calls ({r['distinct_calls']} distinct calls of `dashboard.data` and the SQL box, recorded by rendering "
           f"each of the dashboard's {len(r['dashboard_pages'])} pages on the same store)" if "distinct_calls" in r else
           f"queries ({len(w['per_query'])} calls, `dashboard.data` and the SQL box)")
        + f" in a loop for {w['seconds']:.0f} s, on a store of {r['rows']:,} samples; {machine_detail(m)}. "
        "Baselines in the same run: the same clients with no writer, and the same evaluation with no clients.", ""]
    lines += table(["", "calls", "errors", "p50", "p95"],
                   [["quiet store", f"{q['calls']:,}", str(len(q["errors"])), f"{q['p50_ms']:.0f} ms", f"{q['p95_ms']:.0f} ms"],
                    ["while `prl eval` writes", f"{w['calls']:,}", str(len(w["errors"])),
                     f"{w['p50_ms']:.0f} ms (**{r['p50_ratio_to_quiet']:.2f}×**)",
                     f"{w['p95_ms']:.0f} ms (**{r['p95_ratio_to_quiet']:.2f}×**)"]])
    lines += ["", f"The writer (a real `prl eval`) added {w['writer']['samples_added']} samples in "
              f"{w['writer']['seconds']:.0f} s under the clients, against {r['writer_alone']['seconds']:.0f} s alone "
              f"(**{r['writer_slowdown']:.2f}×**); the clients saw its count grow from {w['seen_first']} to {w['seen_last']} "
              f"({'never decreasing' if w['monotonic'] else 'NOT monotonic'}). Per query (p50 / p95 ms, with the writer): "
              + ", ".join(f"{k} {v['p50_ms']:.0f}/{v['p95_ms']:.0f}" for k, v in w["per_query"].items()) + "."]
    ww = r.get("write_waits")
    lines += ["", f"*Write transactions under the same {w['clients']} clients*, the writer's turnstile on and off alternately"
              + (f" ({ww['rows_per_write']} rows each)" if ww and "rows_per_write" in ww else "") + ": "]
    if ww:
        on, off = ww["writers_first"], ww["no_priority"]
        lines[-1] += (f"median {on['median_s']:.2f} s (max {on['max_s']:.2f} s) with it, {off['median_s']:.2f} s "
                      f"(max {off['max_s']:.2f} s) without: **{off['median_s'] / on['median_s']:.1f}×** shorter at the "
                      f"median, **{off['max_s'] / on['max_s']:.0f}×** at the worst ({on['n']} transactions each).")
    else:
        lines[-1] += "not measured in this run."
    rw = r.get("reader_waits")
    lines += ["", "*One reader querying in a loop while a writer commits transactions back to back*"
              + (f" ({rw['rows_per_chunk']} rows each)" if rw and "rows_per_chunk" in rw else "")
              + ", the turnstile on and off alternately: "]
    if rw:
        on, off = rw["turnstile"], rw["no_turnstile"]
        lines[-1] += (f"with it the reader's longest wait was {on['max_ms']:.0f} ms (p95 {on['p95_ms']:.0f} ms, "
                      f"{on['reads']} reads), without it {off['max_ms']:.0f} ms (p95 {off['p95_ms']:.0f} ms, {off['reads']} "
                      f"reads): **{off['max_ms'] / on['max_ms']:.1f}×** shorter at the worst; the writer's {rw['chunks']} "
                      f"transactions took {on['writer_s']:.1f} s against {off['writer_s']:.1f} s ({rw['rounds']} rounds "
                      "each, medians).")
    else:
        lines[-1] += "not measured in this run."
    return "\n".join(lines)


def kill_totals(chains: list[dict]) -> dict:
    """The kill chains' figures summed (tests/faults/chain.py writes each chain's record): kills, recovered, stages
    hit, rows expected / lost / extra / duplicated, rows compared by value and different, and whether all is well."""
    s = {k: sum(c.get(k, 0) for c in chains) for k in ("kills", "recovered", "rows_expected", "rows_lost",
                                                        "rows_extra", "duplicates", "rows_compared", "values_differ")}
    s["stages"] = sum(len(c.get("stages") or {}) for c in chains)
    s["as_aimed"] = sum(p.get("stage") == p.get("aimed_stage") for c in chains for p in c.get("points") or [])
    s["per_chain"] = ", ".join(f"{c['name']} {c['kills']}" for c in chains)
    s["ok"] = (s["recovered"] == s["kills"] == s["as_aimed"] and s["rows_compared"] > 0
               and not (s["rows_lost"] or s["rows_extra"] or s["duplicates"] or s["values_differ"])
               and not any(c.get("failure") or c.get("mismatches") for c in chains))
    return s


REPRODUCIBILITY_LABELS = {
    "train_twice": "training run (vLLM rollouts), run twice",
    "train": "training run (vLLM rollouts), killed and resumed",
    "train_twice_hf": "training run (hf engine), run twice",
    "train_hf": "training run (hf engine), killed and resumed",
    "pipeline": "`prl demo --small`, killed and resumed",
}
"""What each same-seed comparison is, by its record's name (tests/faults writes the records)."""


def region_reproducibility(res: Results) -> str:
    """README's reproducibility figures: same seed on one machine, run twice (reproducibility.json) and killed at
    named stages and resumed (the train and pipeline chains of faults.json), each against an uninterrupted run."""
    r, f = res.get("reproducibility"), res.get("faults")
    records = list((r or {}).get("comparisons", [])) + [c for c in (f or {}).get("chains", []) if c.get("files_compared")]
    if not records:
        return missing("reproducibility", "python bench/run_all.py --only faults")
    order = list(REPRODUCIBILITY_LABELS)
    records.sort(key=lambda c: order.index(c["name"]) if c["name"] in order else len(order))
    rows = []
    for c in records:
        bad = c.get("mismatches") or []
        rows.append([REPRODUCIBILITY_LABELS.get(c["name"], c.get("what", c["name"])),
                     f"{c['kills']} at {len(c.get('stages') or {})} stages" if "kills" in c else "—",
                     f"{c.get('rows_compared', 0):,}", str(c.get("values_differ", 0)),
                     f"{c.get('rows_lost', 0)} / {c.get('rows_extra', 0)}",
                     ("bit-identical" if not bad else f"**{len(bad)} different**")
                     + (f" — **{c['failure']}**" if c.get("failure") else "")])
    files = sorted({c["files_compared"] for c in records if c.get("files_compared")}, key=len)
    line, _ = machines_line(res, ["reproducibility", "faults"])
    return "\n".join(["Same seed, one machine, each against one uninterrupted run:", ""]
                     + table(["run", "kills", "rows compared by value", "different", "missing / extra",
                              "weights and checkpoints"], rows)
                     + ["", "Bit for bit: " + "; the demo: ".join(files) + ". By value: every stored column but the "
                        "measured times and memory of training steps and verification, and the paths and times that "
                        "name a run. " + line])


def region_faults(res: Results) -> str:
    f = res.get("faults")
    if f is None or not f["chains"]:
        return missing("faults", "python bench/run_all.py --only faults")
    ch = f["chains"]
    lines = table(["chain", "kills", "recovered", "runs", "rows expected", "lost", "extra", "duplicates",
                   "compared by value", "different", "time"],
                  [[c["name"], str(c["kills"]), str(c["recovered"]), str(c.get("segments", 1)),
                    f"{c.get('rows_expected', 0):,}", str(c.get("rows_lost", 0)), str(c.get("rows_extra", 0)),
                    str(c.get("duplicates", 0)), f"{c.get('rows_compared', 0):,}", str(c.get("values_differ", 0)),
                    f"{c['seconds'] / 60:.1f} min"] for c in ch])
    lines += ["", "Kills per stage (the stage a kill aimed at; *as aimed*: the kills after which the store and the files "
              "showed that stage, derived from them, not from the time of the kill):", ""]
    lines += table(["chain", "stage", "kills", "as aimed", "recovered"],
                   [[c["name"], kind, str(s["kills"]), str(s["stage_as_aimed"]), str(s["recovered"])]
                    for c in ch for kind, s in (c.get("stages") or {}).items()])
    skipped = {t: why for c in ch for t, why in (c.get("not_compared") or {}).items()}
    notes = [f"{t}: {why}" for t, why in sorted(skipped.items())]
    failed = [f"{c['name']}: {c['failure'] or '; '.join(c['mismatches'])}" for c in ch if c.get("failure") or c.get("mismatches")]
    lines += ["", f"Collected on {machine_detail(f['machine'])}."
              + (" Not compared by value: " + "; ".join(notes) + "." if notes else "")
              + (" **Failed:** " + "; ".join(failed) if failed else "")]
    return "\n".join(lines)


def region_study(res: Results) -> str:
    r = res.get("study")
    if r is None:
        return missing("study", "python bench/study.py")
    rep = r["report"]
    n = rep["n"]
    done = sum(j["status"] == "finished" for j in rep["jobs"])
    ph = r.get("phases") or {}
    split = (f" (warm start {duration(ph['warm_start'])}, then {duration(ph['jobs'])} for the jobs, "
             f"{duration(ph['per_job'])} each)" if ph else "")
    lines = [f"`prl study --config {r['config']}`: {len(rep['cells'])} cells × {len(rep['seeds'])} seeds "
             f"({done} of {len(rep['jobs'])} jobs finished) in {duration(r['seconds'])}{split}, commit "
             f"{r['commit'] or '?'}; {rep['problems']} held-out synthetic problems × n = {n}. "
             f"{machine_detail(r['machine'])}.", ""]

    def ci(x, lo, hi):
        if lo != lo or lo is None:  # NaN: one seed
            return f"{100 * x:.1f}"
        return f"{100 * x:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"

    by = {(c["cell"], c["metric"]): c for c in rep["per_cell"]}
    paired = {p["cell"]: p for p in rep["paired"]}
    rows = []
    for cell in rep["cells"]:
        a, p1, pn = by.get((cell, f"average@{n}")), by.get((cell, "pass@1")), by.get((cell, f"pass@{n}"))
        if a is None:
            rows.append([f"`{cell}`", "0", "—", "—", "—", "—"])
            continue
        d = paired.get(cell)
        vs = "baseline" if cell == rep["baseline"] else (
            "—" if d is None else f"{100 * d['diff']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"
            + (" (CI includes 0)" if d["includes_zero"] else ""))
        rows.append([f"`{cell}`", str(a["seeds"]), ci(a["mean"], a["seed_lo"], a["seed_hi"]),
                     f"[{100 * a['problem_lo']:.1f}, {100 * a['problem_hi']:.1f}]",
                     ci(pn["mean"], pn["seed_lo"], pn["seed_hi"]) if pn else "—", vs])
    lines += table(["cell", "seeds", f"average@{n} % [95% CI across seeds]", "[CI across problems]",
                    f"pass@{n} % [CI seeds]", f"− {rep['baseline']}, seed-matched (pp) [CI seeds]"], rows)
    if rep["eta_sweep"]:
        lines += ["", "η sweep (average@n): " + ", ".join(f"η {e['eta']:g}: {100 * e['mean']:.1f}" for e in rep["eta_sweep"])
                  + "."]
    lines += ["", ("The cells' stored configs differ only in " + ", ".join(f"`{k}`" for k in rep["config_differences"])
                   + " (all declared by the study)." if not rep["undeclared_differences"] else
                   "WARNING: undeclared config differences: " + ", ".join(rep["undeclared_differences"]) + ".")]
    return "\n".join(lines)


RL_PHASES = ("generate_s", "logprobs_s", "reward_s", "update_s")


def rl_step_targets(rl: dict) -> list[str]:
    """Issue 26's two goals for the RL step, from the same run, and where the seconds go phase by phase."""
    sm = rl["summary"]
    if "grpo-noref:hf" not in sm or "prl:hf" not in sm or "grpo:hf" not in sm:
        return []
    level = sm["trl"]["step_s"] / sm["grpo-noref:hf"]["step_s"]
    prl = sm["prl:hf"]["step_s"] / sm["grpo:hf"]["step_s"]
    # after the first update the two policies sample different responses: generation is not the same work
    compute = (sum(sm["prl:hf"][k] for k in RL_PHASES[1:]) / sum(sm["grpo:hf"][k] for k in RL_PHASES[1:]))

    def phases(a: str, b: str) -> str:
        return ", ".join(f"{k[:-2]} {sm[a][k] - sm[b][k]:+.2f} s" for k in RL_PHASES)

    return ["", f"Goals, this run: our GRPO step level with TRL's (TRL / ours ≥ 1.0, both without a reference pass): "
                f"**{level:.2f}×** {met(level >= 1.0)}; our PRL step within 1.05× of our GRPO step (both with the "
                f"reference pass): **{prl:.2f}×** {met(prl <= 1.05)}; without generation (once the policies differ "
                f"they sample different responses, so generation is not the same work) **{compute:.2f}×**. Per phase, "
                "ours GRPO (no reference) − TRL: "
                f"{phases('grpo-noref:hf', 'trl')}; ours PRL − ours GRPO: {phases('prl:hf', 'grpo:hf')}."]


def region_peers(res: Results) -> str:
    r = res.get("peers")
    if r is None or not all(k in r for k in ("advantages", "rl_step", "verification", "analysis")):
        return missing("peers", "python bench/peers.py")
    def when(part: dict) -> str:
        m = part.get("machine")  # the parts are measured by separate runs, possibly on different machines
        return f" — measured on {machine_label(m)}, {m['date']}, commit {m['git_commit']}" if m else ""

    lines = [f"`python bench/peers.py`; {machine_detail(r['machine'])}. Each part runs both sides in one run, each "
             "peer in its own environment under `bench/.envs/` (made by `bench/peers/<tool>/`), the project in "
             "`.venv`; every figure is a ratio against the peer in that part's run. Ratios of sub-millisecond calls "
             "and ratios near 1 move between runs on this machine: read them as ties.", ""]
    adv = r["advantages"]
    lines += [f"**Advantages** (verl {adv['verl']}, torch {adv['peer_env']['torch']}; median of repeated calls, "
              f"two warm-ups excluded on both sides{when(adv)}):", ""]
    rows = []
    for name, c in adv["cases"].items():
        ms = c["ms"]
        eq = all(v["equal"] for v in c["checks"].values())
        worst = max(v["max_abs_diff"] for v in c["checks"].values())
        rows.append([f"{name} (B {c['B']}, L {c['L']:,})", f"{ms['verl']['grpo_loop']:.2f} ms",
                     f"{ms['verl']['grpo_vectorized']:.2f} ms", f"{ms['ours']['grpo']:.2f} ms",
                     f"{ms['ours']['prl_eta_inf']:.2f} ms",
                     f"**{c['ratios']['verl grpo_loop / ours grpo']:.1f}×** / "
                     f"**{c['ratios']['verl grpo_vectorized / ours grpo']:.1f}×**",
                     ("equal" if eq else "DIFFER") + f" (max abs diff {worst:.1e})"])
    lines += table(["case", "verl GRPO (loop)", "verl GRPO (vectorised)", "ours GRPO", "ours PRL η = ∞",
                    "verl loop / ours, vectorised / ours", "GRPO, Dr.GRPO, PRL η = ∞ vs verl"], rows)
    rl = r["rl_step"]
    sm = rl["summary"]
    lines += ["", f"**An RL step** (TRL {rl['trl']['versions']['trl']} `GRPOTrainer` against our trainer; "
              f"{rl['settings']['prompts_per_step']} prompts × {rl['settings']['group']}, ≤ "
              f"{rl['settings']['max_tokens']} tokens, optimizer batch {rl['settings']['micro_batch']} × "
              f"{rl['settings']['grad_accum']}, lr {rl['settings']['lr']:g}, fp32, 2 threads; the same prompts at every "
              f"step; median of {rl['steps'] - rl['warmup_steps']} steps after {rl['warmup_steps']} warm-up per run, "
              "each run in a fresh process, "
              + (f"in the order {', '.join(rl['order'])}, each side's steps pooled" if "order" in rl else
                 "TRL run before and after ours and its steps pooled") + f"{when(rl)}):", ""]
    rows = []
    measured = {spec: [st["wall_s"] for st in side["steps"] if not st["warmup"]] for spec, side in rl["ours"].items()}
    measured["trl"] = [st["wall_s"] for run in rl.get("trl_steps", []) for st in run if not st["warmup"]]
    for name, label in (("trl", "TRL (transformers generate)"),
                        ("grpo-noref:hf", "ours GRPO, hf engine, no reference (as TRL's β = 0)"),
                        ("grpo:hf", "ours GRPO, hf engine, reference pass (actor/kl_ref logged)"),
                        ("prl:hf", "ours PRL, hf engine"), ("grpo:vllm", "ours GRPO, vLLM engine (default)")):
        if name not in sm:
            continue
        x = sm[name]
        ratio = "—" if name == "trl" else f"**{x['step_s'] and sm['trl']['step_s'] / x['step_s']:.2f}×**"
        spread = f" ({min(measured[name]):.2f}–{max(measured[name]):.2f})" if measured.get(name) else ""
        rows.append([label, f"{x['step_s']:.2f} s{spread}", f"{x['generate_s']:.2f} s", f"{x['logprobs_s']:.2f} s",
                     f"{x['reward_s'] * 1e3:.1f} ms", f"{x['update_s']:.2f} s", f"{x['completion_tokens']:.1f}",
                     f"{x['peak_rss_mib']:,.0f} MiB", ratio])
    lines += table(["side", "step (min–max of the measured steps)", "generate", "log-probs", "reward", "update",
                    "mean completion tokens",
                    "peak RSS", "TRL step / ours"], rows)
    lines += ["", "What differs between the two set-ups and cannot be made equal: " + "; ".join(rl["differences"]) + "."]
    lines += rl_step_targets(rl)
    v = r["verification"]
    lv = v["lighteval"]
    prov = lv["provenance_check"]
    lines += ["", f"**Verification** of the {v['responses']} real outside responses in `tests/data/external/` "
              f"(lighteval {lv['version']}, `extractive_match`: it reproduces the Saturn AIME file's own labels on "
              f"{prov['agree']}/{prov['rows']} rows; each side in a fresh process, one warm-up call excluded{when(v)}):", ""]
    rps = v["responses_per_s"]
    lines += table(["lighteval (one process)", "ours, verify_one in one process",
                    f"ours, VerifierPool ({v['ours']['pool_workers']} workers, start included)",
                    "ours one process / lighteval", "ours pool / lighteval"],
                   [[f"{rps['lighteval']:.0f} responses/s", f"{rps['ours_sequential']:.0f} responses/s",
                     f"{rps['ours_pool']:.0f} responses/s",
                     f"**{v['ratios']['ours sequential / lighteval (responses/s)']:.2f}×**",
                     f"**{v['ratios']['ours pool / lighteval (responses/s)']:.2f}×**"]])
    rows = [[src, str(d["rows"]), str(d["ours_correct"]), str(d["lighteval_correct"]), str(d["file_label_correct"]),
             f"{d['agree']}/{d['rows']}"] for src, d in v["agreement"].items()]
    lines += [""] + table(["file", "rows", "ours correct", "lighteval correct", "the file's own labels",
                           "ours = lighteval"], rows)
    causes: dict[str, int] = {}
    for d in v["agreement"].values():
        for x in d["disagree"]:
            causes[x.get("cause", "not classified")] = causes.get(x.get("cause", "not classified"), 0) + 1
    if causes:
        lines += ["", "Where the two differ, each row's cause (rows listed in the results file): "
                  + "; ".join(f"{n} × {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1])) + "."]
    a = r["analysis"]
    lines += ["", f"**Analysis** of {a['rows']:,} samples ({a['runs']} runs): the store ({a['store_mib']:.0f} MiB) "
              f"against one JSONL file per run with pandas ({a['jsonl_mib']:.0f} MiB); each side a fresh process, "
              f"so its time includes reading the data{when(a)}:", ""]
    names = {"scores": "average@n, pass@1, pass@n per data set with 95% bootstrap CIs (one run)",
             "diff": "success-set diff of two runs", "suspicious": "the run's suspicious passes"}
    rows = [[names[q], f"{x['ours_s']:.2f} s", f"{x['pandas_s']:.2f} s", f"**{x['pandas / ours']:.1f}×**",
             "equal" if a["checks"][q]["equal"] else "DIFFER"] for q, x in a["questions"].items()]
    rows.append(["all three, one process each", f"{a['total']['ours']:.2f} s", f"{a['total']['pandas']:.2f} s",
                 f"**{a['total']['pandas'] / a['total']['ours']:.1f}×**", ""])
    rows.append(["peak RSS", f"{a['peak_rss_mib']['ours']:,.0f} MiB", f"{a['peak_rss_mib']['pandas']:,.0f} MiB",
                 f"**{a['peak_rss_mib']['pandas'] / a['peak_rss_mib']['ours']:.1f}×**", ""])
    lines += table(["question", "ours (store)", "pandas (JSONL)", "pandas / ours", "answers"], rows)
    return "\n".join(lines)


def suite_line(r: dict) -> str:
    c = r["counts"]
    failed = c["failures"] + c["errors"]
    return (f"`{r['command']}`{' (a partial run)' if r['partial'] else ''}: {c['passed']} passed"
            + (f", **{failed} failed**" if failed else "") + f", {c['skipped']} skipped in **{duration(r['seconds'])}** "
            f"(target ≤ {duration(r['target_s'])}: {met(r['within_target'] and not r['partial'])})"
            + (f", {r['workers']} pytest-xdist workers" if r.get("workers", 1) > 1 else "")
            + f", on {machine_detail(r['machine'])}")


def region_suite_time(res: Results) -> str:
    r = res.get("suite")
    if r is None:
        return missing("suite", "python bench/suite.py")
    return (f"The suite: {suite_line(r)}. Machines of this kind differ up to ~3× in speed; "
            "`python bench/suite.py` re-measures it (bench/RESULTS.md lists the slowest tests).")


def region_suite(res: Results) -> str:
    r = res.get("suite")
    if r is None:
        return missing("suite", "python bench/suite.py")
    cpu = r["cpu_user_s"] + r["cpu_sys_s"]
    cores = (r["machine"] or {}).get("affinity_cores") or (r["machine"] or {}).get("cores") or 1
    lines = [suite_line(r) + ".", "",
             f"CPU time of the suite's processes: {duration(r['cpu_user_s'])} user + {duration(r['cpu_sys_s'])} system "
             f"= {cpu / (r['seconds'] * cores):.0%} of {cores} cores over the wall time. "
             f"Test time (setup + call + teardown, summed over the workers): {duration(r['test_seconds'])}.", ""]
    if "skipped" in r:  # recorded from the run's JUnit XML (older results files did not record them)
        lines += table(["skipped test", "reason"], [[f"`{x['test']}`", x["reason"]] for x in r["skipped"]]) + [""]
    cpu_cols = "cpu_s" in r["slowest"][0] if r["slowest"] else False  # recorded per test since the suite ran on xdist

    def row(name: str, x: dict) -> list[str]:
        return [f"`{name}`", duration(x["seconds"])] + ([duration(x["cpu_s"])] if cpu_cols else [])

    lines += table(["slowest tests", "time"] + (["CPU time"] if cpu_cols else []),
                   [row(t["test"], t) for t in r["slowest"][:12]])
    lines += [""]
    lines += table(["test time by file", "time"] + (["CPU time"] if cpu_cols else []),
                   [row(f["file"], f) for f in r["by_file"][:8]])
    return "\n".join(lines)


def _size(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.0f} MiB"


def region_memory(res: Results) -> str:
    r = res.get("memory")
    if r is None:
        return missing("memory", "python bench/memory.py")
    env = r["environment"]
    lines = [f"`{r['command']}`; {machine_detail(r['machine'])}. Memory is the process's resident set: its peak "
             "(VmHWM, reset through `/proc/self/clear_refs` before each phase) minus the RSS before the phase; every "
             f"measurement runs in a fresh process with `MALLOC_MMAP_THRESHOLD_={env['MALLOC_MMAP_THRESHOLD_']}` "
             f"(freed tensors go back to the system) and {env['torch_threads']} torch threads.", ""]
    lp = r.get("logprob_pass")
    if lp:
        lines += [f"**1. The log-prob + entropy pass, chunked (today) vs full logits ({r['baseline_commit']})**, "
                  f"{lp['model']} (vocabulary {lp['vocab']:,}; its first {lp['layers_used']} of {lp['layers_of_model']} "
                  "decoder layers: the decoder's activations are the same for both), one micro-batch, peak above the "
                  "RSS before the pass:", ""]
        lines += table(["micro-batch", "pass", "chunk", "full logits", "chunked", f"lower by (target ≥ {lp['target_ratio']:.0f}×)"],
                       [[f"{c['rows']} × ({c['prompt']} + {c['response']}) = {c['response_tokens']:,} response tokens",
                         c["pass"], str(c["chunk_tokens"]), _size(c["full_peak_bytes"] / 2**30),
                         _size(c["chunked_peak_bytes"] / 2**30), f"**{c['ratio']:.1f}×** {met(c['meets_target'])}"]
                        for c in lp["cases"]])
        v = lp["values"]
        lines += ["", f"Values ({v['response_tokens']:,} response tokens, the first micro-batch): max |Δ log-prob| "
                  f"{v['max_abs_logp_diff']:.1e} {met(v['meets_tolerance']['logp'])}, max |Δ entropy| "
                  f"{v['max_abs_entropy_diff']:.1e} {met(v['meets_tolerance']['entropy'])} (tolerance "
                  f"{lp['value_tolerance']:.0e}); every parameter's gradient: max |Δ| {v['max_abs_grad_diff']:.1e} "
                  f"(largest gradient {v['max_abs_grad']:.2f}), relative {v['max_rel_grad_diff']:.1e}. Against a "
                  f"float64 computation from the same hidden states: chunked log-probs {v['chunked_vs_float64']['max_abs_logp']:.1e} "
                  f"/ entropy {v['chunked_vs_float64']['max_abs_entropy']:.1e}, full logits "
                  f"{v['full_vs_float64']['max_abs_logp']:.1e} / {v['full_vs_float64']['max_abs_entropy']:.1e}."]
    pv = r.get("plan_vs_measured")
    if pv:
        names = [t["term"] for t in pv["configs"][0]["terms"]]
        short = {"log-prob phase: activations + log-prob chunk": "log-prob phase", 
                 "update: activations + log-prob chunk + gradients": "update"}
        lines += ["", f"**2. The memory plan (`prl train --dry-run`, prl.training.memory) against measurement**, "
                  "predicted / measured (ratio); the log-prob phase and the update: what the phase adds to the RSS "
                  "before it (activations + the log-prob chunk, and in the update the gradients and DeepSpeed's "
                  f"reduction copy); peak: the largest phase, everything included. Target: within "
                  f"±{pv['tolerance']:.0%} (terms under {2 * pv['resolution_bytes'] / 2**20:.0f} MiB: within "
                  f"{pv['resolution_bytes'] / 2**20:.0f} MiB); misses in bold.", ""]

        def cell(x: dict) -> str:
            ratio = f"{x['ratio']:.2f}" if x["ratio"] else "—"
            text = f"{_size(x['predicted_gib'])} / {_size(x['measured_gib'])} ({ratio})"
            return text if x["within"] else f"**{text}**"

        def described(c: dict) -> str:
            s = c["spec"]
            text = (f"{s['model']} {s['rows']} × ({s['prompt']} + {s['response']}), checkpointing "
                    f"{'on' if s['checkpointing'] else 'off'}, chunk {s['chunk']}")
            if "zero_stage" in s:
                text += (f", ZeRO-{s['zero_stage']} on {s.get('ranks', 1)} ranks, {s.get('dtype', 'float32')}, "
                         f"accumulation {s.get('grad_accum_dtype', 'fp32')}")
            return text + (", export" if s.get("export") else "")

        ins = [c for c in pv["configs"] if c.get("sample", "in") == "in"]
        outs = [c for c in pv["configs"] if c.get("sample") == "out"]
        lines += table(["configuration (in sample)"] + [short.get(n, n) for n in names] + ["peak"],
                       [[described(c)] + [cell(x) for x in c["terms"]]
                        + [cell(c["peak"]) + f" {c['peak']['measured_phase']}"] for c in ins])
        if outs:
            names_out = max((c["terms"] for c in outs), key=len)
            short["export: added while writing"] = "export"
            lines += ["", "Out of sample: the plan's constants frozen (prl/training/memory.py as committed), then "
                      "configurations that never set one, measured the same way (" + "; ".join(
                          f"{c['spec']['model']}: {c['spec']['why']}" for c in outs) + "); — where a configuration "
                      "has no export moment.", ""]
            lines += table(["configuration (out of sample)"] + [short.get(t["term"], t["term"]) for t in names_out]
                           + ["peak"],
                           [[described(c)] + [next((cell(x) for x in c["terms"] if x["term"] == t["term"]), "—")
                                              for t in names_out]
                            + [cell(c["peak"]) + f" {c['peak']['measured_phase']}"] for c in outs])
        n_ok = sum(x["within"] for c in ins for x in c["terms"] + [c["peak"]])
        n_all = sum(len(c["terms"]) + 1 for c in ins)
        kv = pv["configs"][0]["kv_cache"]
        before = r.get("plan_before_changes")
        o_ok = sum(x["within"] for c in outs for x in c["terms"] + [c["peak"]])
        o_all = sum(len(c["terms"]) + 1 for c in outs)
        lines += ["", f"Within the target in sample: {n_ok} of {n_all}"
                  + (f" (the plan before the changes these measurements led to, {before['commit']}: "
                     f"{before['within']} of {before['of']})" if before else "")
                  + (f"; out of sample: {o_ok} of {o_all}" if outs else "") + ". The CPU engine's fixed part "
                  "(`VLLM_CPU_RUNTIME_GIB`) was measured on the tiny model, so its engine row is not an independent "
                  f"check. vLLM's KV cache ({kv['mapping_gib'][0]:.2f} GiB) is resident "
                  f"({kv['resident_before_generation_gib'][0]:.2f} GiB) before the first generation; generating "
                  f"{kv['generated_tokens']:,} tokens added {kv['generation_added_gib'] * 1024:.0f} MiB."]
        if r.get("weakest"):
            lines += ["", "Where the plan is furthest from the measurement: " + "; ".join(r["weakest"]) + "."]
    st = r.get("step_time")
    if st:
        s = st["spec"]
        lines += ["", f"**3. Step time, everything on vs off** (log-prob passes + update of one step, SmolLM2-135M, "
                  f"{s['rows']} rollouts of {s['prompt']} prompt + 30–100% of {s['max_tokens']} response tokens, "
                  f"micro-batches of {s['micro']}; alternated, median of {s['repeats']}). On: gradient checkpointing, "
                  f"chunked log-probs, micro-batches cut to their own length (today's trainer); off: "
                  f"{r['baseline_commit']}'s full logits, no checkpointing, micro-batches padded to the step's longest.", ""]
        lines += table(["", "on", "off", f"on / off (target ≤ {st['target']:.1f}×)"],
                       [["seconds (median)", f"{st['median_s']['on']:.1f} s", f"{st['median_s']['off']:.1f} s",
                         f"**{st['ratio']:.3f}×** {met(st['meets_target'])}"]]
                       + ([["median of the alternated pairs' ratios", "", "",
                            f"{st['median_paired_ratio']:.3f}× {met(st['median_paired_ratio'] <= st['target'])}"]]
                          if "median_paired_ratio" in st else [])
                       + [["positions of the log-prob passes", f"{st['positions']['on']:,}",
                           f"{st['positions']['off']:,}", ""]])
    if r.get("findings"):
        lines += ["", "What this run's figures say where they miss a target or need a reason:", ""]
        lines += [f"- {x}" for x in r["findings"]]
    return "\n".join(lines)


def region_smollm2_train(res: Results) -> str:
    r = res.get("smollm2_train")
    if r is None:
        return missing("smollm2_train", "python bench/smollm2_train.py")
    def done(c: dict) -> str:
        return "finished" if c["rc"] == 0 else f"failed ({c['rc']})"

    cmds = "; ".join(f"`{c['command']}` {done(c)} in {duration(c['seconds'])}" for c in r["commands"])
    p, m = r["plan"], r["measured"]
    lines = [f"`python bench/smollm2_train.py` ({machine_detail(r['machine'])}): {cmds}. The dry run's plan says "
             f"{'fits' if p['fits'] else 'does not fit'} on this machine ({p['capacity_gib']:.1f} GiB) with a peak of "
             f"**{p['peak_gib']:.2f} GiB** in the {p['peak_phase']} phase; the trainer measured **{m['peak_gib']:.2f} GiB** "
             f"({m['peak_phase']}): prediction / measurement **{r['ratio']:.2f}** (target within "
             f"±{r['tolerance']:.0%}: {met(r['within_tolerance'])}). The final evaluation stored "
             f"{r['final_eval']['samples_added']} samples.", ""]
    lines += table(["phase", "planned", "measured (peak RSS, reset at the phase start; max over the steps)", "ratio"],
                   [[ph, f"{p['phases_gib'][ph]:.2f} GiB", f"{v:.2f} GiB", f"{r['phase_ratios'][ph]:.2f}"]
                    for ph, v in m["phases_peak_gib"].items()])
    if m.get("process_tree_peak_gib") is not None:
        lines += ["", f"The whole process tree (the trainer, its verifier workers, the `prl` process and its Prefect "
                      f"server) peaked at {m['process_tree_peak_gib']:.1f} GiB, as `prl train` reported it."]
    return "\n".join(lines)


def region_verifier_forms(res: Results) -> str:
    v = res.get("verifier_forms")
    if v is None:
        return missing("verifier_forms", "python bench/verifier_forms.py")
    flagged = v["flagged_golds"]
    lines = [f"Every one of the {v['golds']:,} bundled golds written back as a response in equivalent forms, "
             f"{v['responses']:,} responses, verified by `VerifierPool` ({v['workers']} workers, {v['wall_s']:.0f} s); "
             f"{machine_detail(v['machine'])}. Every response is correct by construction. A form is run only on the "
             f"golds it changes (and `x = …`/`f(1) = …` only on single answers without that variable).", ""]
    rows = []
    for name, f in v["forms"].items():
        unflagged = [x["id"] for x in f["failing_unflagged"]]
        others = len(f["failing_ids"]) - len(unflagged)
        fail = ", ".join(f"`{i}`" for i in unflagged) or "—"
        if others:
            fail += f" (+{others} flagged gold{'s' if others > 1 else ''})"
        rows.append([f"`{name}`", f"{f['passed']:,} / {f['applicable']:,}", fail])
    lines += table(["form", "passed / run", "failing (golds not flagged by `gold_flag`)"], rows)
    lines += ["", f"{len(flagged)} golds are flagged by `gold_flag` (Math-Verify does not read them whole: "
                  f"{', '.join(f'{k} {n}' for k, n in sorted(Counter(flagged.values()).items()))})."]
    return "\n".join(lines)


def region_cli(res: Results) -> str:
    c = res.get("cli")
    if c is None:
        return missing("cli", "python bench/cli.py")
    m = c["machine"]
    load = m.get("load_average_1min")
    cmd = c["commands"]
    lines = [f"Each command a fresh process ({'with' if c.get('bytecode_cache') else 'without'} Python's bytecode cache), "
             f"median of {c['repeats']} runs (max in brackets); {machine_detail(m)}"
             + (f", load average {load[0]:.1f} → {load[1]:.1f} while measuring" if load else "")
             + (f", at niceness {m['niceness']}" if m.get("niceness") else "") + ".", ""]

    def row(name: str, what: str, target: str, ok: bool | None) -> list[str]:
        x = cmd[name]
        return [what, f"{x['median_s']:.2f} s ({x['max_s']:.2f} s)", target, met(ok)]

    lines += table(["command", "time", "target", ""],
                   [row("help", "`prl --help`", "< 1 s", c["help_met"]), row("sql", "`prl sql` (one query)", "< 1 s", c["sql_met"]),
                    row("report", "`prl report` (loads torch to compute)", "—", None),
                    row("verify", "`prl verify` (loads Math-Verify)", "—", None),
                    row("import_torch", "baseline: `python -c \"import torch\"` (what the parser used to import)", "—", None)])
    if c["interrupts"]:
        lines += ["", f"Ctrl-C during `prl eval` (SIGINT to the process group once the first chunk is stored; "
                  f"{len(c['interrupts'])} runs): median **{c['interrupt_exit_median_s']:.2f} s** from the signal to the "
                  f"exit (target < 2 s: {met(c['interrupt_met'])}).", ""]
        lines += table(["exit", "status", "last line", "traceback", "helpers left", "samples stored before → after"],
                       [[f"{r['exit_s']:.2f} s", str(r["status"]), f"`{r['last_line']}`", "yes" if r["traceback"] else "no",
                         f"{r['helpers_left']} of {r['helpers']}", f"{r['stored_before']} → {r['stored_after']}"]
                        for r in c["interrupts"]])
    return "\n".join(lines)


def region_study_frpo_v2(res: Results) -> str:
    """The study of paper v2's claims (configs/study/frpo_v2.yaml): pass@1 and pass@16 per arm, and each claim's
    comparisons and verdict, as the study's own report computed them."""
    r = res.get("study_frpo_v2")
    if r is None:
        return missing("study_frpo_v2", "python bench/study.py --config configs/study/frpo_v2.yaml")
    rep = r["report"]
    n = rep["n"]
    done = sum(j["status"] == "finished" for j in rep["jobs"])
    seeds_done = {c: sum(j["status"] == "finished" for j in rep["jobs"] if j["cell"] == c) for c in rep["cells"]}
    lines = [f"`prl study --config {r['config']}`: {len(rep['cells'])} arms × {len(rep['seeds'])} seeds "
             f"({done} of {len(rep['jobs'])} jobs finished) in {duration(r['seconds'])}, commit {r['commit'] or '?'}; "
             f"{rep['problems']} held-out problems ({', '.join(rep['datasets'])}) × n = {n}. "
             f"{machine_detail(r['machine'])}.", ""]

    def ci(c):
        if c is None:
            return "—"
        if c["seed_lo"] != c["seed_lo"]:
            return f"{100 * c['mean']:.1f}"
        return f"{100 * c['mean']:.1f} [{100 * c['seed_lo']:.1f}, {100 * c['seed_hi']:.1f}]"

    by = {(c["cell"], c["metric"]): c for c in rep["per_cell"]}
    lines += table(["arm", "seeds", "pass@1 % [95% CI across seeds]", f"pass@{n} % [CI seeds]"],
                   [[f"`{c}`", str(seeds_done[c]), ci(by.get((c, "pass@1"))), ci(by.get((c, f"pass@{n}")))]
                    for c in rep["cells"]])
    rows = []
    for c in rep.get("claims", []):
        pct = "@" in c["metric"]

        def f(x):
            return "—" if x is None or x != x else (f"{100 * x:+.1f}" if pct else f"{x:+.3g}")
        for i, cmp in enumerate(c["comparisons"]):
            rows.append([c["text"] if i == 0 else "", f"`{c['metric']}`", f"`{cmp['against']}`", str(cmp["seeds"]),
                         f"{f(cmp['diff'])} [{f(cmp['lo'])}, {f(cmp['hi'])}]", f"**{c['verdict']}**" if i == 0 else ""])
    lines += ["", "Each claim: FRPO against each loss-side KL arm, seed by seed (FRPO − other; pp for pass@k; 95% CI "
              "across seeds). *holds here* when the CI excludes 0 in the claimed direction against both arms, "
              "*contradicted* when it excludes 0 the other way against one, else *not shown at this scale*.", ""]
    lines += table(["claim (arXiv 2601.10201v2)", "metric", "against", "seeds", "difference [CI seeds]", "verdict"],
                   rows)
    return "\n".join(lines)


def region_monitors(res: Results) -> str:
    """The online monitors on real runs (bench/monitors.py): a healthy run, the same run with a planted
    learning rate 100x too high (warn), and again with ``on_alert: stop``; each run's alerts and the monitors'
    cost against the step time."""
    r = res.get("monitors")
    if r is None:
        return missing("monitors", "python bench/monitors.py")
    s = r["settings"]
    lines = [f"{s['steps']} steps each, evaluation every {s['eval_every']} steps; healthy lr {s['healthy_lr']:g}, "
             f"planted lr {s['planted_lr']:g}. {machine_detail(r['machine'])}.", ""]
    rows = []
    for name, run in r["runs"].items():
        alerts = "; ".join(f"step {a['step']} `{a['monitor']}`" for a in run["alerts"]) or "none"
        stopped = "—" if run["stopped_at_step"] is None else f"step {run['stopped_at_step']}"
        c = run["cost"]
        rows.append([f"`{name}`", f"{run['lr']:g}", f"`{run['on_alert']}`", run["status"], str(run["steps_done"]),
                     stopped, alerts, f"{100 * c['ratio']:.2f}%"])
    lines += table(["run", "lr", "on_alert", "status", "steps", "stopped at", "alerts", "monitor + IS cost / step time"],
                   rows)
    lines += ["", f"Healthy run silent: {met(r['healthy_silent'])}; planted run fires: {met(r['planted_fires'])}; "
              f"stop run ends cleanly after a checkpoint: {met(r['stop_clean'])}; cost at most "
              f"{100 * r['max_ratio']:.2f}% of step time (goal ≤ {100 * r['goal_ratio']:.0f}%)."]
    return "\n".join(lines)


REGIONS: dict[str, Callable[[Results], str]] = {
    "status": region_status, "demo": region_demo, "performance": region_performance, "reliability": region_reliability,
    "summary": region_summary, "advantages": region_advantages, "generation": region_generation, "verify": region_verify,
    "store": region_store, "store_10m": region_store_10m, "relevance": region_relevance, "external": region_external, "train_step": region_train_step,
    "dashboard": region_dashboard, "load": region_load, "faults": region_faults, "real_model": region_real_model,
    "study": region_study, "peers": region_peers, "suite": region_suite, "suite_time": region_suite_time,
    "memory": region_memory, "smollm2_train": region_smollm2_train, "verifier_forms": region_verifier_forms,
    "reproducibility": region_reproducibility,
    "cli": region_cli, "study_frpo_v2": region_study_frpo_v2, "monitors": region_monitors,
}
EXPECTED = {
    "README.md": ("suite_time", "status", "demo", "reproducibility", "performance", "reliability", "external", "study",
                  "study_frpo_v2", "smollm2_train"),
    "bench/RESULTS.md": ("summary", "advantages", "generation", "real_model", "verify", "verifier_forms", "store", "store_10m", "relevance",
                         "external", "train_step", "dashboard", "load", "faults", "study", "peers", "suite", "memory",
                         "smollm2_train", "cli", "study_frpo_v2", "monitors"),
}

REGION_RE = re.compile(r"<!-- figures:(?P<name>[a-z][a-z0-9_-]*) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S)


def render_region(name: str, results_dir: Path) -> tuple[str, list[str]]:
    """(the region's body as it goes between its markers, the results files it read)."""
    res = Results(results_dir)
    body = REGIONS[name](res)
    return "\n" + body.strip("\n") + "\n\n", [res.path(n) + ("" if res.get(n) is not None else " (not recorded)")
                                              for n in res.used]


def render_text(text: str, results_dir: Path, expected: tuple[str, ...] = ()) -> tuple[str, list[dict]]:
    """(text with every known region re-rendered, one record per region: name, sources, old and new body)."""
    records: list[dict] = []
    problems: list[str] = []
    found = [m.group("name") for m in REGION_RE.finditer(text)]
    for name in expected:
        if name not in found:
            problems.append(f"region '{name}' is missing (add `<!-- figures:{name} -->` … `<!-- /figures:{name} -->`)")
    opened = re.findall(r"<!-- figures:([a-z][a-z0-9_-]*) -->", text)
    for name in opened:
        if name not in found:
            problems.append(f"region '{name}' has no closing `<!-- /figures:{name} -->`")
    for name in dict.fromkeys(found):
        if found.count(name) > 1:
            problems.append(f"region '{name}' appears {found.count(name)} times")
        if name not in REGIONS:
            problems.append(f"region '{name}' is unknown to bench/render.py (known: {', '.join(REGIONS)})")

    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in REGIONS:
            return m.group(0)
        body, sources = render_region(name, results_dir)
        records.append({"name": name, "sources": sources, "old": m.group("body"), "new": body})
        return f"<!-- figures:{name} -->\n{body}<!-- /figures:{name} -->"

    out = REGION_RE.sub(sub, text)
    for p in problems:
        records.append({"name": None, "problem": p})
    return out, records


def _diff_lines(old: str, new: str, limit: int = 6) -> list[str]:
    import difflib

    d = [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(), "committed", "rendered", n=0, lineterm="")
         if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return [f"      {line}" for line in d[:limit]] + ([f"      … {len(d) - limit} more changed lines"] if len(d) > limit else [])


def check(root: Path = ROOT, results_dir: Path = RESULTS, stale: bool = True) -> list[str]:
    """One message per region whose committed text differs from its rendering (and per malformed region), and
    (``stale``) one per results file behind a figure that is stale or cannot be dated (:func:`stale_results`)."""
    messages = []
    for rel in FILES:
        path = root / rel
        if not path.exists():
            messages.append(f"{rel}: missing")
            continue
        _, records = render_text(path.read_text(encoding="utf-8"), results_dir, EXPECTED.get(rel, ()))
        for r in records:
            if r["name"] is None:
                messages.append(f"{rel}: {r['problem']}")
            elif r["old"] != r["new"]:
                messages.append(f"{rel}: figure '{r['name']}' differs from its results ({', '.join(r['sources'])}):\n"
                                + "\n".join(_diff_lines(r["old"], r["new"])))
    if stale:
        messages += stale_results(root, results_dir)[0]
    return messages


# --- provenance: figures of code that changed since they were recorded ----------------------------

NOT_YET_RECORDED: dict[str, str] = {}
"""Results files recorded before results files carried their provenance (issue 28), each with why it has
not been re-recorded yet. They are exempt from :func:`stale_results` until re-recorded; a listed file
that has a provenance fails the check (take it off this list), and an unlisted file without one fails.
``--check`` still prints, for each, what changed since the commit its machine record names."""

RECORDING_ENV = "PRL_RECORDING"
"""Names (comma-separated) of results files being re-recorded by the run under way, exempt from the staleness
check inside that run: bench/suite.py sets it for the suite it times, whose own tests include this check and
would otherwise always find the suite record they are about to replace stale. Nothing else sets it."""

WRITERS: dict[str, tuple[str, str]] = {"store_10m": ("bench/store.py", "CODE"), "faults": ("bench/run_all.py", "FAULTS_CODE"),
                                       "reproducibility": ("bench/run_all.py", "FAULTS_CODE"),
                                       "study_frpo_v2": ("bench/study.py", "V2_CODE")}
"""Where a results file's code paths are declared when it is not ``CODE`` in ``bench/<name>.py``."""


def figure_sources(results_dir: Path = RESULTS) -> list[str]:
    """The results files (names) behind the figures of README.md and bench/RESULTS.md that exist in ``results_dir``."""
    names: list[str] = []
    for rel in FILES:
        for name in EXPECTED.get(rel, ()):
            res = Results(results_dir)
            try:
                REGIONS[name](res)
            except Exception:  # noqa: BLE001 - a region that cannot render is reported by check(); its sources still count
                pass
            names += [n for n in res.used if (Path(results_dir) / f"{n}.json").exists()]
    return sorted(dict.fromkeys(names))


def _git(root: Path, *args: str) -> tuple[int, str]:
    import subprocess

    try:
        r = subprocess.run(["git", "--no-optional-locks", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)
    return r.returncode, (r.stdout if r.returncode == 0 else r.stderr).strip()


def _declared_code(root: Path, name: str) -> list[str] | None:
    """The code paths the writer of results file ``name`` declares now (a ``CODE``-style literal), or None."""
    import ast
    import warnings

    script, var = WRITERS.get(name, (f"bench/{name}.py", "CODE"))
    path = root / script
    if not path.exists():
        return None
    with warnings.catch_warnings():  # the script's own invalid escapes, if any, are not the check's subject
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == var for t in targets):
                try:
                    return [str(x) for x in ast.literal_eval(node.value)]
                except ValueError:
                    return None
    return None


def _changed(root: Path, commit: str, code: list[str]) -> list[str]:
    """Paths under ``code`` whose content in the checkout differs from ``commit``'s; "(uncommitted)" marks those that
    differ only in the working tree (untracked files included), not in HEAD."""
    _, vs_tree = _git(root, "diff", "--name-only", "--no-renames", commit, "--", *code)
    _, untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", *code)
    _, committed = _git(root, "diff", "--name-only", "--no-renames", commit, "HEAD", "--", *code)
    in_head = set(committed.splitlines())
    paths = {p for p in vs_tree.splitlines() + untracked.splitlines() if p}
    return sorted(p if p in in_head else f"{p} (uncommitted)" for p in paths)


def _changed_by_content(root: Path, content: dict[str, str | None]) -> list[str]:
    """Declared paths whose git object id in HEAD is not the one recorded (bench/common.py ``content_ids``), and
    paths under them that differ only in the working tree, marked "(uncommitted)"."""
    changed = []
    for path, recorded in sorted(content.items()):
        rc, now = _git(root, "rev-parse", "--verify", "-q", f"HEAD:{path}")
        if (now if rc == 0 and now else None) != recorded:
            changed.append(path)
    paths = list(content)
    _, vs_head = _git(root, "diff", "--name-only", "--no-renames", "HEAD", "--", *paths)
    _, untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", *paths)
    changed += sorted({f"{p} (uncommitted)" for p in vs_head.splitlines() + untracked.splitlines() if p})
    return changed


def _judge(root: Path, head: str, where: str, prov: dict) -> list[str]:
    """Why the results recorded under ``prov`` (a provenance, bench/common.py) do not back a figure of the code in
    ``root``; empty when they do."""
    commit, code = prov.get("commit"), prov.get("code") or []
    command = prov.get("command") or "its bench script"
    if not commit or not code:
        return [f"{where}: its provenance names no commit or no code paths: re-record it (`{command}`)"]
    if prov.get("dirty") is not False:
        what = ", ".join(prov.get("dirty_paths") or []) or "git could not tell"
        return [f"{where}: recorded with uncommitted changes to the code it measures ({what}): commit, then re-record "
                f"it (`{command}`)"]
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}")[0] != 0:
        content = prov.get("content")
        if not isinstance(content, dict) or sorted(content) != sorted(code):
            return [f"{where}: recorded at commit {commit[:12]}, which this clone does not have (history rewritten, "
                    f"or fetched only in part), and without the content ids of what it measured: cannot tell "
                    f"whether it is stale; re-record it (`{command}`)"]
        changed = _changed_by_content(root, content)
        if not changed:
            return []
        return [f"{where}: stale: the code it measures differs from what commit {commit[:12]} (not in this clone; "
                "compared by the content ids it recorded) held: " + ", ".join(changed[:8])
                + (f" … ({len(changed)} paths)" if len(changed) > 8 else "") + f"; re-record it (`{command}`)"]
    changed = _changed(root, commit, code)
    if not changed:
        return []
    ancestor = _git(root, "merge-base", "--is-ancestor", commit, head or "HEAD")[0] == 0
    return [f"{where}: stale: the code it measures changed since commit {commit[:12]}"
            + ("" if ancestor else " (not an ancestor of HEAD; compared by content)") + ": "
            + ", ".join(changed[:8]) + (f" … ({len(changed)} paths)" if len(changed) > 8 else "")
            + f"; re-record it (`{command}`)"]


def stale_results(root: Path = ROOT, results_dir: Path = RESULTS,
                  names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(failures, notes): one failure per results file behind a figure that cannot be trusted to measure the code
    in ``root`` — recorded with uncommitted changes, at a commit this clone lacks, without a provenance (unless
    listed in :data:`NOT_YET_RECORDED`), or whose measured paths changed since its commit; ``notes`` say, for the
    listed files, what changed since the commit their machine record names. Compares content (``git diff COMMIT``),
    so a recorded commit that is not an ancestor of HEAD (a rebased branch) is judged by what it measured."""
    names = figure_sources(results_dir) if names is None else names
    failures: list[str] = []
    notes: list[str] = []
    rc, out = _git(root, "rev-parse", "--is-shallow-repository")
    if rc != 0:
        return [f"{root}: not a git checkout ({out.splitlines()[0] if out else 'git failed'}): the staleness check "
                "compares each results file's recorded commit with the code here and needs the repository"], []
    if out == "true":
        return [f"{root}: a shallow clone: the staleness check compares each results file's recorded commit with the "
                "code here and needs the history; fetch it (`git fetch --unshallow`) and run the check again"], []
    _, head = _git(root, "rev-parse", "HEAD")
    recording = {n.strip() for n in os.environ.get(RECORDING_ENV, "").split(",") if n.strip()}
    for name in names:
        rel = f"bench/results/{name}.json"
        if name in recording:
            notes.append(f"{rel}: being re-recorded by the run under way ({RECORDING_ENV}); not judged here")
            continue
        data = json.loads((Path(results_dir) / f"{name}.json").read_text(encoding="utf-8"))
        prov = data.get("provenance")
        if prov is None:
            if name not in NOT_YET_RECORDED:
                failures.append(f"{rel}: no provenance (commit, dirty flag, code paths): re-record it with its bench "
                                "script (bench/common.py's write_json records them)")
                continue
            m = data.get("machine") or {}
            short = m.get("git_commit") or data.get("commit") or (data.get("git") or {}).get("commit")
            code = _declared_code(root, name)
            rc_c, commit = _git(root, "rev-parse", "--verify", "-q", f"{short}^{{commit}}") if short else (1, "")
            if not code or rc_c != 0:
                notes.append(f"{rel}: not re-recorded yet ({NOT_YET_RECORDED[name]}); its commit or code paths are "
                             "unknown")
                continue
            changed = _changed(root, commit, code)
            notes.append(f"{rel}: not re-recorded yet ({NOT_YET_RECORDED[name]}); "
                         + (f"since {short[:7]}, {len(changed)} measured path(s) changed: {', '.join(changed[:6])}"
                            + (" …" if len(changed) > 6 else "") if changed else
                            f"no measured path changed since {short[:7]}"))
            continue
        if name in NOT_YET_RECORDED:
            failures.append(f"{rel}: has a provenance now: take '{name}' off NOT_YET_RECORDED in bench/render.py")
        records = [(rel, prov)]
        for part in prov.get("parts") or []:  # parts measured at different times, each with its own provenance
            sub = (data.get(part) or {}).get("provenance") if isinstance(data.get(part), dict) else None
            if sub is None:
                failures.append(f"{rel}: part '{part}' has no provenance of its own: re-record it")
                continue
            records.append((f"{rel} (part '{part}')", sub))
        for where, p in records:
            failures += _judge(root, head, where, p)
    return failures, notes


def write_all(root: Path = ROOT, results_dir: Path = RESULTS) -> list[Path]:
    """Re-render every region of README.md and bench/RESULTS.md in place; returns the files changed."""
    rendered = []
    for rel in FILES:  # render both before writing either: a malformed file leaves both untouched
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new, records = render_text(text, results_dir, EXPECTED.get(rel, ()))
        problems = [r["problem"] for r in records if r["name"] is None]
        if problems:
            raise SystemExit(f"{rel}: " + "; ".join(problems))
        rendered.append((path, text, new))
    changed = []
    for path, text, new in rendered:
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 listing each region that differs")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout holding README.md and bench/RESULTS.md")
    args = ap.parse_args(argv)
    if args.check:
        messages = check(args.root, args.results, stale=False)
        failures, notes = stale_results(args.root, args.results)
        for m in messages + failures:
            print(m)
        for n in notes:
            print(f"note: {n}")
        if messages:
            print(f"{len(messages)} figure region(s) differ from {args.results}: run `python bench/render.py`.", file=sys.stderr)
        if failures:
            print(f"{len(failures)} results file(s) cannot back their figures: re-record them.", file=sys.stderr)
        if messages or failures:
            return 1
        print(f"every figure region of {', '.join(FILES)} matches {args.results}, and every results file behind them "
              "measured the code as it is here.")
        return 0
    changed = write_all(args.root, args.results)
    print("rewrote " + (", ".join(str(p.relative_to(args.root)) for p in changed) if changed else "nothing (already current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
