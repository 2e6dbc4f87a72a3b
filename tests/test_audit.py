"""Tests of lens.audit: detection metrics by hand, HTML escaping, end-to-end audit/detect runs, browser render."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import save_perturbed_reference

from lens import audit, tasks
from lens.tasks import vartrack

REF = str(vartrack.ASSETS_DIR)
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A copy of the reference with slightly perturbed weights, so interference scores are non-zero."""
    return str(save_perturbed_reference(vartrack.TASK, tmp_path_factory.mktemp("policy")))


@pytest.fixture(scope="module")
def audit_out(policy_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit")
    argv = ["--policy", policy_dir, "--ref", REF, "--data", "vartrack", "--limit", "4", "--gamma", "0.1"]
    audit.main([*argv, "--accuracy", "--n", "2", "--out", str(out)])
    return out


def test_roc_auc_hand_computed() -> None:
    # positives {0.9, 0.5} vs negatives {0.5, 0.1}: 1 + 1 + 0.5 (tie) + 1 = 3.5 of 4 pairs
    assert audit.roc_auc([0.9, 0.5, 0.5, 0.1], [True, False, True, False]) == pytest.approx(0.875)
    assert audit.roc_auc([1.0, 1.0, 1.0], [True, False, False]) == pytest.approx(0.5)
    assert audit.roc_auc([3.0, 2.0, 1.0], [True, False, False]) == 1.0
    assert audit.roc_auc([1.0, 2.0, 3.0], [True, False, False]) == 0.0
    assert math.isnan(audit.roc_auc([1.0, 2.0], [False, False]))
    with pytest.raises(ValueError, match="2 scores vs 1 labels"):
        audit.roc_auc([1.0, 2.0], [True])


def test_precision_at_k_hand_computed() -> None:
    assert audit.precision_at_k([3.0, 2.0, 1.0, 0.0], [True, False, True, False]) == pytest.approx(0.5)
    assert audit.precision_at_k([0.0, 3.0, 2.0, 1.0], [False, True, True, False]) == 1.0
    # k = 1 and three items tie at the top, one of them positive: expected precision 1/3
    assert audit.precision_at_k([1.0, 1.0, 1.0, 0.0], [True, False, False, False]) == pytest.approx(1 / 3)
    # one clear hit above, then 1 slot among 2 tied items of which 1 is positive: (1 + 0.5) / 2
    assert audit.precision_at_k([5.0, 1.0, 1.0, 0.0], [True, True, False, False]) == pytest.approx(0.75)
    assert math.isnan(audit.precision_at_k([1.0], [False]))


def test_top_tokens_counts() -> None:
    rows = [{"tokens": ["a", "!", "b"], "selected": [1]}, {"tokens": ["!", "b", "c"], "selected": [0, 1]}]
    assert audit.top_tokens(rows) == [{"token": "!", "count": 2}, {"token": "b", "count": 1}]


def test_html_escapes_untrusted_text_and_shades_by_score() -> None:
    row = {
        "uid": 'u<1>&"',
        "tokens": ["<script>alert(1)</script>", "ok"],
        "scores": [2.0, 1.0],
        "selected": [0],
        "purified_text": "<img src=x onerror=alert(1)>",
    }
    page = audit.html_report([row], "t<i>")
    assert "<script>" not in page and "<img" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "u&lt;1&gt;&amp;" in page
    assert "rgba(220,40,40,1.000);outline" in page  # max score: full alpha, deleted: outlined
    assert "rgba(220,40,40,0.500)" in page and 'title="1"' in page


def test_audit_end_to_end(audit_out: Path) -> None:
    rows = [json.loads(line) for line in (audit_out / "prompts.jsonl").read_text().splitlines()]
    problems = vartrack.eval_sets(4)["noisy"]
    assert [r["uid"] for r in rows] == [p.uid for p in problems]
    for row, problem in zip(rows, problems, strict=True):
        assert row["tokens"] == problem.problem.split()
        assert len(row["ids"]) == len(row["scores"]) == len(row["tokens"])
        k = math.ceil(0.1 * len(row["tokens"]))
        assert len(row["selected"]) == k and all(0 <= j < len(row["tokens"]) for j in row["selected"])
        top = sorted(row["scores"], reverse=True)[k - 1]
        assert all(row["scores"][j] >= top for j in row["selected"])  # the k best-scored tokens go
        assert row["purified_text"] == vartrack.delete_positions(problem.problem, row["selected"])
        assert 0.0 <= row["accuracy_before"] <= 1.0 and 0.0 <= row["accuracy_after"] <= 1.0
    top = json.loads((audit_out / "top_tokens.json").read_text())
    assert sum(t["count"] for t in top) == sum(len(r["selected"]) for r in rows)
    assert "| count |" in (audit_out / "top_tokens.md").read_text()
    page = (audit_out / "index.html").read_text()
    assert page.count('class="p"') == 4 and "outline:2px" in page


def test_audit_jsonl_data_is_escaped(policy_dir: str, tmp_path: Path) -> None:
    src = tmp_path / "probs.jsonl"
    src.write_text(json.dumps({"uid": "x<1>", "problem": "a = 1 ; <b>bold</b> ; ? a", "answer": "1"}) + "\n")
    audit.main(
        ["--policy", policy_dir, "--ref", REF, "--data", str(src), "--gamma", "0.2", "--out", str(tmp_path / "o")]
    )
    rows = [json.loads(line) for line in (tmp_path / "o" / "prompts.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["uid"] == "x<1>" and rows[0]["selected"]
    page = (tmp_path / "o" / "index.html").read_text()
    assert "x&lt;1&gt;" in page and "<b>" not in page


def user_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `audit.main(argv)` prints for a user error (exit 2)."""
    with pytest.raises(SystemExit) as exit_info:
        audit.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("lens: error: ")
    return err


def test_audit_rejects_bad_flags(policy_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--policy", policy_dir, "--ref", REF, "--out", str(tmp_path)]
    assert "nope.jsonl: no such data file" in user_error([*base, "--data", "nope.jsonl"], capsys)
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"problem": "a = 1 ; ? a", "answer": "1"}) + "\n")
    err = user_error([*base, "--data", str(src), "--accuracy"], capsys)
    assert f"--accuracy and --scorer grad need --data {'|'.join(tasks.NAMES)} (got --data" in err
    assert "--gamma" in user_error([*base, "--data", "vartrack", "--gamma", "1.5"], capsys)
    assert "unknown ['bogus']" in user_error(["detect", *base, "--scorers", "interference,bogus"], capsys)


def test_detect_end_to_end(policy_dir: str, tmp_path: Path) -> None:
    argv = ["detect", "--policy", policy_dir, "--ref", REF, "--limit", "3", "--out", str(tmp_path)]
    results = audit.main([*argv, "--scorers", "interference,random,grad"])
    report = json.loads((tmp_path / "detection.json").read_text())
    assert [c["label"] for c in report["checkpoints"]] == [policy_dir] and report["task"] == "vartrack"
    assert list(report["checkpoints"][0]["scorers"]) == ["interference", "random", "grad"]
    problems = vartrack.eval_sets(3)["noisy"]
    for m in results[policy_dir].values():
        assert m["prompts"] == 3 and m["distractors"] == sum(len(p.meta["noise_positions"]) for p in problems)
        assert m["tokens"] == sum(len(p.problem.split()) for p in problems)
        assert 0.0 <= m["auc"] <= 1.0 and 0.0 <= m["precision_at_k"] <= 1.0
    assert "| interference |" in (tmp_path / "detection.md").read_text()


def test_index_html_renders_in_chromium(audit_out: Path, tmp_path: Path) -> None:
    if not (Path(CHROMIUM).is_file() or shutil.which("chromium")):
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: apt-get install chromium")
        pytest.skip("chromium is not installed")
    from PIL import Image

    binary = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    png = tmp_path / "shot.png"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={png}",
        "--window-size=1200,900",
    ]
    subprocess.run([binary, *flags, (audit_out / "index.html").resolve().as_uri()], timeout=60, capture_output=True)
    assert png.is_file(), "chromium wrote no screenshot"
    image = Image.open(png).convert("RGB")
    assert image.size == (1200, 900)
    pixels = torch.from_numpy(np.asarray(image).reshape(-1, 3).copy())
    assert float(pixels.float().var()) > 0
    assert len(torch.unique(pixels, dim=0)) >= 5  # text, shading and outlines: several distinct colours


def _fake_run(root: Path, policy_dir: str, steps: tuple[int, ...]) -> Path:
    """A run directory whose checkpoints hold `policy_dir` as hf/, plus an incomplete one (no meta.json)."""
    for step in steps:
        ckpt = root / "checkpoints" / f"step_{step:08d}"
        shutil.copytree(policy_dir, ckpt / "hf")
        (ckpt / "meta.json").write_text(json.dumps({"step": step}))
    shutil.copytree(policy_dir, root / "checkpoints" / ".tmp-step_00000030" / "hf")
    return root


def test_detect_reports_a_table_per_checkpoint_of_a_run(policy_dir: str, tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run", policy_dir, (10, 5))
    out = tmp_path / "out"
    argv = ["detect", "--run", str(run), "--ref", REF, "--limit", "2", "--scorers", "interference,surprisal"]
    results = audit.main([*argv, "--out", str(out)])
    assert list(results) == ["step 0", "step 5", "step 10"]  # step order, the incomplete save skipped
    # Step 0 is the reference itself: Eq. 1 is identically 0, so every token ties (AUC 1/2) ...
    assert results["step 0"]["interference"]["auc"] == 0.5
    # ... while surprisal does not depend on the policy at all.
    assert results["step 0"]["surprisal"] == results["step 5"]["surprisal"] == results["step 10"]["surprisal"]
    assert results["step 5"]["interference"] == results["step 10"]["interference"]  # the same weights
    assert results["step 5"]["interference"]["auc"] != 0.5
    report = json.loads((out / "detection.json").read_text())
    assert [c["policy"] for c in report["checkpoints"]] == [
        REF,
        str(run / "checkpoints" / "step_00000005" / "hf"),
        str(run / "checkpoints" / "step_00000010" / "hf"),
    ]
    page = (out / "detection.md").read_text()
    assert page.count("| scorer |") == 3 and "## step 10" in page
    assert "## AUC (pooled) by checkpoint" in page and "| step 0 | 0.500 |" in page


def test_detect_takes_several_policies_and_rejects_an_empty_run(
    policy_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["detect", "--ref", REF, "--limit", "2", "--scorers", "random", "--out", str(tmp_path)]
    results = audit.main([*base, "--policy", REF, policy_dir])
    assert list(results) == [REF, policy_dir]
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    capsys.readouterr()
    assert "no complete checkpoint" in user_error([*base, "--run", str(tmp_path / "empty")], capsys)
    # one source of policies, not both
    assert "not allowed with" in user_error([*base, "--run", str(tmp_path / "empty"), "--policy", policy_dir], capsys)


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import families

    root = tmp_path_factory.mktemp("families")
    corpus = families._corpus()
    return {f: families.build(f, root / f, corpus) for f in families.FAMILIES}


def _audit_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lens.audit", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("family", ["qwen2.5", "qwen3", "llama3.2"])
def test_detect_on_a_run_of_every_family(family: str, family_models: dict[str, Path], tmp_path: Path) -> None:
    """Qwen tokenizers have no BOS (bos_token_id None reached the model as a token id: TypeError), and a
    byte-level BPE may split the task's words: the distractor labels follow every token of a word."""
    model = family_models[family]
    step = tmp_path / "run" / "checkpoints" / "step_00000010"
    step.mkdir(parents=True)
    (step / "hf").symlink_to(model, target_is_directory=True)
    (step / "meta.json").write_text(json.dumps({"step": 10}))
    argv = ["detect", "--run", str(tmp_path / "run"), "--ref", str(model), "--task", "vartrack", "--limit", "3"]
    done = _audit_cli(*argv, "--scorers", "interference,random", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "detection.json").read_text())
    metrics = report["checkpoints"][1]["scorers"]["random"]
    # Progress over 2 checkpoints x 2 scorers; piped, a plain line (no carriage returns) at the end.
    assert "detect: 4/4 scores (100%)" in done.stderr and "\r" not in done.stderr
    assert metrics["distractors"] >= 3 and metrics["tokens"] > metrics["distractors"]


def test_task_prompts_with_the_task_tokenizer_are_the_task_prompts() -> None:
    tokenizer = audit.load_tokenizer(REF)
    for p in audit.task_prompts("vartrack", tokenizer, 5):
        problem = tokenizer.decode(p.prompt.ids[1:-1])
        assert p.prompt.ids == vartrack.prompt_ids(tokenizer, problem)
        assert p.prompt.span == (1, len(p.prompt.ids) - 1)


def test_html_shows_readable_text_and_a_legend(family_models: dict[str, Path], tmp_path: Path) -> None:
    model = str(family_models["qwen3"])
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"problem": "What is the sum of 2 and 3?\nPut it in a box.", "answer": "5"}) + "\n")
    done = _audit_cli("--policy", model, "--ref", model, "--data", str(src), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "audit: 2/2 stages (100%)" in done.stderr  # progress over the stages (piped: a plain line)
    page = (tmp_path / "out" / "index.html").read_text()
    assert "Ġ" not in page and "Ċ" not in page
    assert '"> the</span>' in page and '">\n</span>' in page
    assert "How to read this page" in page and "Blue outline" in page and "darkest red" in page
    rows = [json.loads(line) for line in (tmp_path / "out" / "prompts.jsonl").read_text().splitlines()]
    assert "".join(rows[0]["tokens"]).startswith("What is the sum of 2 and 3?\n")


def test_a_malformed_data_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a", "answer": "1"}\n{not json\n')
    done = _audit_cli("--policy", REF, "--ref", REF, "--data", str(bad), "--out", str(tmp_path / "out"))
    assert (
        done.returncode == 2
        and done.stderr
        == f"lens: error: {bad}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)\n"
    )


def test_help_lists_the_subcommands() -> None:
    done = _audit_cli("--help")
    assert done.returncode == 0 and "detect" in done.stdout and "gates" in done.stdout
