"""Generation: the evaluation prompt through the model's own chat template (``prompts``), the
engines behind one interface (``engines``: vLLM and transformers), and ``generate`` (JSONL in,
JSONL out, with a run manifest)."""
