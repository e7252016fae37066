"""Scores: per-data-set average@n and pass@k with bootstrap CIs, micro and macro aggregates with
data-set sizes, and the pass@k curve of each run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402


st.title("Scores")


def body() -> None:
    run_ids = ui.pick_eval_runs(key="scores_runs")
    if not run_ids:
        return
    ns = ui.sample_counts(ui.db(), run_ids)  # run → the fewest samples any of its problems has
    if not ns:
        st.info("The selected runs have no samples yet.")
        return
    top = max(ns.values())
    k = st.number_input(f"k for pass@k (1 to {top}: the most samples per problem of the selected runs)", min_value=1,
                        max_value=top, value=min(8, top), step=1, key=ui.key("scores", "k", top))
    clipped = {r: n for r, n in ns.items() if n < k}
    if clipped:
        st.caption(f"pass@{int(k)} needs {int(k)} samples per problem: "
                   + ", ".join(f"{ui.label_text(r)} has {n}, so it shows pass@{n}" for r, n in clipped.items()) + ".")
    per_ds, agg = ui.scores(ui.db(), run_ids, int(k))
    if per_ds.empty:
        st.info("The selected runs have no samples yet.")
        return
    for metric in ("average", "pass"):
        st.plotly_chart(charts.scores_by_dataset(per_ds, metric), width="stretch",
                        key=ui.key("scores", "by_dataset", metric, run_ids))
    table = per_ds.assign(score=[charts.fmt_ci(v, lo, hi) for v, lo, hi in zip(per_ds.value, per_ds.lo, per_ds.hi)])
    table["metric"] = table["metric"] + "@" + table["k"].astype(str)
    st.subheader("Per data set (%, 95% bootstrap CI over problems)")
    st.dataframe(table.pivot_table(index=["dataset", "problems"], columns=["run_id", "metric"], values="score",
                                   aggfunc="first"), width="stretch", key=ui.key("scores", "per_dataset", run_ids))
    st.subheader("Aggregates")
    agg = agg.assign(score=[charts.fmt_ci(v, lo, hi) for v, lo, hi in zip(agg.value, agg.lo, agg.hi)])
    agg["metric"] = agg["metric"] + "@" + agg["k"].astype(str)
    agg["label"] = agg.apply(lambda r: f"{r['aggregate']} ({r['problems']} problems)" if r["aggregate"] == "micro"
                             else f"macro ({r['datasets']} data sets)", axis=1)
    st.dataframe(agg.pivot_table(index=["run_id", "label"], columns="metric", values="score", aggfunc="first"),
                 width="stretch", key=ui.key("scores", "aggregates", run_ids))
    st.caption("micro = size-weighted over problems (the paper's '5 Avg'); macro = mean of the data-set scores "
               "(what the authors' scripts print). Data-set sizes are in the table above.")
    st.plotly_chart(charts.pass_at_k_curve(ui.pass_at_k_curve(ui.db(), run_ids)), width="stretch",
                    key=ui.key("scores", "pass_at_k_curve", run_ids))


ui.guard(body)
