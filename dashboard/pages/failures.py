"""Failures: samples by verdict category with counts per run and data set, and the suspicious
passes (correct answer, reasoning that hardly refers to the problem) ranked by relevance."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402
from prl.grading.relevance import SUSPICIOUS_BELOW  # noqa: E402
from prl.grading.verifier import VERDICTS  # noqa: E402


st.title("Failures")

CATEGORIES = [v for v in VERDICTS if v != "correct"]


def read_one(rows, pick_key: str, text_key: str, *key_parts) -> None:
    """A row of ``rows`` picked by problem and sample, its response shown below (as text, never HTML)."""
    pick = st.selectbox("read one", range(len(rows)), index=None, placeholder="row",
                        key=ui.key("failures", pick_key, *key_parts),
                        format_func=lambda i: f"{rows.iloc[i]['problem_id']} sample {rows.iloc[i]['sample_idx']}")
    if pick is not None:
        r = rows.iloc[pick]
        ui.show_text("response", r["response"],
                     key=ui.key("failures", text_key, r["run_id"], r["dataset"], r["problem_id"], r["sample_idx"]))


def body() -> None:
    ui.math_toggle()
    run_ids = ui.pick_eval_runs(key="failure_runs")
    if not run_ids:
        return
    counts = ui.verdict_counts(ui.db(), run_ids)
    if counts.empty:
        st.info("The selected runs have no samples.")
        return
    st.plotly_chart(charts.verdict_bars(counts), width="stretch", key=ui.key("failures", "verdicts", run_ids))
    st.dataframe(counts.pivot_table(index=["run_id", "dataset"], columns="verdict", values="samples",
                                    fill_value=0), width="stretch", key=ui.key("failures", "verdict_table", run_ids))
    st.subheader("Suspicious passes")
    st.caption("Correct verdict, but the reasoning uses few of the problem's numbers and words (relevance < "
               f"{SUSPICIOUS_BELOW}) "
               "or the response is only an answer — the paper's Appendix-C case. Least relevant first.")
    sus = ui.suspicious_passes(ui.db(), run_ids)
    if sus.empty:
        st.success("None: every correct sample refers to its problem.")
    else:
        st.dataframe(sus.drop(columns=["response"]), hide_index=True, width="stretch",
                     key=ui.key("failures", "suspicious", run_ids))
        read_one(sus, "suspicious_pick", "suspicious_response", run_ids)
    st.subheader("Samples by category")
    verdict = st.radio("verdict", CATEGORIES, horizontal=True, key=ui.key("failures", "verdict"))
    rows = ui.samples_by_verdict(ui.db(), run_ids, verdict)
    if rows.empty:
        st.info(f"No '{verdict}' samples in the selected runs.")
        return
    st.dataframe(rows.drop(columns=["response"]), hide_index=True, width="stretch",
                 key=ui.key("failures", "samples", run_ids, verdict))
    read_one(rows, "sample_pick", "sample_response", run_ids, verdict)


ui.guard(body)
