"""`python -m kscale.cli ...`, the same as the `kscale` console script."""

import sys

from kscale.cli.main import main

if __name__ == "__main__":  # multiprocessing's spawn imports this module as __mp_main__
    sys.exit(main())
