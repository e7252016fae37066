"""Benchmark: every bundled gold written back as a boxed answer in equivalent forms (issue 28, item 7).

Each of the 1,517 bundled golds (prl/data/benchmarks, loaded by prl.data.datasets) is turned into a
response that states the gold itself, written in one of several forms a model or a person writes
the same answer in, and verified against the gold through ``VerifierPool`` (2 workers, as bulk
verification runs). Every response is correct by construction, so every verdict other than
``correct`` is a false fail, ours or Math-Verify's, or a gold that cannot match except as written
(flagged by ``gold_flag``, recorded per gold).

A form applies only where it changes the gold's text (``spaces_removed`` on a gold without spaces
is not run) or where it stays the same answer (``x_prefix`` only on single answers); ``applicable``
counts the golds it was run on.

    python bench/verifier_forms.py [--limit N] [--workers 2]

Writes bench/results/verifier_forms.json (not with --limit): per form, how many golds pass and the
failing ids with their verdicts.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_json  # noqa: E402

from prl.data.datasets import BENCHMARKS, gold_flag, load_dataset  # noqa: E402
from prl.grading.verifier import VerifierPool  # noqa: E402

CODE = ("bench/verifier_forms.py", "prl/grading/verifier.py", "prl/data/datasets.py", "prl/data/benchmarks")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""


# ─── the forms: gold (and problem text) → the gold rewritten, or None where the form does not apply ──

def _top_level(s: str, chars: str) -> bool:
    depth = 0
    for ch in s:
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif ch in chars and depth == 0:
            return True
    return False


def _single(g: str) -> bool:
    """One answer (no list, equation, relation or set): what ``x = …`` can name."""
    return not (_top_level(g, ",;=<>") or "$" in g or re.search(r"\\(?:in|le|ge|leq|geq|neq|geqslant|leqslant|quad|cup)\b", g))


def _letters(g: str) -> str:
    """The letters of a gold outside commands and ``\\text{}``: its variables."""
    return "".join(re.findall(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", " ", _TEXT.sub(" ", g))))


def spaces_removed(g: str) -> str:
    """Every space removed, except one a command needs before a letter (``\\cdot x``) and those inside ``\\text{}``."""
    parts = re.split(r"(\\(?:text|mbox|mathrm)\s*\{[^{}]*\})", g)
    return "".join(p if i % 2 else re.sub(r"\s+", lambda m, p=p: _keep(p, m), p) for i, p in enumerate(parts))


def _keep(s: str, m: re.Match) -> str:
    return " " if re.search(r"\\[A-Za-z]+$", s[:m.start()]) and s[m.end():m.end() + 1].isalpha() else ""


def spaces_added(g: str) -> str:
    """A space around each binary operator and after each comma."""
    out = re.sub(r"\s*([+=<>]|(?<=[\w})\]])-)\s*", r" \1 ", g)
    out = re.sub(r",\s*", ", ", out)
    return re.sub(r" {2,}", " ", out).strip()


_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")


def text_removed(g: str) -> str:
    return _TEXT.sub(lambda m: m.group(1).strip(), g)


def text_added(g: str) -> str | None:
    """A word answer (``east``, ``Yes``) written ``\\text{east}``; units after a number written ``\\text{ cm}``."""
    if "\\" in g or "$" in g:
        return None
    if re.fullmatch(r"[A-Za-z][A-Za-z ]*", g.strip()):
        return f"\\text{{{g.strip()}}}"
    return None


def text_as_mathrm(g: str) -> str:
    return re.sub(r"\\(?:text|mbox)\s*\{", r"\\mathrm{", g)


def left_right_removed(g: str) -> str:
    return re.sub(r"\\(?:left|right)\s*(?:\.|(?=[\\(\[{)\]|]))", "", g)


def left_right_added(g: str) -> str | None:
    """``(``/``[`` and ``)``/``]`` as ``\\left(`` … ``\\right]`` where they pair up (intervals pair ( with ])."""
    if "\\left" in g:
        return None
    out, depth = [], 0
    for i, ch in enumerate(g):
        escaped = i > 0 and g[i - 1] == "\\"
        if ch in "([" and not escaped:
            depth += 1
            out.append("\\left" + ch)
        elif ch in ")]" and not escaped:
            depth -= 1
            if depth < 0:
                return None
            out.append("\\right" + ch)
        else:
            out.append(ch)
    return "".join(out) if depth == 0 else None


_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")


def degree_removed(g: str) -> str:
    return _DEGREE.sub("", g)


def degree_added(g: str, problem: str) -> str | None:
    """``^\\circ`` after a number answering a question in degrees."""
    if re.fullmatch(r"-?\d+(?:\.\d+)?", g.strip()) and re.search(r"degree|\\circ", problem):
        return g.strip() + "^\\circ"
    return None


def frac_swap(g: str) -> str:
    return re.sub(r"\\(d?)frac", lambda m: "\\frac" if m.group(1) else "\\dfrac", g)


def mathrm_e(g: str) -> str:
    """Euler's number written ``\\mathrm{e}`` (``e^{t}`` → ``\\mathrm{e}^{t}``)."""
    return re.sub(r"(?<![A-Za-z\\])e(?=\s*\^)", r"\\mathrm{e}", g)


