"""The commands of README.md and docs/ run as printed on a fresh clone, and leave it as it was (`git status` clean).

The clone is the checkout's tracked files in a temporary directory, with no data folder beside it and an empty
home (no `~/.cache/lens/data`). Its `.venv` is this interpreter's environment, with the clone first on the
path, as `scripts/setup.sh` (an editable install of the clone) would give. Every command of a ```bash block of
the README or a docs/ chapter is listed below: run here (cheap: seconds, CPU, offline), or not run, with the
reason, so a new command must be classified. The cheap ones run in this order, as one newcomer would type them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lens import gates
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
# What a user reads: the README, then the chapters of docs/.
USER_DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

# Run as printed, in this order.
CHEAP = (
    ".venv/bin/lens-train --config cpu_smoke",
    ".venv/bin/lens-train --config cpu_smoke --resume auto",
    ".venv/bin/lens-train --print-config algorithm.name=dapo",
    ".venv/bin/python bench/study.py --tasks successor --dry-run",
    ".venv/bin/lens-train --config cpu_smoke --dry-run 'reward.functions=[examples/my_rewards.py:format_reward,"
    "examples/my_rewards.py:length_penalty]' 'reward.weights=[0.5,1.0]'",
)
# Not run here, by the text the command starts with: why.
NOT_RUN = {
    "bash scripts/setup.sh": "installs torch and builds the native library (minutes, network)",
    ".venv/bin/lens-train --config configs/cpu_grpo.yaml": "40 steps with evaluations (minutes)",
    ".venv/bin/lens-train --config cpu_dapo": "40 DAPO steps of 4 optimizer steps each (minutes); a shorter run is "
    "tests/test_train.py's clip-higher test",
    ".venv/bin/lens-train algorithm.name=resample": "80 steps (minutes)",
    ".venv/bin/lens-train --resume auto": "continues the main job, which this test does not run",
    ".venv/bin/lens-train --config paper_qwen3-4b_lens --dry-run": "needs Qwen3-4B-Base's tokenizer from the hub",
    ".venv/bin/lens-train data.train=my_problems.jsonl": "needs the user's file, math500 and Qwen2.5-3B",
    ".venv/bin/lens-warmstart --data my_problems.jsonl": "needs the user's file (minutes); tests/test_warmstart.py "
    "warm-starts on a generated one",
    ".venv/bin/lens-train --config cpu_default data.train=my_problems.jsonl": "needs the user's file and its warm "
    "start; tests/test_warmstart.py trains on a generated one",
    ".venv/bin/lens-train --nproc_per_node=8": "8 GPUs",
    ".venv/bin/lens-train --nnodes=4": "4 nodes",
    ".venv/bin/lens-train": "the main job: 40 LENS steps with evaluations (minutes)",
    ".venv/bin/python -m lens.data prepare": "needs network access to the Hugging Face hub",
    ".venv/bin/python -m lens.data check DIR": "DIR is the reader's prepared data directory",
    ".venv/bin/python -m lens.eval --model runs/lens_s0": "reads the main job's checkpoint",
    ".venv/bin/python -m lens.eval --model PATH": "the paper's benchmarks on a GPU with vLLM",
    ".venv/bin/python -m lens.report runs/lens_s0": "reads the main job and the GRPO run",
    ".venv/bin/python -m lens.audit --policy CKPT": "CKPT is the reader's checkpoint",
    ".venv/bin/python -m lens.audit detect": "reads a GRPO run",
    ".venv/bin/python -m lens.robustness --model CKPT": "CKPT is the reader's checkpoint",
    ".venv/bin/python -m lens.audit gates": "a warm start and 16 GRPO steps (minutes)",
    ".venv/bin/python -m pytest bench/": "the microbenchmarks (minutes)",
    ".venv/bin/python -m lens.bench_step": "12 steps of two methods (minutes)",
    ".venv/bin/python bench/study.py --tasks successor,vartrack_k2": "the study (hours)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_decomposed.yaml": "the decomposed study (hours)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_anchor.yaml": "the study on anchor (25 minutes)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_pivot.yaml": "the study on pivot (25 minutes)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_replica.yaml": "the study on replica (25 minutes)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_decoy.yaml": "the study on decoy (25 minutes)",
    ".venv/bin/python bench/study.py --plan bench/study_plan_wide.yaml": "the confirmatory study on wide (an hour)",
    ".venv/bin/python bench/study.py --tasks successor --pilot": "four LENS runs (minutes)",
    ".venv/bin/python bench/study.py --tasks successor --table-only": "reads the study's run directories",
    "LENS_BENCH_FULL=1 .venv/bin/python -m pytest bench/": "the microbenchmarks at full size (minutes)",
    "bash bench/gpu/run.sh": "a GPU",
}


def readme_commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks of a README: comments cut, `\\` continuations joined."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        pending = ""
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line) if not line.lstrip().startswith("#") else ""
            if not line.strip() and not pending:
                continue
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            commands.append(pending)
            pending = ""
    return commands


def user_commands() -> list[str]:
    """The command lines of every ```bash block of the README and the docs/ chapters, in reading order."""
    return [c for path in USER_DOCS for c in readme_commands(path.read_text())]


def _classified(command: str) -> bool:
    # `bash scripts/setup.sh && ...` lines of the quick start are classified by their first command.
    return command in CHEAP or any(command.startswith(prefix) for prefix in NOT_RUN)


def test_every_readme_command_is_run_here_or_says_why_not():
    commands = user_commands()
    assert all(c in commands for c in CHEAP), [c for c in CHEAP if c not in commands]
    assert [c for c in commands if not _classified(c)] == []


def test_every_readme_command_uses_the_venv():
    # One way to call commands throughout: `.venv/bin/...` (a bare `lens-train` is "command not found"
    # until the venv is activated, a bare `python` has no torch).
    bare = [c for c in user_commands() if re.match(r"(lens-|python |torchrun )", c)]
    assert bare == []


def _fresh_clone(root: Path) -> Path:
    clone = root / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, clone / rel)
    native = REPO / "lens" / "_C.abi3.so"  # what setup.sh builds
    if native.exists():
        shutil.copy2(native, clone / "lens" / native.name)
    (clone / ".venv").symlink_to(Path(sys.executable).parent.parent)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=clone, check=True)
    subprocess.run([*git, "add", "-A"], cwd=clone, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=clone, check=True)
    return clone


@pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")
def test_the_cheap_readme_commands_run_as_printed_on_a_fresh_clone(tmp_path):
    clone = _fresh_clone(tmp_path)
    assert not (clone.parent / "shared").exists()
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LENS_DATA_DIR")}
    env.update(
        HOME=str(tmp_path / "home"),
        PYTHONPATH=f"{clone}:{clone / 'kernels'}",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    env.pop("TRITON_INTERPRET", None)
    for command in CHEAP:
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
        assert status == "", f"{command} left: {status}"


def test_tools_write_under_runs_unless_given_out():
    # Was: `lens-audit gates` rewrote bench/results/gates/, `lens.bench_step` bench/results/step_time.md and
    # `pytest bench/ --benchmark-only` bench/results/results.jsonl, all committed.
    assert gates.parse_args(["--task", "successor"]).out == "runs/gates"
    done = subprocess.run(
        [sys.executable, "-m", "lens.bench_step", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "default runs/bench_step" in " ".join(done.stdout.split())
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import harness
    finally:
        sys.path.remove(str(REPO / "bench"))
    if not os.environ.get("LENS_BENCH_RESULTS"):
        assert harness.RESULTS_FILE == REPO / "runs" / "bench" / "results.jsonl"
