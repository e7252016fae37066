"""Problem relevance of a response: the signal behind "suspicious passes" (paper, Appendix C).

A verifier checks only the final answer. Appendix C shows responses that pass while their
reasoning is about a different problem, and responses that give nothing but an answer. Two
measurable per-sample signals keep that apart from correctness:

``relevance`` — content-term recall of the problem in the reasoning:

    relevance = |terms(problem) ∩ terms(reasoning)| / |terms(problem)|

* ``reasoning`` is the response without its final ``\\boxed{…}`` (the answer itself must not
  count as referring to the problem).
* ``terms(text)``: numbers (``27``, ``27.0`` and ``027`` are the same term) and lower-cased
  words of three or more letters that are not English function words; LaTeX command names
  (``\\frac``) and single-letter variables are ignored (too generic to show relevance).
* ``None`` when the problem has no content terms. Range [0, 1]: 1 = every number and content
  word of the problem reappears in the reasoning.

``answer_only`` — the reasoning has fewer than :data:`ANSWER_ONLY_MAX_WORDS` word tokens
(e.g. "The answer is \\boxed{5}").

``best_fit`` — the problem of the same benchmark the reasoning fits best: the one asked, unless
another fits it clearly better (None where no benchmark index was at hand). The Appendix-C case, where the reasoning solves another problem and ends on
a number that happens to be this one's gold. Each problem of the benchmark is scored by how
much of it the reasoning restates:

    fit(problem, reasoning) = Σ idf(g) over the problem's token n-grams g found in the reasoning
                              / (Σ idf(g) over the problem's n-grams) ** FIT_NORM

with tokens = LaTeX commands, words, numbers and symbols, n-grams of 1..:data:`FIT_NGRAM`
tokens, idf over the benchmark's problems. The reasoning fits another problem better when that
problem's fit exceeds the asked one's by more than a factor 1 + :data:`FIT_MARGIN`. Problems
that share one context (OlympiadBench's multi-part problems) never count against each other: a
tie between them is not evidence of a swap.

A sample is a *suspicious pass* when its verdict is ``correct`` and it is answer-only, or its
reasoning fits another problem better (``best_fit`` is not the asked problem), or — only where
``best_fit`` was not computed (stores written before it existed) — its relevance is below
:data:`SUSPICIOUS_BELOW` (the store's ``suspicious_passes`` view). The relevance threshold is
not applied where the fit is known: on the held-out halves it added false flags (2.4% of
MATH-500's own solutions) and almost no swapped case the fit missed. Calibrated by ``python bench/relevance.py`` on the benchmarks' own
reference solutions and on swapped cases (each problem given the reference solution of another
problem with the same gold answer), tuned on one half of the pairs and reported on the other
(figures in bench/RESULTS.md). It is a screen for reading, not a verdict: a terse but correct
derivation can score low, and a response can quote the problem and still reason wrongly.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from functools import lru_cache
from typing import Sequence

from prl.data.datasets import DATASETS, Problem, last_boxed, load_dataset

SUSPICIOUS_BELOW = 0.15
"""Relevance below which a correct sample is listed as a suspicious pass (also in sql/schema.sql)."""

ANSWER_ONLY_MAX_WORDS = 6
"""A reasoning part with fewer word tokens than this is "answer only"."""

_STOPWORDS = frozenset("""
the and for are but not you all any can had her was one our out has him his how its may new now
old see two way who did get let put say she too use that with have this will your from they been
than them then were what when which while would there their these those into such only also each
some more most other over same very just find what where does many much both like make made given
let's lets think step output final answer within boxed value number numbers following compute
determine calculate show prove suppose assume express simplest form
""".split())

_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_WORD = re.compile(r"[A-Za-z]{3,}")
_WORD_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _norm_number(s: str) -> str:
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s.lstrip("0") or "0"


def terms(text: str) -> set[str]:
    """The content terms of ``text`` (see the module docstring)."""
    text = _LATEX_CMD.sub(" ", text)
    nums = {_norm_number(m) for m in _NUMBER.findall(text)}
    words = {w.lower() for w in _WORD.findall(text)} - _STOPWORDS
    return nums | words


def reasoning_part(response: str) -> str:
    """The response without its last ``\\boxed{…}``."""
    boxed = last_boxed(response)
    if boxed is None:
        return response
    cut = response.rfind(boxed)
    start = response.rfind("\\", 0, cut)
    return response[:start] + response[cut + len(boxed) + 1:] if start >= 0 else response


def relevance(problem: str, response: str) -> float | None:
    """Share of the problem's content terms that the reasoning uses, in [0, 1]; None if it has none."""
    wanted = terms(problem)
    if not wanted:
        return None
    return len(wanted & terms(reasoning_part(response))) / len(wanted)


def answer_only(response: str) -> bool:
    """Whether the response is (almost) nothing but its final answer."""
    return len(_WORD_TOKEN.findall(_LATEX_CMD.sub(" ", reasoning_part(response)))) < ANSWER_ONLY_MAX_WORDS


