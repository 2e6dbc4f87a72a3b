"""lens.console: progress that suits where it is printed, commands that run as printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lens import console


def test_off_a_terminal_the_bar_prints_plain_periodic_lines(capsys, monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(console.LineBar, "_time", lambda self: now[0])
    bar = console.bar(10, desc="eval clean", unit="prompt", terminal=False)
    assert isinstance(bar, console.LineBar)
    bar.update(2)  # under the interval: quiet
    now[0] = console.LINE_INTERVAL_S + 1
    bar.set_postfix_str("reward/mean=0.5", refresh=False)
    bar.update(2)
    now[0] += 1
    bar.update(6)
    bar.close()
    bar.close()  # once closed, it says nothing more
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "eval clean: 4/10 prompts (40%), 7.75 s/prompt, ETA 46 s, reward/mean=0.5",
        "eval clean: 10/10 prompts (100%), 3.2 s/prompt, ETA 0 s, reward/mean=0.5",
    ]


def test_a_short_pass_off_a_terminal_prints_nothing_without_its_final_line(capsys) -> None:
    bar = console.bar(4, desc="clean", unit="prompt", final=False, terminal=False)
    bar.update(4)
    bar.close()
    disabled = console.bar(4, desc="clean", unit="prompt", disable=True, terminal=False)
    disabled.update(4)
    disabled.close()
    assert capsys.readouterr().err == ""


def test_on_a_terminal_the_bar_is_tqdm() -> None:
    from tqdm import tqdm

    bar = console.bar(3, desc="x", unit="step", terminal=True, disable=True)
    assert isinstance(bar, tqdm)
    bar.close()


def test_a_command_names_the_installed_script_or_the_running_interpreter(monkeypatch, tmp_path: Path) -> None:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", "/nonexistent")
    # No console script beside the interpreter: the interpreter itself, relative to the working directory.
    assert console.command("lens.data", "check", "my dir") == ".venv/bin/python -m lens.data check 'my dir'"
    assert console.python() == ".venv/bin/python"
    (bin_dir / "lens-data").touch()
    assert console.command("lens.data", "check", "d") == ".venv/bin/lens-data check d"
    monkeypatch.setenv("PATH", str(bin_dir))
    (bin_dir / "lens-data").chmod(0o755)
    assert console.command("lens.data", "check", "d") == "lens-data check d"  # PATH finds that same script
    # Another program's script (the closing summary's TensorBoard line): the same rule; absent here, bare.
    assert console.script("tensorboard") == "tensorboard"
    (bin_dir / "tensorboard").touch()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert console.script("tensorboard") == ".venv/bin/tensorboard"
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert console.python() == str(bin_dir / "python")  # outside the working directory: the whole path
    monkeypatch.chdir("/")
    assert console.python() == str(bin_dir / "python")


def test_a_printed_command_runs_as_printed() -> None:
    line = console.command("lens.report", "--help")
    assert line.split()[0].endswith(("lens-report", Path(sys.executable).name))
    done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout.lower()


@pytest.mark.parametrize("module", sorted(console.SCRIPTS))
def test_every_script_named_is_a_console_script(module: str) -> None:
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    script = console.SCRIPTS[module]
    assert f'{script} = "' in pyproject


def test_a_usage_error_names_its_command_once(capsys) -> None:
    # Was: `lens: error: python -m lens.report: python -m lens.report: give at least one RUN_DIR ... (see --help)
    # (see --help)`: the parser's complaint was caught and wrapped by the parser again.
    from lens import report

    with pytest.raises(SystemExit) as e:
        report.main([])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count(console.command("lens.report")) == 1 and err.count("(see --help)") == 1
    assert "give at least one RUN_DIR" in err
