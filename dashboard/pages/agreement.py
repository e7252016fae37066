"""Agreement: our verdicts against an imported run's own labels (or another run's verdicts, e.g. a
rescore), the 2×2 counts, Cohen's κ, and every disagreeing sample side by side. Problems, golds,
answers and responses have their math typeset (``dashboard.math_text``: per fragment, the rest shown
as written; the sidebar toggle shows the raw text). Nothing from a file or a model becomes HTML."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402
import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402

st.title("Agreement")

SOURCE = "its source's own labels"


def body() -> None:
    df = ui.all_runs()
    if df is None:
        return
    with_samples = ui.runs_with_samples(df)
    if with_samples.empty:
        st.info("No run has samples yet. Import another tool's file with `prl import FILE --dataset NAME --db "
                f"{ui.db()}`.")
        return
    ui.math_toggle()
    runs = with_samples["run_id"].tolist()
    labels = ui.run_labels(with_samples)
    imported = with_samples[with_samples["kind"].isin(["imported", "rescore"])]["run_id"].tolist()
    run_id = st.selectbox("run (ours)", runs, index=runs.index(imported[-1]) if imported else 0,
                          key=ui.key("agreement", "run"), format_func=lambda r: labels.get(r, r))
    st.caption(ui.describe_run(with_samples, run_id))
    others = [SOURCE] + [r for r in runs if r != run_id]
    against = st.selectbox("against", others, key=ui.key("agreement", "against", run_id),
                           format_func=lambda r: labels.get(r, r))
    try:
        res = ui.agreement(ui.db(), run_id, None if against == SOURCE else against)
    except ValueError as e:  # no labels / nothing in common: the report's own message
        st.info(str(e))
        return
    n = res["samples"]
    c = st.columns(3)  # two rows of three: every card readable on a 1,400 px window
    c[0].metric("samples compared", f"{n:,}")
    c[1].metric("agree", f"{res['agree'] / n:.1%}")
    c[2].metric("Cohen's κ", "undefined" if res["kappa"] is None else f"{res['kappa']:.3f}")
    c = st.columns(3)
    c[0].metric("our accuracy", f"{res['ours_accuracy']:.3f}")
    c[1].metric("their accuracy" if against == SOURCE else f"accuracy of {against}", f"{res['theirs_accuracy']:.3f}")
    c[2].metric("reported by the source", "—" if res["reported_accuracy"] is None else f"{res['reported_accuracy']:.4f}")
    if res["unlabelled"]:
        st.caption(f"{res['unlabelled']} samples have no label of the source's own and are not compared.")
    t = res["table"]
    table = pd.DataFrame({"ours": ["correct", "correct", "wrong", "wrong"], "theirs": ["correct", "wrong", "correct", "wrong"],
                          "samples": [t["both_correct"], t["ours_only"], t["theirs_only"], t["both_wrong"]]})
    st.plotly_chart(charts.agreement_matrix(table, "ours", "theirs" if against == SOURCE else against),
                    width="stretch", key=ui.key("agreement", "matrix", run_id, against))
    rows = res["rows"]
    st.subheader(f"Disagreements: {len(rows)}")
    if rows.empty:
        st.success("None: both graders give every compared sample the same verdict.")
    else:
        st.dataframe(rows[["problem_id", "sample_idx", "verdict", "extracted_answer", "other_verdict", "other_answer",
                           "gold"]], hide_index=True, width="stretch", key=ui.key("agreement", "table", run_id, against))
        pick = st.selectbox("read one", range(len(rows)), index=None, placeholder="row",
                            key=ui.key("agreement", "pick", run_id, against),
                            format_func=lambda i: f"{rows.iloc[i]['problem_id']} sample {rows.iloc[i]['sample_idx']}")
        if pick is not None:
            r = rows.iloc[pick]
            where = ("agreement", "read", run_id, against, r["problem_id"], r["sample_idx"])
            ui.show_text("problem", r["problem"], key=ui.key(*where, "problem"))
            g1, g2 = st.columns(2)
            with g1:
                ui.show_answer("gold (ours)", r["gold"], key=ui.key(*where, "gold"))
                ui.show_answer(f"our answer — {r['verdict']}", r["extracted_answer"], key=ui.key(*where, "ours"))
                if r["verdict_detail"]:
                    ui.show_text("why", r["verdict_detail"], key=ui.key(*where, "detail"))
            with g2:
                ui.show_answer("gold (theirs)", r["other_gold"], key=ui.key(*where, "their_gold"))
                ui.show_answer(f"their answer — {r['other_verdict']}", r["other_answer"], key=ui.key(*where, "theirs"))
            ui.show_text("response", r["response"], key=ui.key(*where, "response"))
            if r["source_ref"]:
                st.caption(f"from {ui.label_text(r['source_ref'])}")
    if not res["unmatched"].empty:
        st.subheader(f"Rows of the source that match no problem: {len(res['unmatched'])}")
        st.dataframe(res["unmatched"], hide_index=True, width="stretch", key=ui.key("agreement", "unmatched", run_id))


ui.guard(body)
