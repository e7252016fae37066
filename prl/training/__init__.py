"""Training: typed run configs (``config``), the SFT warm start (``sft``) and the RL trainer
(``train``: one plain script, run once per rank under DeepSpeed's launcher)."""
