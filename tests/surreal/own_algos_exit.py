"""A module that exits when imported (a script's argparse, sys.exit at import)."""

import sys

sys.exit(3)
