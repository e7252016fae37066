"""Runs: every run with model, estimator, η, split, step, sampling and status; manifests on demand;
the paper's reference rows beside them, marked as reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402


st.title("Runs")


def body() -> None:
    df = ui.all_runs()
    if df is not None:
        st.caption(f"{len(df)} runs in {ui.db()} ({(df['kind'] == 'eval').sum()} evaluations, "
                   f"{(df['kind'] == 'train').sum()} training runs)")
        st.dataframe(df, hide_index=True, width="stretch", key=ui.key("runs", "table"),
                     column_config={"average": st.column_config.NumberColumn("average score", format="%.3f")})
        run_id = st.selectbox("reproducibility manifest of", df["run_id"].tolist(), index=None,
                              placeholder="choose a run", key=ui.key("runs", "manifest_of"))
        if run_id:
            st.json(ui.run_manifest(ui.db(), run_id), expanded=1)
    st.subheader("Reference: the paper's Tables 1 and 3")
    st.caption("Published numbers, not runs of this store. '5 Avg' is recomputed as the size-weighted mean of the "
               "five columns (500/272/675/40/30); the one row whose reported value does not match is flagged.")
    st.dataframe(ui.paper_rows(), hide_index=True, width="stretch", key=ui.key("runs", "paper_rows"))


ui.guard(body)
