"""Where the tests find the shared data sets: `$LENS_DATA_DIR`, else this workplace's copy, the `shared/data`
folder beside the checkout. tests/conftest.py puts the latter into `LENS_DATA_DIR` for the whole suite (its
subprocesses included), since lens itself looks only where it is told (`lens.data.data_dirs`).

Tests that need the shared copies (not a set written into tmp_path) skip when the file they read is not here.
"""

import os
from pathlib import Path

WORKPLACE_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
DATA_DIR = Path(os.environ.get("LENS_DATA_DIR") or WORKPLACE_DATA)
