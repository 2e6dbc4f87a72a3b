"""bench/null_profile.py: the per-null tables by hand, and the tool on a committed warm start."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("null_profile", REPO / "bench" / "null_profile.py")
null_profile = importlib.util.module_from_spec(SPEC)
sys.modules["null_profile"] = null_profile
SPEC.loader.exec_module(null_profile)


def test_a_low_scoring_template_token_moves_the_pooled_auc_and_not_the_matched_one():
    # Two prompts of three tokens: a marker at position 0 (surprisal 0, never moved), a distractor and an ordinary
    # token of the same surprisal bin. The distractor outscores only the marker: pooled AUC (2 wins + 2 ties/2 of
    # 4 pairs) = 0.75, matched (only the ordinary token shares its bin) = 0.5.
    labels = torch.tensor([False, True, False, False, True, False])
    positions = torch.tensor([0, 1, 2, 0, 1, 2])
    surprisal = torch.tensor([0.0, 1.1, 1.2, 0.0, 1.1, 1.2])
    score = torch.tensor([0.0, 0.3, 0.3, 0.0, 0.3, 0.3])
    out = null_profile.profile(labels, positions, surprisal, {"random 1e-3": [score, score * 2]})
    row = out["nulls"]["random 1e-3"]
    assert row["pooled_auc"] == [0.75, 0.75] and row["matched_auc"] == [0.5, 0.5]
    assert [r["position"] for r in out["by_position"]] == [0, 2]  # position 1 holds only distractors
    assert out["by_position"][0]["p_ref"] == 1.0 and out["by_position"][1]["median"]["random 1e-3"] == pytest.approx(
        0.3
    )
    assert out["p_distractor"] == pytest.approx(torch.exp(torch.tensor(-1.1)).item())


def test_the_seed_ranges_parse():
    assert null_profile.seeds_arg("100-103") == [100, 101, 102, 103]
    assert null_profile.seeds_arg("1,4") == [1, 4]


def test_the_tool_on_the_committed_window_warm_start(tmp_path, capsys):
    args = ["--task", "window", "--config", "configs/cpu_window.yaml", "--warm-start", "lens/tasks/assets/window"]
    null_profile.main([*args, "--seeds", "1-2", "--problems", "8", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "null_profile" / "window.json").read_text())
    rows = saved["warm_starts"]["lens/tasks/assets/window"]["nulls"]
    assert set(rows) == {"weight decay step", "random 1e-3", "T = 1.05"}
    assert len(rows["random 1e-3"]["pooled_auc"]) == 2 and len(rows["T = 1.05"]["pooled_auc"]) == 1
    text = (tmp_path / "null_profile" / "window.md").read_text()
    assert text == capsys.readouterr().out and "| random 1e-3 |" in text
