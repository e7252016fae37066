"""Compare: two runs → per-data-set deltas with paired CIs, the success-set diff (gained, lost, both,
neither) with click-through to a problem, and a scatter of per-problem success rates."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402
from prl.evaluation.report import ReportError  # noqa: E402


st.title("Compare two runs")


def body() -> None:
    df = ui.all_runs()
    if df is None:
        return
    choices = df[(df["kind"] == "eval") & (df["samples"] > 0)]["run_id"].tolist()
    if len(choices) < 2:
        st.info("Comparing needs two evaluation runs with samples.")
        return
    c1, c2 = st.columns(2)
    run_a = c1.selectbox("A (baseline)", choices, index=max(0, len(choices) - 2), key=ui.key("compare", "run_a"))
    run_b = c2.selectbox("B", choices, index=len(choices) - 1, key=ui.key("compare", "run_b"))
    if run_a == run_b:
        st.info("Choose two different runs.")
        return
    try:
        res = ui.compare(ui.db(), run_a, run_b)
    except ReportError as e:  # e.g. runs evaluated on different data sets: no problem in common
        st.info(f"{e}: there is nothing in common to compare.")
        return
    o = res["summary"]["overall"]
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("common problems", o["problems"])
    m2.metric("Δ average@n (pp)", f"{100 * o['diff']['diff']:+.1f}",
              help=f"paired 95% CI [{100 * o['diff']['lo']:+.1f}, {100 * o['diff']['hi']:+.1f}]")
    m3.metric("gained / lost", f"{o['mcnemar']['gained']} / {o['mcnemar']['lost']}")
    m4.metric("McNemar p", f"{o['mcnemar']['p_value']:.3g}")
    pair = (run_a, run_b)
    st.plotly_chart(charts.deltas(res["deltas"], run_a, run_b), width="stretch", key=ui.key("compare", "deltas", pair))
    st.dataframe(res["deltas"], hide_index=True, width="stretch", key=ui.key("compare", "deltas_table", pair))
    st.plotly_chart(charts.success_sets(res["sets"]), width="stretch", key=ui.key("compare", "sets", pair))
    st.dataframe(res["sets"], hide_index=True, width="stretch", key=ui.key("compare", "sets_table", pair))
    st.plotly_chart(charts.success_scatter(res["problems"], run_a, run_b), width="stretch",
                    key=ui.key("compare", "scatter", pair))
    st.subheader("Problems by outcome")
    outcome = st.radio("outcome", ["gained", "lost", "both", "neither"], horizontal=True,
                       key=ui.key("compare", "outcome"))
    sel = res["problems"][res["problems"]["outcome"] == outcome]
    st.dataframe(sel, hide_index=True, width="stretch", key=ui.key("compare", "problems", pair, outcome))
    if not sel.empty:
        pid = st.selectbox("open a problem", sel["problem_id"].tolist(), index=None, placeholder="problem id",
                           key=ui.key("compare", "open_problem", pair, outcome))
        if pid:
            row = sel[sel["problem_id"] == pid].iloc[0]
            st.session_state["problem_target"] = (row["dataset"], pid, [run_a, run_b])
            st.switch_page("pages/problem.py")


ui.guard(body)
