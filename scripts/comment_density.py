"""Comment density per module: comment lines per 100 code lines, so the house's comment figure is reproducible.

    python scripts/comment_density.py [PATH ...]        # default: lens/ and kernels/ (every .py below them)
    python scripts/comment_density.py --min 10 lens     # exit 1 if a module is below 10

A comment line is a line that holds a `#` comment (alone or after code); docstrings are not comments. Code
lines are the non-blank lines that are neither docstrings nor comment-only lines. Counting trailing
comments too is deliberate: a `# why` at the end of the line it explains is the house style.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers covered by module, class and function docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def density(path: Path) -> tuple[int, int]:
    """(comment lines, code lines) of one Python file."""
    text = path.read_text()
    docstrings = _docstring_lines(ast.parse(text))
    comments: set[int] = set()
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        row = tok.start[0]
        if tok.type == tokenize.COMMENT:
            comments.add(row)
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            # A multi-line token (a long string) makes every line it spans a code line.
            code.update(r for r in range(row, tok.end[0] + 1) if r not in docstrings)
    return len(comments), len(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["lens", "kernels"], help="files or folders (below the repo)")
    parser.add_argument("--min", type=float, default=None, help="exit 1 if any module is below this density")
    args = parser.parse_args(argv)
    files = sorted(f for p in args.paths for f in ([REPO / p] if (REPO / p).is_file() else (REPO / p).rglob("*.py")))
    total_comments = total_code = 0
    low = []
    for f in files:
        comments, code = density(f)
        if code == 0:
            continue  # an empty __init__ has nothing to explain
        total_comments, total_code = total_comments + comments, total_code + code
        per100 = 100 * comments / code
        low += [f] if args.min is not None and per100 < args.min else []
        print(f"{per100:6.1f}  {comments:4d}/{code:<5d} {f.relative_to(REPO)}")
    print(f"{100 * total_comments / max(total_code, 1):6.1f}  {total_comments:4d}/{total_code:<5d} all")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
