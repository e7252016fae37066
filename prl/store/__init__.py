"""The store: DuckDB with named queries from ``sql/`` (``db``) and the read-only SQL box
(``readonly``)."""