def is_suspicious_pass(verdict: str, rel: float | None, only_answer: bool, best_fit: str | None = None,
                       problem_id: str | None = None) -> bool:
    """The rule of the store's ``suspicious_passes`` view, for code that has not stored the sample.

    ``best_fit``: the problem the reasoning fits best (:meth:`FitIndex.best_fit`), None if not computed;
    ``problem_id``: the problem asked.
    """
    if verdict != "correct":
        return False
    if best_fit is not None:
        return only_answer or best_fit != problem_id
    return only_answer or (rel is not None and rel < SUSPICIOUS_BELOW)


# ─── fits another problem better ────────────────────────────────────────────────────────────

FIT_NGRAM = 3
"""Longest token n-gram compared between a problem and a reasoning."""

FIT_NORM = 0.7
"""Exponent of a problem's own n-gram mass in the fit's denominator (0: raw overlap, 1: recall)."""

FIT_MARGIN = 2.0
"""Another problem must fit more than (1 + this) times better than the asked one to be flagged."""

_FIT_TOKEN = re.compile(r"\\[a-z]+|[a-z]+|\d+(?:\.\d+)?|[^\s\w{}$]")


def fit_grams(text: str) -> set[str]:
    """Token n-grams (1..FIT_NGRAM) of lower-cased ``text``: LaTeX commands, words, numbers, symbols."""
    toks = _FIT_TOKEN.findall(text.lower())
    return {" ".join(toks[k:k + n]) for n in range(1, FIT_NGRAM + 1) for k in range(len(toks) - n + 1)}


class FitIndex:
    """The problems of one benchmark, for asking which of them a reasoning fits best."""

    def __init__(self, problems: Sequence[Problem]):
        self.ids = [p.problem_id for p in problems]
        self._pos = {pid: i for i, pid in enumerate(self.ids)}
        self._context = [p.meta.get("context") if isinstance(p.meta, dict) else None for p in problems]
        grams = [fit_grams(p.problem) for p in problems]
        df: dict[str, int] = defaultdict(int)
        for g in grams:
            for x in g:
                df[x] += 1
        n = len(problems)
        self._idf = {x: math.log((n + 1) / (c + 0.5)) for x, c in df.items()}
        self._norm = [max(sum(self._idf[x] for x in g), 1e-9) ** FIT_NORM for g in grams]
        self._posting: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(grams):
            for x in g:
                self._posting[x].append(i)

    def fits(self, response: str) -> dict[str, float]:
        """{problem id: fit} of the response's reasoning, for the problems it shares any n-gram with."""
        acc: dict[int, float] = defaultdict(float)
        for x in fit_grams(reasoning_part(response)):
            w = self._idf.get(x)
            if w is not None:
                for i in self._posting[x]:
                    acc[i] += w
        return {self.ids[i]: v / self._norm[i] for i, v in acc.items()}

    def best_fit(self, problem_id: str, response: str, margin: float = FIT_MARGIN) -> str | None:
        """The problem the reasoning fits best: another one if it fits more than (1 + FIT_MARGIN) times better
        than ``problem_id``, else ``problem_id`` itself; None if ``problem_id`` is not in the index."""
        asked = self._pos.get(problem_id)
        if asked is None:
            return None
        scores = self.fits(response)
        own = scores.get(problem_id, 0.0)
        context = self._context[asked]
        best_id, best = None, 0.0
        for pid, v in scores.items():
            j = self._pos[pid]
            if j == asked or (context is not None and self._context[j] == context):
                continue
            if v > best:
                best_id, best = pid, v
        return best_id if best > own * (1.0 + margin) else problem_id


_USER_INDEXES: dict[str, FitIndex] = {}


def register_fit_index(dataset: str, problems: Sequence[Problem]) -> None:
    """Index a user data set's problems under its name (the loader of a user file calls this)."""
    _USER_INDEXES[dataset] = FitIndex(problems)


@lru_cache(maxsize=8)
def _bundled_index(dataset: str) -> FitIndex:
    problems, _ = load_dataset(dataset)
    return FitIndex(problems)


def fit_index(dataset: str) -> FitIndex | None:
    """The :class:`FitIndex` of a bundled benchmark, the synthetic set or a registered user data set, else None."""
    if dataset in DATASETS:
        return _bundled_index(dataset)
    return _USER_INDEXES.get(dataset)


def best_fit(problem: Problem, response: str, index: FitIndex | None = None) -> str | None:
    """:meth:`FitIndex.best_fit` for a problem of a known benchmark (``index`` for any other)."""
    index = index if index is not None else fit_index(problem.dataset)
    return index.best_fit(problem.problem_id, response) if index is not None else None


def graded_fields(problem: Problem, response: str, verdict, index: FitIndex | None = None) -> dict:
    """The store columns a verified response gets, whoever made it (an evaluation, an import, a rescore):
    the verdict's fields, ``relevance``, ``answer_only`` and, for correct samples, ``best_fit``.
    ``verdict``: a :class:`prl.grading.verifier.Verdict`; ``index``: the data set's fit index where it is
    not a known benchmark's (see :func:`best_fit`)."""
    return {"extracted_answer": verdict.extracted, "verdict": verdict.verdict, "score": verdict.score,
            "verify_ms": round(verdict.ms, 3), "verdict_detail": verdict.detail or None,
            "relevance": relevance(problem.problem, response), "answer_only": answer_only(response),
            "best_fit": best_fit(problem, response, index) if verdict.verdict == "correct" else None}
