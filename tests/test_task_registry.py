"""The task registry (lens/tasks/__init__.py) is the one list of built-in tasks: config, warm start, gates and the
study read it, and a task file dropped into the package is registered with no other edit.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_task_registry.py -q
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lens import config, errors, gates, tasks
from lens.tasks import base, successor, warmstart

REPO = Path(__file__).resolve().parents[1]


def choices(message: str) -> list[str]:
    """The names an argparse 'invalid choice' message offers."""
    return re.findall(r"'([^']+)'", message.split("choose from", 1)[1])


def test_every_name_comes_from_the_registry() -> None:
    assert config.BUILTIN_TASKS == tasks.NAMES == tasks.names()
    assert tuple(warmstart.RECIPES) == tasks.NAMES
    assert all(warmstart.RECIPES[name] == tasks.get(name).recipe for name in tasks.NAMES)
    with pytest.raises(errors.UsageError, match="invalid choice") as gates_error:
        gates.parse_args(["--task", "nope"])
    assert choices(str(gates_error.value)) == list(tasks.NAMES)


def test_the_warm_start_offers_every_registered_task(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        warmstart.main(["--out", "unused", "--task", "nope"])
    assert choices(capsys.readouterr().err) == list(tasks.NAMES)


def test_every_registered_name_is_its_task() -> None:
    assert tasks.SUFFIX == base.SUFFIX  # the registry spells it without importing base
    for name in tasks.NAMES:
        task = tasks.get(name)
        assert isinstance(task, base.Task) and task.name == name and tasks.get(name) is task
        # A control has no file of its own (it is built from its task's); a task with a control registers it.
        assert name.endswith(base.SUFFIX) == (name not in _files())
        if task.control is not None:
            assert name + base.SUFFIX in tasks.NAMES
    # The names in file order (a task added before `ledger` in that order changed the first one).
    with pytest.raises(ValueError, match=re.escape(f"unknown built-in task 'nope'; known: {', '.join(tasks.NAMES)}")):
        tasks.get("nope")


def _files() -> set[str]:
    return {p.stem for p in Path(tasks.__file__).parent.glob("*.py")}


def test_the_committed_study_plans_run_registered_tasks() -> None:
    # The plans are pre-registered (their sha256 is in every table): checked here, never edited.
    for plan in sorted((REPO / "bench").glob("study_plan*.yaml")):
        for name, spec in yaml.safe_load(plan.read_text())["tasks"].items():
            task = spec.get("gates", name)
            assert task in tasks.NAMES, (plan.name, name)
            cfg = config.load_config(REPO / spec["preset"], spec.get("overrides", []), validate=False)
            assert cfg.data.train == task, (plan.name, name)


def test_importing_the_config_imports_no_task_module() -> None:
    # The registry reads the task files' text: lens.config stays cheap (no transformers, no task module).
    heavy = "('transformers', 'lens.tasks.')"
    code = f"import sys, lens.config; print(sorted(m for m in sys.modules if m.startswith({heavy})))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("source", "declared"),
    [
        ("x = 1\n", None),
        ("\nTASK = Task(name='a', control=Control(reference_sha256='s', recipe=R))\n", True),
        ("\nTASK = Task(name='a', control=None)\n", False),
        ("\nTASK = Task(name='a')\n", False),
        ("\nTASK = dataclasses.replace(other.TASK, name='a')\n", False),
    ],
)
def test_what_the_scan_reads_from_a_task_file(source: str, declared: bool | None) -> None:
    assert tasks.declared(source) is declared


@pytest.fixture
def dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder added to the package's path (as if its files were in lens/tasks), removed again after the test."""
    monkeypatch.setattr(tasks, "__path__", [*tasks.__path__, str(tmp_path)])
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("lens.tasks.dropped_")]:
        del sys.modules[name]


def test_a_task_file_dropped_into_the_package_is_registered(dropped: Path) -> None:
    # A copy of successor under another name: one file, no other edit.
    source = Path(successor.__file__).read_text().replace('name="successor"', 'name="dropped_successor"')
    (dropped / "dropped_successor.py").write_text(source)
    assert {"dropped_successor", "dropped_successor_direct"} <= set(tasks.names())
    task, control = tasks.get("dropped_successor"), tasks.get("dropped_successor_direct")
    assert task.name == "dropped_successor" and control.name == "dropped_successor_direct"
    assert task.assets_dir == base.ASSETS / "dropped_successor" and task.gamma == successor.GAMMA
    assert task.train_set(8, 0) == successor.TASK.train_set(8, 0)
    assert control.eval_sets(4)["noisy"] == tasks.get("successor_direct").eval_sets(4)["noisy"]


def test_a_task_file_whose_task_has_another_name_is_refused(dropped: Path) -> None:
    (dropped / "dropped_misnamed.py").write_text(Path(successor.__file__).read_text())
    with pytest.raises(ValueError, match=r"dropped_misnamed\.py: TASK must be .* named 'dropped_misnamed'"):
        tasks.get("dropped_misnamed")


def test_a_task_copied_from_a_parent_must_say_whether_it_has_a_control(dropped: Path) -> None:
    # dataclasses.replace keeps successor's control: the file must set `control=` for the scan to see it.
    source = "import dataclasses\nfrom lens.tasks import successor\n\nTASK = dataclasses.replace(successor.TASK, {})\n"
    (dropped / "dropped_copy.py").write_text(source.format('name="dropped_copy"'))
    with pytest.raises(ValueError, match=r"dropped_copy\.py: TASK's control must be set"):
        tasks.get("dropped_copy")
    (dropped / "dropped_plain.py").write_text(source.format('name="dropped_plain", control=None'))
    assert tasks.get("dropped_plain").control is None and "dropped_plain_direct" not in tasks.names()
