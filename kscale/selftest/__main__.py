"""`python -m kscale.selftest`: what `kscale test` starts on every rank."""

import sys

from kscale.selftest.script import main

if __name__ == "__main__":
    sys.exit(main())
