"""Problem: one problem with its gold (normalised, and the raw answer field) and every sample of the
selected runs: verdict, extracted answer, length, finish reason, and for an imported sample the
source's own label and extraction; problems, golds, answers and responses with their math typeset
(``dashboard.math_text``; never HTML), long text folded. Deep links: ``?dataset=…&problem_id=…&runs=a,b``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402
import streamlit as st  # noqa: E402

from dashboard import math_text, ui  # noqa: E402


st.title("Problem")


def _known(value) -> bool:
    return not pd.isna(value)  # neither None nor NaN nor NA


def _short(text, limit: int = 40) -> str:
    text = " ".join(str(text).split())
    return ui.label_text(text if len(text) <= limit else text[:limit - 1] + "…")


def sample_title(r) -> str:
    """The expander title of one sample: ours, then the source's own label and answer where it was imported;
    length and finish reason only where stored. Untrusted parts escaped (titles are Markdown), long answers cut
    (they are shown whole, typeset, inside)."""
    answer = "—" if not _known(r.extracted_answer) else _short(r.extracted_answer)
    parts = [ui.label_text(r.run_id), f"sample {r.sample_idx}", f"ours: {r.verdict}, answer {answer}"]
    if _known(r.source_label):
        theirs = "correct" if r.source_label > 0.5 else "wrong"
        src_answer = f", answer {_short(r.source_answer)}" if _known(r.source_answer) else ""
        parts.append(f"source: {theirs} ({r.source_label:g}){src_answer}")
    elif _known(r.source_answer):
        parts.append(f"source's answer {_short(r.source_answer)}")
    if _known(r.n_tokens):
        parts.append(f"{int(r.n_tokens)} tokens")
    if _known(r.finish_reason):
        parts.append(ui.label_text(r.finish_reason))
    return " · ".join(parts)


def body() -> None:
    target = st.session_state.pop("problem_target", None)
    q = st.query_params  # deep links: ?dataset=…&problem_id=…&runs=a,b
    if target is None and "problem_id" in q:
        target = (q.get("dataset", ""), q["problem_id"], ui.deep_link_runs())
    ui.math_toggle()
    run_ids = ui.pick_eval_runs(key="problem_runs", preselect=target[2] if target and target[2] else None)
    if not run_ids:
        return
    choices = ui.problem_choices(ui.db(), run_ids)
    if choices.empty:
        st.info("The selected runs have no samples.")
        return
    datasets = sorted(choices["dataset"].unique())
    d_index = datasets.index(target[0]) if target and target[0] in datasets else 0
    dataset = st.selectbox("data set", datasets, index=d_index, key=ui.key("problem", "dataset"))
    ids = choices[choices["dataset"] == dataset]["problem_id"].tolist()
    p_index = ids.index(target[1]) if target and target[1] in ids else 0
    problem_id = st.selectbox("problem", ids, index=p_index, key=ui.key("problem", "problem_id", dataset))
    info, samples = ui.problem(ui.db(), dataset, problem_id, run_ids)
    if info is None:
        st.warning(f"{ui.label_text(problem_id)} is not in the problems table (samples only).")
    else:
        shown = ("problem", "info", dataset, problem_id)
        ui.show_text("problem", info["problem"], key=ui.key(*shown, "text"))
        c1, c2 = st.columns(2)
        with c1:
            ui.show_answer("gold (normalised, what the verifier compares with)", info["gold_normalized"],
                           key=ui.key(*shown, "gold"))
        with c2:
            ui.show_answer("gold (the data set's answer field)", math_text.decode_gold(info["gold_raw"]),
                           key=ui.key(*shown, "gold_raw"))
        if info["meta"].get("gold_raw_only"):
            st.warning(f"This gold is flagged '{info['meta'].get('gold_flag', 'raw_only')}': Math-Verify does not "
                       "read it whole, so correct answers written differently can be scored wrong.")
    if samples.empty:
        st.info("No samples of this problem in the selected runs.")
        return
    st.subheader(f"{len(samples)} samples")
    table = samples.drop(columns=["response"])
    table = table.drop(columns=[c for c in ("source_label", "source_answer", "source_ref", "n_tokens", "finish_reason",
                                            "verdict_detail", "relevance", "answer_only") if table[c].isna().all()])
    st.dataframe(table, hide_index=True, width="stretch", key=ui.key("problem", "samples", dataset, problem_id, run_ids))
    for i, r in enumerate(samples.itertuples(index=False)):
        sample = ("problem", "sample", r.run_id, dataset, problem_id, r.sample_idx)
        with st.expander(sample_title(r), expanded=i == 0, key=ui.key(*sample)):
            a1, a2 = st.columns(2)
            with a1:
                ui.show_answer(f"our answer — {r.verdict}", r.extracted_answer if _known(r.extracted_answer) else None,
                               key=ui.key(*sample, "answer"))
                if _known(r.verdict_detail):
                    st.caption(f"why: {ui.label_text(r.verdict_detail)}")
            if _known(r.source_label) or _known(r.source_answer):
                with a2:
                    verdict = (f"{'correct' if r.source_label > 0.5 else 'wrong'} (its label {r.source_label:g})"
                               if _known(r.source_label) else "no label")
                    if _known(r.source_answer):
                        ui.show_answer(f"the source's answer — {verdict}", r.source_answer,
                                       key=ui.key(*sample, "source"))
                    else:
                        st.caption(f"the source — {verdict}; it wrote no extracted answer of its own")
            ui.show_text("response", r.response, key=ui.key(*sample, "response"))
            if _known(r.source_ref):
                st.caption(f"from {ui.label_text(r.source_ref)}")


ui.guard(body)
