"""Evaluation: runs of n samples per problem into the store (``evaluate``), their Parquet shards
for a task runner (``shards``), and the scores, comparisons and reports (``report``)."""
