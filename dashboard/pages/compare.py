"""Compare: two runs of any kind with samples (evaluations, evaluations during training, imports, rescores)
→ per-data-set deltas with paired CIs, the success-set diff (gained, lost, both, neither) with
click-through to a problem, and a scatter of per-problem success rates. Deep link: ``?a=RUN&b=RUN``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402
from prl.evaluation.report import ReportError  # noqa: E402


st.title("Compare two runs")


def default_pair(runs) -> tuple[str, str]:
    """B: the newest run; A: the newest other run sharing a data set with it (else the one before it)."""
    ids = runs["run_id"].tolist()
    b = ids[-1]
    sets = {r.run_id: set(str(r.datasets or "").split(", ")) for r in runs.itertuples(index=False)}
    a = next((r for r in reversed(ids[:-1]) if sets[r] & sets[b]), ids[-2])
    return a, b


def body() -> None:
    df = ui.all_runs()
    if df is None:
        return
    with_samples = ui.runs_with_samples(df)
    choices = with_samples["run_id"].tolist()
    if len(choices) < 2:
        st.info("Comparing needs two runs with samples (evaluations, imports or rescores).")
        return
    labels = ui.run_labels(with_samples)
    a_default, b_default = default_pair(with_samples)
    q = st.query_params  # deep links: ?a=RUN&b=RUN
    a_default = q.get("a") if q.get("a") in choices else a_default
    b_default = q.get("b") if q.get("b") in choices else b_default
    c1, c2 = st.columns(2)
    run_a = c1.selectbox("A (baseline)", choices, index=choices.index(a_default), key=ui.key("compare", "run_a"),
                         format_func=lambda r: labels.get(r, r))
    run_b = c2.selectbox("B", choices, index=choices.index(b_default), key=ui.key("compare", "run_b"),
                         format_func=lambda r: labels.get(r, r))
    for col, run_id in ((c1, run_a), (c2, run_b)):
        col.caption(ui.describe_run(with_samples, run_id))
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
