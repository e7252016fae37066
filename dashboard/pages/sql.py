"""SQL: a read-only query box over the store, with the schema, saved examples and CSV download.
Writes, ATTACH, COPY, INSTALL/LOAD, files and network are refused; long queries are cut off."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402

from prl.store.readonly import QueryRefused, run_query  # noqa: E402

st.title("SQL (read-only)")

from prl.store.db import load_queries, sql_dir  # noqa: E402

EXAMPLES = {name.replace("_", " "): q for name, q in load_queries(sql_dir() / "examples.sql").items() if name != "schema"}
SCHEMA = load_queries(sql_dir() / "examples.sql")["schema"]


def body() -> None:
    with st.expander("schema", key=ui.key("sql", "schema")):
        cols, rows = run_query(ui.db(), SCHEMA)
        import pandas as pd

        st.dataframe(pd.DataFrame(rows, columns=cols), hide_index=True, width="stretch",
                     key=ui.key("sql", "schema_table"))
    example = st.selectbox("examples", list(EXAMPLES), index=0, key=ui.key("sql", "example"))
    query = st.text_area("query", EXAMPLES[example], height=120, key=ui.key("sql", "query", example))
    if st.button("run", type="primary", key=ui.key("sql", "run")):
        try:
            cols, rows = run_query(ui.db(), query, timeout_s=10.0)
        except QueryRefused as e:
            st.error(str(e))
            return
        import pandas as pd

        df = pd.DataFrame(rows, columns=cols)
        st.caption(f"{len(df)} rows")
        st.dataframe(df, hide_index=True, width="stretch", key=ui.key("sql", "result"))
        st.download_button("download CSV", df.to_csv(index=False), file_name="query.csv", mime="text/csv",
                           key=ui.key("sql", "download"))


ui.guard(body)
