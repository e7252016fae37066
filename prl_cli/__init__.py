"""The ``prl`` command line: the top layer. ``main`` builds the parser from one module per
subcommand (``prl_cli.<name>.register``); only this package imports ``flows``."""
