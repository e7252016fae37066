"""Shared page helpers: the store path, cached data calls, run pickers, friendly empty states, and
element keys.

Every Streamlit element that takes a ``key`` gets one from :func:`key`, built from what the element
shows (page, part, run ids, step, rollout index, …), never from its content: Streamlit derives the
id of an unkeyed element from its arguments, so two elements with the same content (two identical
rollouts of a model that repeats itself) would collide with ``StreamlitDuplicateElementId``."""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import quote

import streamlit as st

from dashboard import data
from prl.store.db import StoreError

@st.cache_data(show_spinner=False, max_entries=512)
def _cached_call(name: str, version: tuple, args: tuple, kwargs: dict) -> Any:
    """``dashboard.data.<name>(*args, **kwargs)``, computed once per store content ``version``."""
    return getattr(data, name)(*args, **kwargs)


def cached(fn: Callable) -> Callable:
    """``fn`` (a function of :mod:`dashboard.data` whose first argument is the store path, or that takes none)
    cached on the store's content version (:func:`dashboard.data.store_version`): a page load recomputes an
    aggregate (the bootstrap CIs among them) only after something was written to the store since, and a refresh
    shows what a running flow wrote."""
    def call(*args: Any, **kwargs: Any) -> Any:
        db = args[0] if args else kwargs.get("db")
        version = data.store_version(db) if db is not None else ()
        return _cached_call(fn.__name__, version, args, kwargs)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


runs = cached(data.runs)
run_manifest = cached(data.run_manifest)
paper_rows = cached(data.paper_rows)
scores = cached(data.scores)
pass_at_k_curve = cached(data.pass_at_k_curve)
compare = cached(data.compare)
problem_choices = cached(data.problem_choices)
problem = cached(data.problem)
verdict_counts = cached(data.verdict_counts)
samples_by_verdict = cached(data.samples_by_verdict)
suspicious_passes = cached(data.suspicious_passes)
suspicious_case = cached(data.suspicious_case)
train_metrics = cached(data.train_metrics)
eval_points = cached(data.eval_points)
rollout_steps = cached(data.rollout_steps)
rollouts = cached(data.rollouts)
agreement = cached(data.agreement)
studies = cached(data.studies)
study = cached(data.study)


def db() -> str:
    return data.db_path()


def key(*parts: Any) -> str:
    """A stable element key from what the element shows: ``key("training", "segments", run_id, step, idx)``
    → ``"training/segments/<run_id>/<step>/<idx>"``. A list or tuple part (several run ids) is joined
    with commas; every value is percent-escaped, so run ids holding "/" or "," cannot make two different
    elements' keys equal."""
    def one(p: Any) -> str:
        if isinstance(p, (list, tuple)):
            return ",".join(quote(str(x), safe="") for x in p)
        return quote(str(p), safe="")

    return "/".join(one(p) for p in parts)


def guard(fn: Callable[[], Any]) -> None:
    """Run a page body; a missing or busy store becomes a message, not a traceback."""
    try:
        fn()
    except StoreError as e:
        st.info(str(e))


def all_runs():
    """The runs table, or None (with a message) when the store has none."""
    df = runs(db())
    if df.empty:
        st.info(f"The store {db()} has no runs yet. Run `prl eval --db {db()} …`, `prl train …` or `prl demo`.")
        return None
    return df


def runs_with_samples(df):
    """The rows of the runs table that hold samples: evaluations, imports and rescores (not training runs)."""
    return df[(df["kind"] != "train") & (df["samples"] > 0)]


def pick_eval_runs(label: str = "runs", *, key: str, max_default: int = 3) -> list[str]:
    df = all_runs()
    if df is None:
        return []
    choices = runs_with_samples(df)["run_id"].tolist()
    if not choices:
        st.info("No evaluation run has samples yet.")
        return []
    return st.multiselect(label, choices, default=choices[-max_default:], key=key)


def show_text(label: str, text: str, *, key: str, fold_over: int = 1200) -> None:
    """Untrusted text (model output, data sets) as plain text; long text folded. ``key`` names what
    is shown (e.g. ``key("problem", "sample", run_id, problem_id, idx)``): two identical texts on a
    page get distinct elements."""
    if text is None:
        st.caption(f"{label}: —")
        return
    if len(text) > fold_over:
        st.caption(f"{label} ({len(text):,} characters)")
        st.text(text[:fold_over] + " …")
        with st.expander("show all", key=f"{key}/show_all"):
            st.text(text)
    else:
        st.caption(label)
        st.text(text)


def show_answer(label: str, text: str | None, *, key: str) -> None:
    """A gold or an extracted answer (untrusted, usually bare LaTeX such as ``\\frac{1}{16}``), shown as text.
    The name the pages call for answers; math typesetting (issue 29, item 3) fills it in."""
    show_text(label, text, key=key)
