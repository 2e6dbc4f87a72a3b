"""Tests of `python -m lens.data prepare|check` (lens/datahub.py) with the hub replaced by a local fake.

Run: `.venv/bin/python -m pytest tests/test_datahub.py -q`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from lens import data, datahub

REPO = Path(__file__).resolve().parent.parent

HUB = {
    "HuggingFaceH4/MATH-500": [{"problem": "1+1?", "answer": "2", "subject": "x"}, {"problem": "2+2?", "answer": 4}],
    "TIGER-Lab/MMLU-Pro": [{"question": "Pick one", "options": ["yes", "no"], "answer": "B"}],
    "BytedTsinghua-SIA/DAPO-Math-17k": [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": "Solve the following math problem step by step. The last line of your response should"
                    " be of the form Answer: $Answer\n\nWhat is 3+4?\n\nRemember to put your answer on its own line "
                    'after "Answer:".',
                }
            ],
            "reward_model": {"ground_truth": "7", "style": "rule"},
        }
    ],
}


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []

    def load_dataset(name: str, config: str | None, split: str) -> list[dict]:
        calls.append((name, config, split))
        if name not in HUB:
            raise ConnectionError(f"Couldn't reach '{name}' on the Hub (offline)")
        return HUB[name]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # prepare turns them on when the hub does not answer
        monkeypatch.setenv(var, os.environ.get(var, "0"))
    return calls


def test_prepare_writes_the_layout_the_loader_reads(fake_hub: list, tmp_path: Path, capsys) -> None:
    assert datahub.main(["prepare", "math500", "mmlu_pro", "dapo_math_17k", "--out", str(tmp_path)]) == 0
    assert "prepare: 3/3 sets (100%)" in capsys.readouterr().err  # progress over the sets (capsys: plain lines)
    assert fake_hub == [
        ("HuggingFaceH4/MATH-500", None, "test"),
        ("TIGER-Lab/MMLU-Pro", None, "test"),
        ("BytedTsinghua-SIA/DAPO-Math-17k", None, "train"),
    ]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["math500"]["rows"] == 2 and manifest["math500"]["file"] == "math500/test.jsonl"
    assert manifest["mmlu_pro"]["file"] == "mmlu_pro/test.jsonl"  # written plain, found by the loader all the same
    rows = [json.loads(line) for line in (tmp_path / "math500" / "test.jsonl").read_text().splitlines()]
    assert rows == [
        {"uid": "math500-0", "problem": "1+1?", "answer": "2"},
        {"uid": "math500-1", "problem": "2+2?", "answer": "4"},
    ]
    (mc,) = data.load_sets("mmlu_pro", data_dir=tmp_path)
    assert mc.problems[0].problem == "Pick one\n\nA. yes\nB. no" and mc.problems[0].answer == "B"
    (dapo,) = data.load_sets("dapo_math_17k", role="train", data_dir=tmp_path)
    assert dapo.problems[0].problem == "What is 3+4?" and dapo.problems[0].answer == "7"
    assert datahub.check(tmp_path) == []
    assert datahub.main(["check", str(tmp_path)]) == 0


def test_check_finds_changed_missing_and_short_files(fake_hub: list, tmp_path: Path, capsys) -> None:
    datahub.prepare(["math500", "mmlu_pro", "dapo_math_17k"], tmp_path)
    path = tmp_path / "math500" / "test.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    (tmp_path / "mmlu_pro" / "test.jsonl").unlink()
    dapo = tmp_path / "dapo_math_17k" / "train.jsonl"
    dapo.write_text(dapo.read_text().replace("3+4", "3+5"))
    problems = datahub.check(tmp_path)
    assert any("math500" in p and "has 1 rows, the manifest says 2" in p for p in problems)
    assert any("mmlu_pro" in p and "is missing" in p for p in problems)
    assert any("dapo_math_17k" in p and "sha256 differs" in p for p in problems)
    assert datahub.main(["check", str(tmp_path)]) == 1
    assert "4 problem(s)" in capsys.readouterr().out


def exit_status(argv: list[str]) -> int:
    try:
        return datahub.main(argv)
    except SystemExit as e:  # a user error: one line, exit 2
        return int(e.code)


def test_without_network_one_clear_line(fake_hub: list, tmp_path: Path, capsys) -> None:
    assert exit_status(["prepare", "aime24", "--out", str(tmp_path)]) == 2
    # The progress bar's line (redrawn with carriage returns) comes first; the error is the one other line.
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("prepare:")]
    assert len(err) == 1 and err[0].startswith("lens: error: hf:HuggingFaceH4/aime_2024@train: could not load")
    assert exit_status(["prepare", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown set(s) ['nope']" in capsys.readouterr().err
    assert exit_status(["check", str(tmp_path)]) == 2  # nothing was written: no manifest
    assert "no manifest.json" in capsys.readouterr().err
    assert exit_status(["check", str(tmp_path / "nope")]) == 2
    assert "nope: no such data directory" in capsys.readouterr().err


def test_check_without_a_manifest_offers_to_write_one(tmp_path: Path) -> None:
    (tmp_path / "math500").mkdir()
    (tmp_path / "math500" / "test.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n')
    cmd = [sys.executable, "-m", "lens.data", "check", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and f"check {tmp_path} --write-manifest" in done.stderr
    # The command it offers runs as printed (was a bare `python -m ...`: another interpreter, or none, on PATH).
    offered = done.stderr.rsplit("`", 2)[-2]
    assert not offered.startswith("python ")
    done = subprocess.run(offered, shell=True, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and "1 sets: math500" in done.stdout and f"{tmp_path}: ok" in done.stdout
    assert json.loads((tmp_path / "manifest.json").read_text())["math500"]["rows"] == 1


def test_every_named_set_has_a_hub_source() -> None:
    assert sorted(datahub.CATALOG) == sorted(data.BENCHMARKS.keys() - {"bbeh_mini", "math_train_deepscaler"})
    # lens.data knows which sets have a hub source without importing lens.datahub (which imports it).
    assert sorted(datahub.CATALOG) == sorted(name for name, spec in data.BENCHMARKS.items() if spec.hub)


def test_module_entry_point(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lens.data", "check", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2 and out.stderr.startswith(f"lens: error: {tmp_path}: no manifest.json")
    assert len(out.stderr.splitlines()) == 1


def test_every_listed_set_is_preparable_or_says_where_its_file_goes(fake_hub: list, tmp_path: Path, capsys) -> None:
    # Was: bbeh_mini and math_train_deepscaler were listed, `prepare` called them unknown, `prepare all` skipped them.
    chapter = (REPO / "docs" / "data.md").read_text()
    preparable = re.search(r"\| a named set \(`prepare` fetches it\) \| (.*) \|", chapter)
    by_file = re.search(r"\| a named set with no hub source[^|]*\| (.*) \|", chapter)
    assert preparable and by_file
    assert re.findall(r"`(\w+)`", preparable[1]) == list(datahub.CATALOG)
    assert re.findall(r"`(\w+)` \(", by_file[1]) == list(datahub.NO_HUB_SOURCE)
    assert sorted([*datahub.CATALOG, *datahub.NO_HUB_SOURCE]) == sorted(data.BENCHMARKS)
    assert exit_status(["prepare", "bbeh_mini", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bbeh_mini has no hub source" in err and "<DIR>/bbeh/mini.jsonl" in err and "unknown" not in err


def test_a_set_not_found_says_prepare_needs_the_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(data, "data_dirs", lambda configured=None: [("data.dir", tmp_path)])
    with pytest.raises(FileNotFoundError, match=r"prepare math500 --out DIR` \(needs network access"):
        data.find_data("math500")
    with pytest.raises(FileNotFoundError, match=r"no hub source: put its file at DIR/math_train_deepscaler/train"):
        data.find_data("math_train_deepscaler")


def test_offline_prepare_says_so_at_once(fake_hub: list, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys):
    # Was: 35 s of retries before "cannot reach the hub". Port 9 (discard) on this machine refuses at once.
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert exit_status(["prepare", "aime24", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "does not answer within 3 s: reading the local cache only" in err
    assert "(the hub is offline here and the dataset is not cached)" in err
