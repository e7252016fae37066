"""Studies: a grid of training settings × seeds (``config``), the plain steps the ``study`` flow chains
(``run``), and the report across seeds with its charts (``report``, ``charts``)."""
