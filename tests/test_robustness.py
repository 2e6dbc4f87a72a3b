"""Tests of lens/robustness.py: the pure injection and paired-drop functions, and `python -m lens.robustness`
on the committed vartrack checkpoint (its learned trigger makes the drop large) and on a data benchmark.

Run: `.venv/bin/python -m pytest tests/test_robustness.py -q`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from shared_data import DATA_DIR
from tiny_models import word_level_llama

from lens import console, data
from lens import robustness as rb
from lens.tasks import vartrack


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: a spinning second OpenMP thread on a shared 2-core machine slows tiny models 100x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------------------------------
# inject
# ----------------------------------------------------------------------------------------------------


def test_inject_one_distractor_takes_every_gap_about_equally() -> None:
    """Two words have three gaps; over 300 seeds each gets its share, with the matching position."""
    outcomes = Counter(rb.inject("x y", ["!"], 1, seed) for seed in range(300))
    expected = {
        rb.Injection("! x y", (0,)),
        rb.Injection("x ! y", (1,)),
        rb.Injection("x y !", (2,)),
    }
    assert set(outcomes) == expected
    assert all(count > 60 for count in outcomes.values())  # 100 expected each; 60 is > 5 s.d. below


@pytest.mark.parametrize("seed", range(20))
def test_inject_positions_and_deletion_restore_the_text(seed: int) -> None:
    text = "Let $x$ be\nreal.  Find  x^2."
    out = rb.inject(text, ["!", "$", "%", "&"], 3, seed)
    words = out.text.split()
    assert len(words) == len(text.split()) + 3 and len(out.positions) == 3
    assert list(out.positions) == sorted(out.positions)
    assert all(words[p] in "!$%&" for p in out.positions)
    assert vartrack.delete_positions(out.text, out.positions) == " ".join(text.split())
    assert "\n" in out.text and "  " in out.text  # the original whitespace is kept
    assert rb.inject(text, ["!", "$", "%", "&"], 3, seed) == out  # pure: same inputs, same output


def test_inject_edge_cases() -> None:
    assert rb.inject("a b", ["!"], 0, 1) == rb.Injection("a b", ())
    assert rb.inject("", ["!"], 2, 1) == rb.Injection("! !", (0, 1))
    assert rb.inject("  a\n", ["!"], 1, 5).text in {"  ! a\n", "  a !\n"}  # leading/trailing space stays
    assert len({rb.inject("a b c d e f", ["!", "$"], 2, s) for s in range(10)}) > 1  # seeds differ
    with pytest.raises(ValueError, match="without whitespace"):
        rb.inject("a b", ["two words"], 1, 0)
    with pytest.raises(ValueError, match="k=-1"):
        rb.inject("a b", ["!"], -1, 0)
    with pytest.raises(ValueError, match="no distractors"):
        rb.inject("a b", [], 1, 0)


def test_injected_problems_keep_uid_answer_and_record_positions() -> None:
    problems = [data.Problem("p1", "one two three", "3"), data.Problem("p2", "four five", "9", {"k": 1})]
    out = rb.injected_problems(problems, ["!"], 2, seed=7)
    assert [(p.uid, p.answer) for p in out] == [("p1", "3"), ("p2", "9")]
    assert out[1].meta["k"] == 1 and out[1].meta["clean"] == "four five"
    for p in out:
        assert [p.problem.split()[i] for i in p.meta["noise_positions"]] == ["!", "!"]
    # Seeded by (seed, uid): a problem's injection does not depend on the others in the set.
    assert rb.injected_problems(problems[1:], ["!"], 2, seed=7)[0] == out[1]


# ----------------------------------------------------------------------------------------------------
# paired_drop
# ----------------------------------------------------------------------------------------------------


def test_paired_drop_hand_computed() -> None:
    drop, se = rb.paired_drop(torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0.0, 0.5, 0.5]))
    # d = [1, 0.5, 0]: mean 0.5, sample s.d. 0.5, s.e. 0.5 / sqrt(3)
    assert drop == pytest.approx(0.5) and se == pytest.approx(0.5 / math.sqrt(3))
    assert rb.paired_drop(torch.tensor([1.0]), torch.tensor([0.25])) == (0.75, None)
    with pytest.raises(ValueError, match="paired_drop"):
        rb.paired_drop(torch.tensor([1.0, 0.0]), torch.tensor([1.0]))


# ----------------------------------------------------------------------------------------------------
# The CLI
# ----------------------------------------------------------------------------------------------------


def _read(out: Path, name: str) -> tuple[dict, list[dict]]:
    results = json.loads((out / "robustness.json").read_text())
    records = [json.loads(line) for line in (out / "samples" / f"{name}.jsonl").read_text().splitlines()]
    return results, records


@pytest.mark.parametrize("source", ["noisy", "inject"])
def test_cli_builtin_task_shows_a_large_drop(tmp_path: Path, source: str) -> None:
    out = tmp_path / source
    argv = ["--model", str(vartrack.ASSETS_DIR), "--benchmarks", "vartrack", "--n", "2", "--limit", "12"]
    rb.main([*argv, "--max-tokens", "48", "--vartrack-source", source, "--out", str(out)])
    results, records = _read(out, "vartrack")
    row = results["benchmarks"]["vartrack"]
    assert row["source"] == ("task_noise" if source == "noisy" else "inject")
    assert (row["problems"], row["n"]) == (12, 2)
    assert row["clean"] > 0.8 and row["injected"] < 0.3
    assert row["drop"] == pytest.approx(row["clean"] - row["injected"]) and row["drop"] > 0.5
    assert row["drop_se"] is not None and 0 <= row["drop_se"] < 0.2
    assert results["config"]["distractors"] == list(vartrack.NOISE)
    assert len(records) == 12
    for r in records:
        words = r["injected_problem"].split()
        assert r["positions"] and all(words[p] in vartrack.NOISE for p in r["positions"])
        assert vartrack.delete_positions(r["injected_problem"], r["positions"]) == r["clean_problem"]
        assert len(r["clean_rewards"]) == len(r["injected_rewards"]) == len(r["injected_samples"]) == 2
    if source == "inject":
        assert all(len(r["positions"]) == 2 for r in records)  # --per-prompt default
    table = (out / "robustness.md").read_text()
    assert f"| vartrack | {row['source']} | 12 | 2 | {row['clean']:.4f} | {row['injected']:.4f} |" in table


def _tiny_model(path: Path) -> Path:
    return word_level_llama(path, ["!", "\\boxed{7}", "7"], hidden_size=16)


@pytest.mark.skipif(not (DATA_DIR / "math500" / "test.jsonl").is_file(), reason="shared data directory not found")
def test_cli_on_a_data_benchmark_injects_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "LINE_INTERVAL_S", 0.0)  # off a terminal (capsys): a plain line per batch
    model = _tiny_model(tmp_path / "model")
    out = tmp_path / "out"
    argv = ["--model", str(model), "--benchmarks", "math500,mmlu_pro", "--n", "1", "--limit", "2"]
    rb.main([*argv, "--max-tokens", "4", "--distractors", "!,zzz", "--per-prompt", "3", "--out", str(out)])
    err = capsys.readouterr().err  # progress per evaluation
    assert "math500 clean: 2/2 prompts" in err and "mmlu_pro injected: 2/2 prompts" in err and "\r" not in err
    results, records = _read(out, "math500")
    assert list(results["benchmarks"]) == ["math500", "mmlu_pro"]
    assert results["config"]["distractors"] == ["!", "zzz"] and results["config"]["per_prompt"] == 3
    originals = data.load_benchmark("math500", limit=2).problems
    assert [r["clean_problem"] for r in records] == [p.problem for p in originals]
    for r in records:
        words = r["injected_problem"].split()
        assert len(r["positions"]) == 3 and all(words[p] in ("!", "zzz") for p in r["positions"])
    assert results["average"]["drop"] == pytest.approx(sum(row["drop"] for row in results["benchmarks"].values()) / 2)


def test_cli_flag_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flags, message in [
        (["--distractors", " , "], "--distractors"),
        (["--per-prompt", "0"], "--per-prompt 0"),
        (["--benchmarks", "nope"], "['nope'] are neither known names nor files"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            rb.main(["--model", str(tmp_path), *flags])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
