"""Runs: every run, each kind alike (evaluations, evaluations made during training, imports, rescores,
training runs), with its data sets, problems, samples per problem, source (the files and tool of an
import, the model of an evaluation) and lineage (the training run and step of an evaluation made during
training, with a link to it on the Training page; the run a rescore re-verified); manifests on demand;
the paper's reference rows beside them, marked as reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402
import streamlit as st  # noqa: E402

from dashboard import data, ui  # noqa: E402


st.title("Runs")


def body() -> None:
    df = ui.all_runs()
    if df is not None:
        st.caption(f"{data.kind_counts(df)} in {ui.label_text(ui.db())}")
        st.dataframe(df, hide_index=True, width="stretch", key=ui.key("runs", "table"), column_config={
            "average": st.column_config.NumberColumn("average score", format="%.3f"),
            "n": st.column_config.TextColumn("n", help="samples per problem (min–max where they differ)"),
            "lineage": st.column_config.TextColumn("lineage", help="the training run and step an evaluation was "
                                                   "made at; the run a rescore re-verified"),
            "training": st.column_config.LinkColumn("training", display_text="open in Training",
                                                    help="the training run at that step on the Training page"),
            "created_at": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm")})
        run_id = st.selectbox("reproducibility manifest of", df["run_id"].tolist(), index=None,
                              placeholder="choose a run", key=ui.key("runs", "manifest_of"),
                              format_func=lambda r: ui.run_labels(df).get(r, r))
        if run_id:
            row = df.set_index("run_id").loc[run_id]
            facts = [f"**kind** {row['kind']}"]
            for name in ("source", "lineage"):
                if not pd.isna(row[name]):
                    facts.append(f"**{name}** {ui.label_text(row[name])}")
            st.markdown(" · ".join(facts))
            if not pd.isna(row["training"]):
                st.markdown(f"[open the training run at that step in Training]({row['training']})")
            st.json(ui.run_manifest(ui.db(), run_id), expanded=1)
    st.subheader("Reference: the paper's Tables 1 and 3")
    st.caption("Published numbers, not runs of this store. '5 Avg' is recomputed as the size-weighted mean of the "
               "five columns (500/272/675/40/30); the one row whose reported value does not match is flagged.")
    st.dataframe(ui.paper_rows(), hide_index=True, width="stretch", key=ui.key("runs", "paper_rows"))


ui.guard(body)
