"""The code, kernels, benchmarks, presets, scripts, docs and README cite nothing a clone lacks: no `../shared/...`
folder, no `shared/spec` file, no issue number ("issue 24"). They cite docs/ or the README, or explain in place.

The same as `grep -rnE "shared/spec|\\.\\./shared|[Ii]ssue [0-9]+" lens kernels csrc bench docs README.md` (plus
configs/, scripts/ and the build files) over the tracked files (what a clone has), with one exception: a
registered study plan (bench/study_plan*.yaml) whose sha256 a committed study table records. Its text is frozen:
the tables name the plan by that hash, so changing one character, even a comment, would orphan every result
computed under it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PATHS = ("lens", "kernels", "csrc", "bench", "docs", "README.md", "configs", "scripts", "setup.py", "pyproject.toml")
PATTERN = re.compile(r"shared/spec|\.\./shared|[Ii]ssue [0-9]+")
PLANS = "bench/study_plan*.yaml"


def registered_plans(repo: Path) -> set[str]:
    """The sha256 of every plan a committed study table (bench/results/*/study.json) was computed under."""
    return {json.loads(p.read_text())["plan_sha256"] for p in repo.glob("bench/results/*/study.json")}


def citations(repo: Path, files: list[str]) -> list[str]:
    """`file:line: text` of every match in `files` (relative to `repo`), less the registered plans."""
    frozen = registered_plans(repo)
    out = []
    for rel in files:
        path = repo / rel
        if path.match(PLANS) and hashlib.sha256(path.read_bytes()).hexdigest() in frozen:
            continue
        for n, line in enumerate(path.read_bytes().decode("utf-8", errors="replace").splitlines(), 1):
            if PATTERN.search(line):
                out.append(f"{rel}:{n}: {line.strip()}")
    return out


def tracked(repo: Path) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", *PATHS], cwd=repo, capture_output=True, check=True).stdout
    return [f for f in listed.decode().split("\0") if f and (repo / f).is_file()]


def test_nothing_cites_what_a_clone_lacks() -> None:
    assert citations(REPO, tracked(REPO)) == []


def test_the_check_finds_citations_and_exempts_only_registered_plans(tmp_path: Path) -> None:
    (tmp_path / "bench" / "results" / "study").mkdir(parents=True)
    frozen = tmp_path / "bench" / "study_plan.yaml"
    frozen.write_text("# Pre-registration (issue 24)\n")
    digest = hashlib.sha256(frozen.read_bytes()).hexdigest()
    (tmp_path / "bench" / "results" / "study" / "study.json").write_text(json.dumps({"plan_sha256": digest}))
    (tmp_path / "bench" / "study_plan_new.yaml").write_text("# see Issue 7\n")  # not registered: checked
    (tmp_path / "code.py").write_text("x = 1\nPATH = '../shared/data'  # shared/spec/facts.md\n")
    files = ["bench/study_plan.yaml", "bench/study_plan_new.yaml", "code.py"]
    assert citations(tmp_path, files) == [
        "bench/study_plan_new.yaml:1: # see Issue 7",
        "code.py:2: PATH = '../shared/data'  # shared/spec/facts.md",
    ]
    frozen.write_text("# Pre-registration (issue 24), edited\n")  # its hash no longer registered: checked
    assert citations(tmp_path, files)[0] == "bench/study_plan.yaml:1: # Pre-registration (issue 24), edited"
