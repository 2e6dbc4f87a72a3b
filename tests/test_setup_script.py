"""scripts/setup.sh and the package metadata as a newcomer meets them: progress shown, no system package
installed without a word, no spurious pip warning; and the tests' tiny models buildable without a data folder.
(Running setup.sh itself takes minutes and the network: `.ci/run` does that.)
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import families
import pytest
import tomllib

from lens import data

REPO = Path(__file__).resolve().parent.parent
SETUP = (REPO / "scripts" / "setup.sh").read_text()


def test_setup_shows_pips_progress_and_says_each_step():
    # Was: `pip install -q` everywhere: minutes without a line.
    assert not re.search(r"pip[^\n]* install[^\n]*(\s-q\b|--quiet)", SETUP)
    pip_calls = [line for line in SETUP.splitlines() if line.strip().startswith('"${pip[@]}"')]
    lines = SETUP.splitlines()
    for call in pip_calls:
        before = lines[lines.index(call) - 1].strip()
        assert before.startswith(("say ", "elif", "if", "else")) or "say " in before, call


def test_setup_says_before_it_installs_a_system_package():
    # Was: `setup.sh dev` ran `apt-get install -y chromium` as root, silently, and the docs did not say so.
    apt = SETUP.index("apt-get install")
    assert "system package chromium" in SETUP[:apt].rsplit("say ", 1)[1].split("\n")[0]
    assert "LENS_NO_APT" in SETUP
    chapter = " ".join((REPO / "docs" / "training.md").read_text().split())
    assert "the system package `chromium`" in chapter and "LENS_NO_APT=1" in chapter


def test_every_requested_extra_is_one_its_package_provides():
    # Was: math-verify[antlr4_13_2], which pip reports as an extra math-verify does not provide.
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\[([^\]]+)\].*", dep.split(";")[0].strip())
        if not match:
            continue
        try:
            provided = importlib.metadata.metadata(match[1]).get_all("Provides-Extra") or []
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{match[1]} is not installed")
        assert all(extra in provided for extra in match[2].split(",")), (dep, provided)


def test_the_tiny_family_models_need_no_data_folder(monkeypatch, tmp_path):
    # Was: families.build() trained its tokenizer on the shared data sets: FileNotFoundError in a fresh clone.
    monkeypatch.setattr(data, "data_dirs", lambda configured=None: [("data.dir", tmp_path)])
    corpus = families._corpus()
    assert len(corpus) >= 1000 and all("\\boxed{" in line for line in corpus)
