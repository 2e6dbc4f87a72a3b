"""Issue 26 item 9: a user data file without `data.eval` evaluates on a held-out split of itself (5 %, at most
64 problems, taken out of training), never on the built-in task; the built-in tasks keep their own sets."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from lens import config, preflight, tasks
from lens.config import load_config

CPU = {"world_size": 1, "cuda_available": False}


def _file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text(
        "".join(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(n))
    )
    return path


def test_builtin_task_names_are_the_configs():
    assert config.BUILTIN_TASKS == tasks.NAMES


@pytest.mark.parametrize(("train", "expected"), [("vartrack", ["vartrack"]), ("ledger", ["ledger"])])
def test_builtin_tasks_evaluate_on_their_own_sets(train, expected):
    assert load_config(None, [f"data.train={train}"], **CPU).data.eval == expected
    assert load_config("cpu_default", [f"data.train={train}"], **CPU).data.eval == expected


@pytest.mark.parametrize(("n", "held"), [(100, 5), (400, 20), (5000, 64), (19, 0), (20, 1)])
def test_a_user_file_evaluates_on_a_held_out_split_of_itself(tmp_path, n, held):
    for preset in (None, "cpu_default"):
        cfg = load_config(preset, [f"data.train={_file(tmp_path, n)}"], **CPU)
        assert cfg.data.eval == ["heldout"]  # the old default evaluated a math file on vartrack
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train, evals = preflight.load_data(cfg)
        if held == 0:
            assert evals == [] and any("no held-out split" in str(w.message) for w in caught)
            assert len(train.problems) == n
            continue
        (heldout,) = evals
        assert heldout.name == "mine_heldout" and heldout.kind == train.kind == "math"
        assert len(heldout.problems) == held and len(train.problems) == n - held
        assert not {p.uid for p in heldout.problems} & {p.uid for p in train.problems}


def test_held_out_split_is_the_same_for_every_seed_and_capped_by_eval_limit(tmp_path):
    path = _file(tmp_path, 400)
    uids = []
    for seed in (0, 1):
        _, (heldout,) = preflight.load_data(load_config(None, [f"data.train={path}", f"seed={seed}"], **CPU))
        uids.append([p.uid for p in heldout.problems])
    assert uids[0] == uids[1] and len(uids[0]) == 20
    _, (capped,) = preflight.load_data(load_config(None, [f"data.train={path}", "data.eval_limit=3"], **CPU))
    assert [p.uid for p in capped.problems] == uids[0][:3]


def test_named_eval_sets_and_heldout_together(tmp_path):
    cfg = load_config(
        None, [f"data.train={_file(tmp_path, 100)}", "data.eval=[heldout, vartrack]", "data.eval_limit=4"], **CPU
    )
    train, evals = preflight.load_data(cfg)
    assert evals[0].name == "mine_heldout" and len(train.problems) == 95
    assert {"clean", "noisy"} <= {e.name for e in evals}
