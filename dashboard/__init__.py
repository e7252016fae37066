"""Streamlit + Plotly dashboard over the DuckDB store (issue 6). Nothing is defined here yet."""
