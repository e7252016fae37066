"""prl: the pipeline around ``prl_core`` — the synthetic task, the embedded tiny model, the
generation engines, and the ``prl`` command line. (``prl_core`` holds the pure algorithm.)"""

__version__ = "0.1.0"
