"""Failures: samples by verdict category with counts per run and data set, and the suspicious
passes (correct answer, listed by a rule of prl.grading.relevance.SUSPICION_RULES) with the Appendix-C
case view: the problem asked and the one the reasoning fits best side by side with the response, the
fit scores, the rules that list it, and the researcher's judgement (the page's one write, kept in the
store's judgements table through prl.store.db.Store.set_judgement)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import charts, ui  # noqa: E402
from dashboard import data  # noqa: E402
from prl.grading.relevance import JUDGEMENT_SAYS, JUDGEMENTS, SUSPICION_RULES  # noqa: E402
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


RULES = {r.name: r for r in SUSPICION_RULES}


def suspicious_section(run_ids) -> None:
    st.subheader("Suspicious passes")
    st.caption("A correct sample is listed when any of these rules holds (the paper's Appendix-C case; "
               "prl/grading/relevance.py):\n" + "\n".join(f"- **{r.name}**: {r.says}" for r in SUSPICION_RULES)
               + "\n\nA screen for reading, not a verdict: open a case to judge it.")
    sus = ui.suspicious_passes(ui.db(), run_ids)
    if sus.empty:
        st.success("None: no correct sample is listed by any rule.")
        return
    st.dataframe(sus.drop(columns=["response"]), hide_index=True, width="stretch",
                 key=ui.key("failures", "suspicious", run_ids))
    pick = st.selectbox("open a case", range(len(sus)), index=None, placeholder="a listed sample",
                        key=ui.key("failures", "suspicious_pick", run_ids),
                        format_func=lambda i: (f"{sus.iloc[i]['run_id']} · {sus.iloc[i]['problem_id']} sample "
                                               f"{sus.iloc[i]['sample_idx']} · {sus.iloc[i]['flagged_by']}"))
    if pick is not None:
        r = sus.iloc[pick]
        case_view(r["run_id"], r["dataset"], r["problem_id"], int(r["sample_idx"]))


def _fmt(x, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def case_view(run_id: str, dataset: str, problem_id: str, sample_idx: int) -> None:
    """The Appendix-C case: both problems beside the response, the fit scores, the rules, the judgement."""
    case = ui.suspicious_case(ui.db(), run_id, dataset, problem_id, sample_idx)
    k = ("failures", "case", run_id, dataset, problem_id, sample_idx)
    if case is None:
        st.info("This sample is no longer listed (the store changed).")
        return
    st.markdown("#### The case")  # ids come from data files: shown as text, never as Markdown
    st.text(f"{problem_id} · sample {sample_idx} · run {run_id}")
    for name in case["flagged_by"]:
        st.warning(f"Listed by **{name}**: {RULES[name].says}.")
    if tuple(case["flagged_now"]) != tuple(case["flagged_by"]):
        now = ", ".join(case["flagged_now"]) or "no rule"
        st.info(f"Computed again with the current rule, this sample is listed by: {now}. The store keeps the "
                "signals it was graded with; `prl rescore` grades the run again.")
    fit = case["fit"]
    cols = st.columns(5)
    cols[0].metric("relevance", _fmt(case["relevance"], ".2f"))
    cols[1].metric("fit to asked", _fmt(fit and fit["own"]))
    cols[2].metric("fit to best other", _fmt(fit and fit["rival_fit"]))
    cols[3].metric("best other ÷ asked", "—" if not fit or fit["ratio"] is None else f"{fit['ratio']:.2f}×")
    cols[4].metric("answer only", "yes" if case["answer_only"] else "no")
    if fit:
        st.caption(f"Fit: how much of a problem the reasoning restates (idf-weighted word and number n-grams); "
                   f"fits_another lists the sample when the best other problem fits more than {fit['threshold']:g}× "
                   "better than the one asked. Relevance: the share of the asked problem's numbers and content words "
                   "in the reasoning.")
    left, middle, right = st.columns([1, 2, 1])
    with left:
        st.markdown("**The problem asked**")
        st.text(problem_id)
        ui.show_text("problem", case["asked"]["problem"], key=ui.key(*k, "asked"))
        ui.show_answer("gold", case["asked"]["gold"], key=ui.key(*k, "asked_gold"))
        ui.show_answer("the response's answer", case["extracted_answer"], key=ui.key(*k, "answer"))
    with middle:
        tokens = f" · {case['n_tokens']} tokens" if case["n_tokens"] is not None else ""
        st.markdown(f"**The response**{tokens} · verdict {case['verdict']}")
        ui.show_text("response", case["response"], key=ui.key(*k, "response"))
    with right:
        best = case["best"]
        if best is None:
            st.markdown("**Fits best**: no other problem of the data set shares anything with the reasoning.")
        else:
            title = ("**Its closest other problem** (fits less well than the threshold: not why it is listed)"
                     if case["best_is_rival"] else "**The problem the reasoning fits best**")
            st.markdown(title)
            st.text(best["problem_id"])
            ui.show_text("problem", best["problem"], key=ui.key(*k, "best"))
            ui.show_answer("gold", best["gold"], key=ui.key(*k, "best_gold"))
    judgement_form(case, k)


def judgement_form(case: dict, k: tuple) -> None:
    """The researcher's mark, written to the store only when "save" is pressed."""
    st.markdown("**Your judgement** (kept in the store's `judgements` table; the samples are not changed)")
    options = [None, *JUDGEMENTS]
    choice = st.radio("judgement", options, index=options.index(case["judgement"]), horizontal=True,
                      format_func=lambda v: "not judged" if v is None else JUDGEMENT_SAYS[v],
                      key=ui.key(*k, "judgement"))
    note = st.text_input("note (optional)", value=case["note"] or "", key=ui.key(*k, "note"))
    saved = ui.key(*k, "saved")
    if st.button("save judgement", key=ui.key(*k, "save")):
        data.judge(ui.db(), case["run_id"], case["dataset"], case["problem_id"], case["sample_idx"], choice, note)
        st.session_state[saved] = "withdrawn" if choice is None else JUDGEMENT_SAYS[choice]
        st.rerun()  # the table and the case read the store again
    if saved in st.session_state:
        st.success(f"Saved: {st.session_state.pop(saved)}.")


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
    suspicious_section(run_ids)
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
