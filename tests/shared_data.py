"""Where the tests find the shared data sets: the first existing place of `lens.data.data_dirs()`.

Tests that need the shared copies (not a set written into tmp_path) skip when the file they read is not here.
"""

from pathlib import Path

from lens import data


def shared_data_dir() -> Path:
    """The first existing data directory in lens's search order (the first place when none exists)."""
    places = data.data_dirs()
    return next((p for _, p in places if p.is_dir()), places[0][1])


DATA_DIR = shared_data_dir()