FORMS: dict[str, Callable[[str, str], str | None]] = {
    "verbatim": lambda g, p: f"The final answer is $\\boxed{{{g}}}$.",
    "answer_tag": lambda g, p: f"Done. <answer>{g}</answer>",
    "unboxed_dollars": lambda g, p: None if "$" in g else f"The final answer is ${g}$.",
    "x_prefix": lambda g, p: f"\\boxed{{x = {g}}}" if _single(g) and "x" not in _letters(g) else None,
    "definition": lambda g, p: f"\\boxed{{f(1) = {g}}}" if _single(g) and not _letters(g) else None,
    "spaces_removed": lambda g, p: f"\\boxed{{{spaces_removed(g)}}}",
    "spaces_added": lambda g, p: f"\\boxed{{{spaces_added(g)}}}",
    "text_removed": lambda g, p: f"\\boxed{{{text_removed(g)}}}",
    "text_added": lambda g, p: (lambda t: None if t is None else f"\\boxed{{{t}}}")(text_added(g)),
    "text_as_mathrm": lambda g, p: f"\\boxed{{{text_as_mathrm(g)}}}",
    "left_right_removed": lambda g, p: f"\\boxed{{{left_right_removed(g)}}}",
    "left_right_added": lambda g, p: (lambda t: None if t is None else f"\\boxed{{{t}}}")(left_right_added(g)),
    "degree_removed": lambda g, p: f"\\boxed{{{degree_removed(g)}}}",
    "degree_added": lambda g, p: (lambda t: None if t is None else f"\\boxed{{{t}}}")(degree_added(g, p)),
    "frac_swap": lambda g, p: f"\\boxed{{{frac_swap(g)}}}",
    "mathrm_e": lambda g, p: f"\\boxed{{{mathrm_e(g)}}}",
}
"""Each form's response for a gold; a form whose rewrite leaves the gold unchanged is not run (``verbatim``,
``answer_tag``, ``unboxed_dollars``, ``x_prefix`` and ``definition`` always change the response)."""

ALWAYS = ("verbatim", "answer_tag", "unboxed_dollars", "x_prefix", "definition")


def responses(gold: str, problem: str) -> dict[str, str]:
    out = {}
    for name, form in FORMS.items():
        r = form(gold, problem)
        if r is None:
            continue
        if name not in ALWAYS and r == f"\\boxed{{{gold}}}":
            continue  # the form does not change this gold
        out[name] = r
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="problems per benchmark (default: all 1,517)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    items: list[tuple[str, str, str, str]] = []  # (id, form, response, gold)
    flags: dict[str, str] = {}
    golds: dict[str, str] = {}
    for name in BENCHMARKS:
        problems, _ = load_dataset(name, flag_raw_only=False)
        for p in problems[: args.limit]:
            pid = f"{name}/{p.problem_id}"
            golds[pid] = p.gold_normalized
            flag = gold_flag(p.gold_normalized)
            if flag:
                flags[pid] = flag
            for form, response in responses(p.gold_normalized, p.problem).items():
                items.append((pid, form, response, p.gold_normalized))
    print(f"verifying {len(items)} responses ({len(golds)} golds, {len(FORMS)} forms)")
    t0 = time.perf_counter()
    with VerifierPool(args.workers) as pool:
        verdicts = pool.verify([(r, g) for _, _, r, g in items])
    wall_s = time.perf_counter() - t0
    forms: dict[str, dict] = {}
    for (pid, form, response, gold), v in zip(items, verdicts):
        f = forms.setdefault(form, {"applicable": 0, "passed": 0, "failing_ids": [], "failing_verdicts": Counter(),
                                    "failing_unflagged": []})
        f["applicable"] += 1
        if v.verdict == "correct":
            f["passed"] += 1
        else:
            f["failing_ids"].append(pid)
            f["failing_verdicts"][v.verdict] += 1
            if pid not in flags:
                f["failing_unflagged"].append({"id": pid, "gold": gold, "response": response, "verdict": v.verdict,
                                               "detail": v.detail[:160]})
    for name, f in forms.items():
        f["failing_verdicts"] = dict(f["failing_verdicts"])
        print(f"  {name:20s} {f['passed']:5d}/{f['applicable']:<5d} failing {len(f['failing_ids'])} "
              f"({len(f['failing_unflagged'])} with an unflagged gold)")
    results = {
        "machine": machine_info(), "golds": len(golds), "responses": len(items), "workers": args.workers,
        "wall_s": round(wall_s, 1),
        "forms": {name: forms[name] for name in FORMS if name in forms},
        "flagged_golds": flags,
    }
    if args.limit is None:
        print(f"wrote {write_json('verifier_forms', results, code=CODE)}")
    return results


if __name__ == "__main__":
    main()
