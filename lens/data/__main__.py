"""`python -m lens.data prepare|check`: the data command (`lens-data`), which lives in lens/datahub.py.

A module of its own, above the loader: lens.datahub reads the sets through lens.data, so the loader cannot be
the command's entry point without importing it back.
"""

import sys

from lens import datahub

sys.exit(datahub.cli())
