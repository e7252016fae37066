"""Data: the bundled benchmarks and user files (``datasets``), the synthetic task (``synthetic``),
and the paper's reference tables (``paper``). The JSONL/CSV files ship beside these modules."""
