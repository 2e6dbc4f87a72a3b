"""Every `python -m lens.X` entry point answers a user's mistake the same way: one line `lens: error: ...`
naming what is wrong, exit 2, no traceback (LENS_DEBUG=1 shows it). Run the way a user runs them: a
subprocess. The console scripts of pyproject.toml are the same `cli` functions.

Run: `.venv/bin/python -m pytest tests/test_cli.py -q`.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
MISSING = "/nonexistent/lens_input"

# (module, argv with a missing input); the missing path must appear in the one line.
MISSING_INPUT = [
    ("lens.train", ["--config", f"{MISSING}.yaml", "--dry-run"]),
    ("lens.eval", ["--model", MISSING, "--benchmarks", "vartrack"]),
    ("lens.robustness", ["--model", MISSING, "--benchmarks", "vartrack"]),
    ("lens.audit", ["--policy", MISSING, "--ref", MISSING, "--data", "vartrack", "--out", "{tmp}/audit"]),
    ("lens.audit", ["detect", "--run", MISSING, "--ref", MISSING, "--out", "{tmp}/detect"]),
    ("lens.report", [MISSING]),
    ("lens.data", ["check", MISSING]),
    ("lens.stop", [MISSING]),
    ("lens.bench_step", ["--config", f"{MISSING}.yaml"]),
]
MODULES = sorted({m for m, _ in MISSING_INPUT} | {"lens.tasks.warmstart"})


def run(module: str, argv: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "LENS_DEBUG")}
    return subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True, env={**environ, **env}
    )


def assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lens: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(("module", "argv"), MISSING_INPUT, ids=[" ".join([m, *a[:1]]) for m, a in MISSING_INPUT])
def test_a_missing_input_is_one_line_exit_2(module: str, argv: list[str], tmp_path: Path) -> None:
    assert_one_line(run(module, [a.format(tmp=tmp_path) for a in argv]), MISSING)


@pytest.mark.parametrize("module", MODULES)
def test_a_bad_flag_is_one_line_exit_2(module: str) -> None:
    assert_one_line(run(module, ["--no-such-flag"]), "(see --help)")


def test_debug_shows_the_traceback() -> None:
    done = run("lens.report", [MISSING], LENS_DEBUG="1")
    assert done.returncode == 1 and "Traceback" in done.stderr


def test_a_bare_type_error_is_a_bug_not_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    from lens.errors import cli_errors

    @cli_errors
    def main() -> None:
        raise TypeError("internal bug")

    with pytest.raises(TypeError):
        main()


def test_console_scripts_are_the_cli_functions() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    tools = {name for name in scripts if name != "lens-train"}
    assert {"lens-eval", "lens-report", "lens-audit", "lens-data", "lens-robustness"} <= tools
    for name in tools:
        module, _, attr = scripts[name].partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name
    readme = (REPO / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in tools)


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("lens.train", ["--config", "paper_qwen3-4b_lens", "--dry-run"]),
        ("lens.eval", ["--model", "Qwen/Qwen3-4B-Base", "--benchmarks", "vartrack"]),
    ],
)
def test_an_uncached_hub_id_offline_is_one_line(module: str, argv: list[str], tmp_path: Path) -> None:
    done = run(module, argv, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert_one_line(
        done, "Qwen/Qwen3-4B-Base", "not in the local Hugging Face cache", "offline", "local model directory"
    )


def test_a_missing_model_path_is_not_called_a_repo_id() -> None:
    done = run("lens.train", ["model.path=/nonexistent/lens_gpu_model", "--dry-run"])
    assert_one_line(done, "model path /nonexistent/lens_gpu_model does not exist")
    assert "Repo id" not in done.stderr


def _data_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("", ["mine.jsonl", "has no problems"]),
        ('{"question": "1+1?", "solution": "2"}\n', ["mine.jsonl:1", "'question', 'solution'", "data.problem_key"]),
        (
            '{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": "see the solution above"}\n',
            ["mine.jsonl:2", "'see the solution above'", "prose"],
        ),
        (  # was "column 1" (counted past the line's newline)
            '{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": \n',
            ["mine.jsonl:2: invalid JSON: the line ends at column 29 inside its object", "a truncated line"],
        ),
        (  # was one error a run, line 4 (the loader's) before line 3 (the gold check's)
            '{"problem": "1+1?", "answer": "2"}\n{"problem": "x", "answer": "2"}\n'
            '{"problem": "2+2?", "answer": "see the solution above"}\n{"problem": "3+3?"\n',
            ["mine.jsonl: 2 bad rows: line 3: gold answer 'see the solution above'", "; line 4: invalid JSON"],
        ),
    ],
    ids=["empty", "missing-field", "prose-gold", "truncated-line", "every-bad-row-in-file-order"],
)
def test_thin_data_messages_name_the_file(text: str, needles: list[str], tmp_path: Path) -> None:
    done = run("lens.train", [f"data.train={_data_file(tmp_path, text)}", "--dry-run"])
    assert_one_line(done, *needles)


def test_an_unknown_preset_lists_the_presets() -> None:
    assert_one_line(
        run("lens.train", ["--config", "cpu_grpoo", "--dry-run"]), "presets:", "cpu_grpo", "paper_qwen3-4b_lens"
    )


def test_a_run_prints_one_start_line_and_the_step_it_resumed_from(tmp_path: Path) -> None:
    argv = [
        f"run_dir={tmp_path / 'run'}",
        "data.batch_size=4",
        "algorithm.m=4",
        "rollout.max_tokens=44",
        "optim.micro_batch_size=8",
        "data.eval_every=0",
        "logging.tensorboard=false",
        "checkpoint.every=1",
    ]
    first = run("lens.train", [*argv, "optim.steps=1"])
    assert first.returncode == 0, first.stderr
    assert "algorithm:" not in first.stdout  # the config is in run_dir/config.yaml, not on screen
    assert f"config in {tmp_path / 'run' / 'config.yaml'}" in first.stdout
    again = run("lens.train", [*argv, "optim.steps=2", "--resume", "auto"])
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if "resumed from step 1" in line]
