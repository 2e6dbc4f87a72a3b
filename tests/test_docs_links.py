"""Every relative link of the README and of docs/ leads to a file of the repository, and every `#anchor` to a
heading of that file (as GitHub renders it), so the map a newcomer follows has no dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (fenced code blocks skipped)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slug(m[1]) for m in re.finditer(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def dead_links(page: Path, root: Path = REPO) -> list[str]:
    """`page: target` (page relative to `root`) for each relative link whose file or heading does not exist."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    dead = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            dead.append(f"{page.relative_to(root)}: {target}")
    return dead


def test_slug_by_hand() -> None:
    assert slug("Defaults of the paper's setting") == "defaults-of-the-papers-setting"
    assert slug("`lens-train` and torchrun") == "lens-train-and-torchrun"


def test_a_dead_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Here\n")
    page.write_text("[ok](b.md#here) [gone](c.md) [bad anchor](b.md#there) [web](https://x.org/y)\n")
    assert dead_links(page, tmp_path) == ["a.md: c.md", "a.md: b.md#there"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_leads_somewhere(page: Path) -> None:
    assert dead_links(page) == []


def test_the_readme_links_every_chapter() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    chapters = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert {c for c in chapters if f"(docs/{c})" not in readme} == set()
