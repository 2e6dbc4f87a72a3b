"""The detection gate of trial deletion (lens/trial_gate.py): which tasks it judges, its rows by hand, and the
command end to end on a perturbed `successor` reference.

Run: `python -m pytest tests/test_trial_gate.py -q`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import save_perturbed_reference

from lens import audit, checkpoint, gates, tasks, trial_gate


def _table(folder: Path, task: str, verdicts: dict[str, str], replicated: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.json").write_text(json.dumps({"verdicts": verdicts}))
    if replicated is not None:
        (folder / "replicated").mkdir(exist_ok=True)
        (folder / "replicated" / f"{task}_g3.json").write_text(json.dumps({"verdict": replicated}))


def test_judged_tasks_follow_the_plan_and_the_committed_tables(tmp_path: Path) -> None:
    passing = dict.fromkeys(("G1", "G2", "G3", "G4"), "PASS")
    _table(tmp_path, "successor", passing)
    _table(tmp_path, "keymap", passing, replicated="FAIL")
    _table(tmp_path, "successor_direct", passing)
    assert trial_gate.judged("successor", tmp_path)[0]
    assert not trial_gate.judged("keymap", tmp_path)[0]  # its replicated G3 fails
    assert not trial_gate.judged("successor_direct", tmp_path)[0]  # a control: never judged
    _table(tmp_path, "successor", {**passing, "G4": "FAIL"})
    ok, why = trial_gate.judged("successor", tmp_path)
    assert not ok and "fails G4" in why
    assert not trial_gate.judged("keymap", tmp_path / "none")[0]
    # today's committed tables: successor passes G1-G4; keymap fails G2-G4
    assert trial_gate.judged("successor")[0] and not trial_gate.judged("keymap")[0]


def _result(trial_at: list[int]) -> trial_gate.StageResult:
    return trial_gate.StageResult(
        deleted={"trial": trial_at, "Eq. 1 top-1": [2, 1, 0, 1], "random": [0, 0, 0, 0]},
        candidates=[[2, 1, 0], [1, 0, 2], [0, 2, 3], [2, 0, 3]],
        kept_success=[1.0, 0.5, 0.0, 0.25],
        noisy=[0.25, 1.0, 0.0, 0.75],
        rollouts=48,
    )


DISTRACTORS = [{1}, {0}, {2}, {1}]
ANSWERS = [{2}, {1}, {0}, {0}]


def test_stage_rows_by_hand() -> None:
    rows = trial_gate.stage_rows(gates.GRPO, _result([1, 0, 0, 2]), DISTRACTORS, ANSWERS, 0.5, 0, judge=True)
    got = {(r["prompts"], r["quantity"]): r for r in rows}
    # trial deletes the distractor on prompts 0 and 1 (2 of 4) and the answer token on prompt 2 (1 of 4)
    d, a = got["all (4)", "trial: distractor share"], got["all (4)", "trial: answer-token share"]
    assert (d["value"], d["threshold"], d["verdict"]) == (0.5, ">= 0.8", "FAIL")
    assert (a["value"], a["threshold"], a["verdict"]) == (0.25, "<= 0.05", "FAIL")
    # Eq. 1's top-1 hits the answer on prompts 0, 1 and 2; no bar on the rules beside trial
    e = got["all (4)", "Eq. 1 top-1: answer-token share"]
    assert e["value"] == 0.75 and "verdict" not in e
    assert got["all (4)", "random: distractor share"]["value"] == 0.25
    # the distractor is among the candidates of prompts 0, 1, 2 (prompt 3's are 2, 0, 3)
    assert got["all (4)", "trial: distractor among its candidates"]["value"] == 0.75
    assert got["all (4)", "trial: sampled success of the kept prompt (mean)"]["value"] == pytest.approx(0.4375)
    assert got["all (4)", "trial: extra rollouts per prompt"]["value"] == 12
    # noisy accuracy < 0.5: prompts 0 and 2, reported without a bar
    sub = got["noisy accuracy < 0.5 (2)", "trial: distractor share"]
    assert sub["value"] == 0.5 and "verdict" not in sub
    assert trial_gate.verdict(rows) == "FAIL"
    passing = trial_gate.stage_rows(gates.GRPO, _result([1, 0, 2, 1]), DISTRACTORS, ANSWERS, 0.5, 0, judge=True)
    assert trial_gate.verdict(passing) == "PASS"
    # a task that is not judged, and the warm start, carry no verdict
    reported = trial_gate.stage_rows(gates.GRPO, _result([1, 0, 2, 1]), DISTRACTORS, ANSWERS, 0.5, 0, judge=False)
    assert trial_gate.verdict(reported) == "NOT JUDGED"
    warm = trial_gate.stage_rows(gates.WARM, _result([1, 0, 2, 1]), DISTRACTORS, ANSWERS, 0.5, 0, judge=True)
    assert trial_gate.verdict(warm) == "NOT JUDGED"


def test_trial_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A finished "GRPO run" of 1 step whose policy is the reference slightly perturbed: the command reuses it.
    hf = tmp_path / "run" / checkpoint.CHECKPOINTS / "step_00000001" / "hf"
    save_perturbed_reference(tasks.get("successor"), hf)
    (hf.parent / checkpoint.META).write_text(json.dumps({"step": 1}))
    out = tmp_path / "out"
    argv = ["trial", "--task", "successor", "--problems", "5", "--samples", "2", "--rollouts", "2", "--steps", "1"]
    argv += ["--config", "configs/cpu_successor.yaml"]
    report = audit.main([*argv, "--run-dir", str(tmp_path / "run"), "--out", str(out)])
    assert capsys.readouterr().out.endswith((out / "successor.md").read_text())
    saved = json.loads((out / "successor.json").read_text())
    assert saved["verdict"] == report["verdict"] in ("PASS", "FAIL") and saved["settings"]["judged"]
    assert saved["settings"]["command"] == (
        "python -m lens.audit trial --task successor --problems 5 --samples 2 --rollouts 2 --steps 1 "
        "--config configs/cpu_successor.yaml"
    )
    got = {(r["stage"], r["prompts"], r["quantity"]): r["value"] for r in saved["rows"]}
    for stage in (gates.GRPO, gates.WARM):
        assert got[stage, "all (5)", "trial: extra rollouts per prompt"] == 3 * 2
        for rule in trial_gate.RULES:
            assert 0 <= got[stage, "all (5)", f"{rule}: distractor share"] <= 1
    # at the warm start Eq. 1 is zero: trial's candidates are the first three span tokens
    warm_share = got[gates.WARM, "all (5)", "trial: distractor among its candidates"]
    noisy, _ = gates.task_prompts("successor", tasks.get("successor").load_tokenizer(), 5)
    assert warm_share == pytest.approx(sum(min(p.noise) < 3 for p in noisy) / 5)
