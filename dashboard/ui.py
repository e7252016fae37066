"""Shared page helpers: the store path, cached data calls, run pickers, friendly empty states, and
element keys.

Every Streamlit element that takes a ``key`` gets one from :func:`key`, built from what the element
shows (page, part, run ids, step, rollout index, …), never from its content: Streamlit derives the
id of an unkeyed element from its arguments, so two elements with the same content (two identical
rollouts of a model that repeats itself) would collide with ``StreamlitDuplicateElementId``."""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import quote

import pandas as pd
import streamlit as st

from dashboard import data, math_text
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
sample_counts = cached(data.sample_counts)
compare = cached(data.compare)
problem_choices = cached(data.problem_choices)
problem = cached(data.problem)
verdict_counts = cached(data.verdict_counts)
samples_by_verdict = cached(data.samples_by_verdict)
suspicious_passes = cached(data.suspicious_passes)
suspicious_case = cached(data.suspicious_case)
train_metrics = cached(data.train_metrics)
eval_points = cached(data.eval_points)
train_alerts = cached(data.train_alerts)
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


def _through_the_app() -> None:
    """A page must run inside ``app.py`` (its ``st.navigation``, its ``--db``). Streamlit treats the folder
    ``dashboard/pages`` as a pages directory of its older multipage scheme until ``st.navigation`` has run once;
    when the first request a fresh server gets is a deep link (``/problem?…``), it runs that page file alone,
    without ``app.py``, and keeps doing so. Leave that scheme and rerun: the rerun goes through ``app.py``,
    which routes to the same page with the same query."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def guard(fn: Callable[[], Any]) -> None:
    """Run a page body (inside ``app.py``); a missing or busy store becomes a message, not a traceback."""
    _through_the_app()
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
    """The rows of the runs table that hold samples: every kind but training runs (evaluations, evaluations
    during training, imports, rescores), each a run like any other on every page."""
    return df[(df["kind"] != data.TRAIN) & (df["samples"] > 0)]


def run_labels(df) -> dict[str, str]:
    """``run_id → "run_id · kind"`` for the run pickers (what a run is, beside its id)."""
    return {r.run_id: f"{r.run_id} · {r.kind}" for r in df.itertuples(index=False)}


def describe_run(df, run_id: str) -> str:
    """One line on what a run is: kind, data sets, samples per problem, source and lineage (escaped for Markdown)."""
    r = df.set_index("run_id").loc[run_id]
    parts = [str(r["kind"])]
    for name, fmt in (("datasets", "{}"), ("n", "n = {}"), ("source", "{}"), ("lineage", "{}")):
        v = r[name]
        if not pd.isna(v):
            parts.append(fmt.format(v))
    return label_text(" · ".join(parts))


def deep_link_runs() -> list[str]:
    """The runs a deep link names (``?runs=a,b``)."""
    return [r for r in st.query_params.get("runs", "").split(",") if r]


def pick_eval_runs(label: str = "runs", *, key: str, max_default: int = 3, preselect: list[str] | None = None
                   ) -> list[str]:
    """A multiselect of the runs with samples. ``preselect`` (a deep link's or another page's runs), or else the
    runs of a ``?runs=`` deep link, are the ones selected in the box; by default the last ``max_default``."""
    df = all_runs()
    if df is None:
        return []
    with_samples = runs_with_samples(df)
    choices = with_samples["run_id"].tolist()
    if not choices:
        st.info("No run has samples yet: evaluate (`prl eval`) or import another tool's file (`prl import`).")
        return []
    wanted = [r for r in (preselect or deep_link_runs()) if r in choices]
    if wanted and (preselect or st.session_state.get(f"{key}/linked") != wanted):
        st.session_state[key] = wanted  # a link's runs win over what the box held before, once
        st.session_state[f"{key}/linked"] = wanted
    elif key not in st.session_state:
        st.session_state[key] = choices[-max_default:]
    else:  # runs that are gone from the store are dropped, not an error
        st.session_state[key] = [r for r in st.session_state[key] if r in choices]
    labels = run_labels(with_samples)
    return st.multiselect(label, choices, key=key, format_func=lambda r: labels.get(r, r))


TYPESET = "typeset_math"
"""Session-state key of the sidebar toggle "typeset math" (:func:`math_toggle`); on unless switched off."""


def math_toggle() -> bool:
    """The sidebar toggle between typeset math and the raw text (shown on the pages that show text)."""
    return st.sidebar.toggle("typeset math", value=st.session_state.get(TYPESET, True), key=TYPESET,
                             help="Off: problems, golds, answers and responses exactly as stored, as plain text.")


def typeset() -> bool:
    return bool(st.session_state.get(TYPESET, True))


def label_text(text) -> str:
    """Untrusted text (a model's answer, a file's reference) inside a label, caption or expander title, all of which
    Streamlit reads as Markdown: escaped, so that it shows as written."""
    return math_text.escape_text(str(text)).replace("\\\n", " ")


def show_text(label: str, text: str | None, *, key: str, fold_over: int = 1200) -> None:
    """Untrusted prose (a problem, a response, a solution) with its math typeset (``dashboard.math_text``: per
    fragment, what KaTeX cannot take shown as written; never HTML), or as plain text when the sidebar toggle is
    off; long text folded. ``label`` is ours (Markdown allowed). ``key`` names what is shown (e.g.
    ``key("problem", "sample", run_id, problem_id, idx)``): two identical texts on a page get distinct elements."""
    if text is None or pd.isna(text):
        st.caption(f"{label}: —")
        return
    text = str(text)
    head = math_text.fold(text, fold_over)
    st.caption(label if head is None else f"{label} ({len(text):,} characters)")
    render = (lambda t: st.markdown(math_text.to_markdown(t))) if typeset() else st.text
    if head is None:
        render(text)
        return
    render(head + " …")
    with st.expander("show all", key=f"{key}/show_all"):
        render(text)


def show_answer(label: str, text: str | None, *, key: str) -> None:
    """A gold or an extracted answer: typeset whole where KaTeX takes it and it reads as a formula
    (``dashboard.math_text.answer_markdown``), else as prose; plain text when the toggle is off."""
    if text is None or pd.isna(text):
        st.caption(f"{label}: —")
        return
    if len(str(text)) > 300:  # a whole solution: prose, folded
        show_text(label, text, key=key)
        return
    st.caption(label)
    if typeset():
        st.markdown(math_text.answer_markdown(text))
    else:
        st.text(str(text))
