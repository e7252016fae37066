"""Study: one study's cells across seeds (``prl study``): per-cell scores with CIs across seeds and
problems, each cell against the baseline seed by seed, reward against KL over training, the η sweep,
what differs between the cells' configs, and the verdict on each claim the study tests. Everything comes from
prl.studies.report."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402
import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402
from prl.studies import charts  # noqa: E402

st.title("Study")


def body() -> None:
    studies = ui.studies(ui.db())
    if studies.empty:
        st.info(f"No studies in {ui.db()} yet (`prl study --config configs/study/embedded.yaml`).")
        return
    sid = st.selectbox("study", studies["study_id"].tolist(), index=len(studies) - 1, key=ui.key("study", "id"))
    rep = ui.study(ui.db(), sid)
    done = sum(j["status"] == "finished" for j in rep["jobs"])
    c = st.columns(4)
    c[0].metric("cells", len(rep["cells"]))
    c[1].metric("seeds", len(rep["seeds"]))
    c[2].metric("jobs finished", f"{done} / {len(rep['jobs'])}")
    c[3].metric("held-out problems", rep["problems"])
    st.caption(f"baseline {rep['baseline']}; n = {rep['n']} samples per problem; 95% CIs: *seeds* = Student t "
               "across seeds (the unit of replication), *problems* = bootstrap across problems.")
    per_cell = pd.DataFrame(rep["per_cell"])
    if per_cell.empty:
        st.info("No job of this study has finished its evaluation yet.")
    else:
        metrics = list(dict.fromkeys(per_cell["metric"]))
        metric = st.selectbox("metric", metrics, key=ui.key("study", "metric", sid))
        shown = per_cell[per_cell["metric"] == metric][["cell", "seeds", "mean", "seed_lo", "seed_hi", "problem_lo",
                                                         "problem_hi", "problems"]]
        st.dataframe(shown, hide_index=True, width="stretch", key=ui.key("study", "cells", sid, metric))
        st.plotly_chart(charts.pass_at_k(per_cell), width="stretch", key=ui.key("study", "pass_at_k", sid))
    if rep.get("claims"):
        st.subheader("Claims tested")
        st.caption("Each claim's cell against each compared cell, seed by seed: difference = cell − other with its 95% "
                   "CI across seeds. holds here: the CI excludes 0 in the claimed direction against every compared "
                   "cell; contradicted: it excludes 0 the other way against one; else not shown at this scale.")
        claims = pd.DataFrame([{"claim": c["text"], "metric": c["metric"], "verdict": c["verdict"],
                                "against": r["against"], "seeds": r["seeds"], "cell": r["cell_mean"],
                                "other": r["against_mean"], "diff": r["diff"], "lo": r["lo"], "hi": r["hi"]}
                               for c in rep["claims"] for r in c["comparisons"]])
        st.dataframe(claims, hide_index=True, width="stretch", key=ui.key("study", "claims", sid))
    if rep["paired"]:
        st.subheader(f"Each cell against {rep['baseline']}, seed by seed")
        paired = pd.DataFrame(rep["paired"])[["cell", "seeds", "diff", "lo", "hi", "problem_lo", "problem_hi", "note"]]
        st.dataframe(paired, hide_index=True, width="stretch", key=ui.key("study", "paired", sid))
    st.plotly_chart(charts.kl_reward(pd.DataFrame(rep["curves"], columns=["cell", "seed", "step", "reward", "kl"])),
                    width="stretch", key=ui.key("study", "kl_reward", sid))
    if rep["eta_sweep"]:
        base = next((r for r in rep["per_cell"] if r["cell"] == rep["baseline"] and r["metric"].startswith("average@")),
                    None)
        st.plotly_chart(charts.eta_sweep(pd.DataFrame(rep["eta_sweep"]), base), width="stretch",
                        key=ui.key("study", "eta", sid))
    st.subheader("What differs between the cells")
    if rep["undeclared_differences"]:
        st.warning(f"{', '.join(rep['undeclared_differences'])} differ between cells although the study does not "
                   "vary them: the comparison is not like for like.")
    else:
        st.success("Every difference between the cells' stored configs is one the study declares.")
    diffs = pd.DataFrame([{"key": k, **{c: str(v.get(c)) for c in rep["cells"]}}
                          for k, v in rep["config_differences"].items()])
    st.dataframe(diffs, hide_index=True, width="stretch", key=ui.key("study", "diffs", sid))
    with st.expander("jobs", key=ui.key("study", "jobs", sid)):
        st.dataframe(pd.DataFrame(rep["jobs"]), hide_index=True, width="stretch", key=ui.key("study", "jobs_table", sid))


ui.guard(body)
