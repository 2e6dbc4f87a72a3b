"""scripts/comment_density.py counts what issue 25 asks for: comment lines (alone or trailing) over code
lines, docstrings in neither."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("comment_density", REPO / "scripts" / "comment_density.py")
comment_density = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comment_density)

SAMPLE = '''"""Module docstring,
two lines."""

import os  # a trailing comment counts


def f(x):
    """A docstring is not a comment."""
    # a comment line alone
    text = """a long string
    is code on both lines"""
    return x, text, os
'''


def test_density_counts_comments_and_code_but_not_docstrings(tmp_path: Path) -> None:
    path = tmp_path / "sample.py"
    path.write_text(SAMPLE)
    # comments: the trailing one and the lone one; code: import, def, the string's 2 lines, return (and
    # the lone comment line is not code).
    assert comment_density.density(path) == (2, 5)


def test_cli_prints_every_module_and_fails_below_the_minimum(tmp_path: Path, capsys) -> None:
    assert comment_density.main(["scripts/comment_density.py"]) == 0
    assert "scripts/comment_density.py" in capsys.readouterr().out
    assert comment_density.main(["--min", "99", "scripts/comment_density.py"]) == 1
