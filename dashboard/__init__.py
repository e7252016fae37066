"""Streamlit + Plotly dashboard over the DuckDB store (``prl dashboard``): ``app.py`` navigates
``pages/``; ``data.py`` reads the store through named queries; ``charts.py`` turns DataFrames into
figures; ``ui.py`` holds the shared page helpers."""
