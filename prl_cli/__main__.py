"""``python -m prl_cli`` = the ``prl`` command."""

import sys

from prl_cli.main import main

if __name__ == "__main__":
    sys.exit(main())
