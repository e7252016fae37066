"""Problem: one problem with its gold (raw and normalised) and every sample of the selected runs:
verdict, extracted answer, length, finish reason and the response as plain text (long text folded)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402


st.title("Problem")


def body() -> None:
    target = st.session_state.pop("problem_target", None)
    q = st.query_params  # deep links: ?dataset=…&problem_id=…&runs=a,b
    if target is None and "problem_id" in q:
        target = (q.get("dataset", ""), q["problem_id"], [r for r in q.get("runs", "").split(",") if r])
    run_ids = ui.pick_eval_runs(key="problem_runs")
    if target and target[2]:
        run_ids = list(dict.fromkeys(target[2] + run_ids))
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
        st.warning(f"{problem_id} is not in the problems table (samples only).")
    else:
        shown = ("problem", "info", dataset, problem_id)
        ui.show_text("problem", info["problem"], key=ui.key(*shown, "text"))
        c1, c2 = st.columns(2)
        with c1:
            ui.show_text("gold (normalised, what the verifier compares with)", info["gold_normalized"], key=ui.key(*shown, "gold"))
        with c2:
            ui.show_text("gold (raw answer field)", info["gold_raw"], key=ui.key(*shown, "gold_raw"))
        if info["meta"].get("gold_raw_only"):
            st.warning(f"This gold is flagged '{info['meta'].get('gold_flag', 'raw_only')}': Math-Verify does not "
                       "read it whole, so correct answers written differently can be scored wrong.")
    if samples.empty:
        st.info("No samples of this problem in the selected runs.")
        return
    st.subheader(f"{len(samples)} samples")
    st.dataframe(samples.drop(columns=["response"]), hide_index=True, width="stretch",
                 key=ui.key("problem", "samples", dataset, problem_id, run_ids))
    for i, r in enumerate(samples.itertuples(index=False)):
        label = (f"{r.run_id} · sample {r.sample_idx} · {r.verdict} · answer {r.extracted_answer!r} · "
                 f"{r.n_tokens} tokens · {r.finish_reason}")
        sample = ("problem", "sample", r.run_id, dataset, problem_id, r.sample_idx)
        with st.expander(label, expanded=i == 0, key=ui.key(*sample)):
            ui.show_text("response", r.response, key=ui.key(*sample, "response"))


ui.guard(body)
