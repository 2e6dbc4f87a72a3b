"""Tests of lens/eval.py: the pass@k estimator, answer extraction, the core `evaluate_set` (and the trainer's
`evaluate` on top of it), and `python -m lens.eval` end to end.

The end-to-end runs use (a) a tiny random Qwen2 with a local word-level tokenizer on every benchmark of the
shared data directory (skipped when it is absent), and (b) the committed vartrack checkpoint, whose clean and
noisy accuracies are known (~0.97 and ~0.005).

Run: `.venv/bin/python -m pytest tests/test_eval.py -q`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from shared_data import DATA_DIR
from tiny_models import word_level_llama

from lens import data
from lens import eval as ev
from lens.reward import REASONS, Verifier
from lens.rollout import make_engine
from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
ALL_BENCHMARKS = "math500,aime24,aime25,amc23,minerva_math,olympiadbench,gaokao2023en,mmlu_pro,bbeh,supergpqa_sample300"
# Words the random model can emit, so some samples carry an answer each verifier can extract.
ANSWER_WORDS = ["\\boxed{A}", "\\boxed{7}", "\\boxed{yes}", "answer", "is", "B", "7", "#", "3", "the"]
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "math500" / "test.jsonl").is_file(), reason="shared data directory not found"
)


def build_tiny_model(path: Path) -> Path:
    """A random Llama (hidden 32, 1 layer, large init so its samples vary) over ANSWER_WORDS, saved to `path`."""
    return word_level_llama(path, ANSWER_WORDS, hidden_size=32, tie_word_embeddings=True, init_std=0.5)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: these models are tiny, and on a shared 2-core machine a spinning second OpenMP
    thread makes a 0.1 s generate call take 10-20 s."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny_eval_model"))


@pytest.fixture(scope="module")
def vartrack_engine():
    return make_engine("hf", str(vartrack.ASSETS_DIR), seed=0)


# ----------------------------------------------------------------------------------------------------
# pass@k
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),  # c = 0: never
        (5, 0, 5, 0.0),  # c = 0, k = n
        (5, 5, 3, 1.0),  # c = n: always
        (5, 2, 4, 1.0),  # k > n - c: every 4-subset of 5 holds one of the 2 correct
        (5, 1, 5, 1.0),  # k = n with one correct
        (10, 3, 1, 0.3),  # pass@1 = c / n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (16, 4, 4, 1325 / 1820),  # 1 - C(12,4)/C(16,4) = 1 - 495/1820
        (1000, 1, 500, 0.5),  # 1 - C(999,500)/C(1000,500) = 1 - 500/1000: huge binomials, no overflow
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert ev.pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_pass_at_k_matches_exact_binomials_at_scale() -> None:
    for n, c, k in [(2000, 10, 100), (257, 13, 64), (64, 63, 1)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert ev.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_bad_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        ev.pass_at_k(n, c, k)
    with pytest.raises(TypeError):
        ev.pass_at_k(4, True, 1)


# ----------------------------------------------------------------------------------------------------
# Answer extraction and result summaries
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("math", "so \\boxed{3} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the LAST boxed
        ("math", "no box, the answer is 12.", "12"),
        ("math", "nothing here", None),
        ("choice", "I pick \\boxed{(c)}", "C"),
        ("choice", "The answer is B", "B"),
        ("text", "\\boxed{yes, no}", "yes, no"),
        ("text", "Answer: football", "football"),
        ("text", "no marker", None),
        ("vartrack", "g = 7 ; a = 7 - 7 = 0 ; #  0 # 5", "0"),  # the first `#` only
        ("vartrack", "no hash", None),
        ("exact", "  42 \n", "42"),
    ],
)
def test_extract_answer(kind: str, text: str, expected: str | None) -> None:
    assert ev.extract_answer(kind, text) == expected


def test_extract_answer_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind='code'"):
        ev.extract_answer("code", "x")


def _result(rewards: list[list[float]], reasons: list[list[str]]) -> ev.EvalResult:
    p, n = len(rewards), len(rewards[0])
    return ev.EvalResult(
        rewards=torch.tensor(rewards, dtype=torch.float32),
        lengths=torch.tensor([[2 * i + j for j in range(n)] for i in range(p)]),
        texts=[["t"] * n for _ in range(p)],
        reasons=reasons,
        finish_reasons=[["stop"] * (n - 1) + ["length"] for _ in range(p)],
        seconds=1.5,
    )


def test_summarize_hand_computed() -> None:
    result = _result([[1, 0], [0, 0]], [["correct", "wrong"], ["no_answer", "wrong"]])
    row = ev.summarize(result, [1, 2, 4])
    assert row["pass@1"] == row["avg@n"] == 0.25
    assert row["pass@k"] == {"1": 0.25, "2": 0.5}  # k=4 > n is left out
    assert row["verdicts"] == {**dict.fromkeys(REASONS, 0), "correct": 1, "wrong": 2, "no_answer": 1}
    assert (row["problems"], row["samples"], row["n"]) == (2, 4, 2)
    assert row["mean_response_tokens"] == 1.5  # lengths [[0, 1], [2, 3]]
    assert row["truncated"] == 0.5
    other = ev.summarize(_result([[1, 1, 1, 1]], [["correct"] * 4]), [1, 2, 4])
    avg = ev.average_row({"a": row, "b": other})
    assert avg["pass@1"] == pytest.approx(0.625)
    assert avg["pass@k"] == {"1": pytest.approx(0.625), "2": pytest.approx(0.75)}  # only the k both sets have
    assert (avg["problems"], avg["samples"], avg["verdicts"]["correct"]) == (3, 8, 5)


# ----------------------------------------------------------------------------------------------------
# The core on the committed checkpoint
# ----------------------------------------------------------------------------------------------------


def _vartrack_prompts(name: str, limit: int) -> tuple[list[list[int]], list[str]]:
    tokenizer = vartrack.load_tokenizer()
    problems = vartrack.eval_sets(limit, seed=0)[name]
    rendered, _ = data.render_all(problems, tokenizer, prompt="{problem}")
    return [r.ids for r in rendered], [p.answer for p in problems]


def test_evaluate_matches_the_old_one_call_evaluation(vartrack_engine) -> None:
    """`evaluate` (trainer) = mean of `evaluate_set` = the pre-refactor code: one generate call, mean reward."""
    tokenizer = vartrack.load_tokenizer()
    verifier = Verifier("vartrack")
    sampling = ev.eval_sampling(temperature=1.0, top_p=1.0, max_tokens=48, seed=3)
    assert sampling.seed == 3 + 12345  # the trainer's seed rule
    for name in ("clean", "noisy"):
        prompts, answers = _vartrack_prompts(name, 6)
        out = vartrack_engine.generate(prompts, 3, sampling)
        texts = tokenizer.batch_decode(out.tokens, skip_special_tokens=True)
        old = float(verifier.score(texts, [a for a in answers for _ in range(3)]).rewards.mean())
        full = ev.evaluate_set(vartrack_engine, tokenizer, verifier, prompts, answers, n=3, sampling=sampling)
        batched = ev.evaluate_set(
            vartrack_engine, tokenizer, verifier, prompts, answers, n=3, sampling=sampling, batch_size=4
        )
        assert full.accuracy == old == float(full.rewards.mean())
        assert full.rewards.shape == (6, 3) and full.lengths.shape == (6, 3)
        assert [t for row in full.texts for t in row] == texts
        # Batches of 4 prompts move the seed by their first row: the very same samples.
        assert batched.texts == full.texts and torch.equal(batched.rewards, full.rewards)


def test_evaluate_set_samples_do_not_depend_on_the_batch_size(tiny_model: Path) -> None:
    """A random model samples differently from every seed, so a batch that reused another's seeds would show."""
    from transformers import AutoTokenizer

    engine = make_engine("hf", str(tiny_model), seed=0)
    tokenizer, verifier = AutoTokenizer.from_pretrained(tiny_model), Verifier("exact")
    prompts = [[3 + (i * 7 + j) % 10 for j in range(2 + i % 3)] for i in range(5)]
    answers = ["7"] * 5
    sampling = ev.eval_sampling(temperature=1.0, top_p=1.0, max_tokens=6, seed=0)
    runs = [
        ev.evaluate_set(engine, tokenizer, verifier, prompts, answers, n=3, sampling=sampling, batch_size=b)
        for b in (None, 2, 1)
    ]
    assert runs[0].texts == runs[1].texts == runs[2].texts
    assert len({t for row in runs[0].texts for t in row}) > 5  # the samples really differ from each other


def test_evaluate_set_rejects_bad_input(vartrack_engine) -> None:
    tokenizer, verifier = vartrack.load_tokenizer(), Verifier("vartrack")
    sampling = ev.eval_sampling(temperature=1.0, top_p=1.0, max_tokens=4, seed=0)
    with pytest.raises(ValueError, match="as many answers"):
        ev.evaluate_set(vartrack_engine, tokenizer, verifier, [[1, 4]], [], n=1, sampling=sampling)
    with pytest.raises(ValueError, match="batch_size=0"):
        ev.evaluate_set(vartrack_engine, tokenizer, verifier, [[1, 4]], ["1"], n=1, sampling=sampling, batch_size=0)


# ----------------------------------------------------------------------------------------------------
# The CLI
# ----------------------------------------------------------------------------------------------------


@needs_data
def test_cli_on_every_benchmark_with_a_tiny_model(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--model", str(tiny_model), "--benchmarks", ALL_BENCHMARKS, "--limit", "2", "--n", "2"]
    results = ev.main([*argv, "--max-tokens", "8", "--engine", "hf", "--device", "cpu", "--out", str(out)])
    names = ALL_BENCHMARKS.split(",")
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    assert list(on_disk["benchmarks"]) == names
    config = on_disk["config"]
    assert config["model"] == str(tiny_model.resolve()) and config["engine"] == "hf" and config["n"] == 2
    assert config["sampling"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 8,
        "seed": 12345,
        "stop_token_ids": [],
    }
    assert config["date"] and "lens_commit" in config
    for name in names:
        row = on_disk["benchmarks"][name]
        assert row["kind"] == data.BENCHMARKS[name].kind
        assert (row["problems"], row["samples"], row["n"]) == (2, 4, 2)
        assert set(row["pass@k"]) == {"1", "2"} and row["pass@k"]["1"] == row["pass@1"] == row["avg@n"]
        assert sum(row["verdicts"].values()) == 4 and set(row["verdicts"]) == set(REASONS)
        assert 0 < row["mean_response_tokens"] <= 8 and row["seconds"] > 0
        records = [json.loads(line) for line in (out / "samples" / f"{name}.jsonl").read_text().splitlines()]
        expected = data.load_benchmark(name, limit=2).problems
        assert [r["uid"] for r in records] == [p.uid for p in expected]
        assert [r["answer"] for r in records] == [p.answer for p in expected]
        for r in records:
            assert len(r["samples"]) == len(r["rewards"]) == len(r["reasons"]) == 2
            assert r["extracted"] == [ev.extract_answer(row["kind"], s) for s in r["samples"]]
            assert all(
                (reward == 1.0) == (reason == "correct")
                for reward, reason in zip(r["rewards"], r["reasons"], strict=True)
            )
            assert r["problem"] in r["prompt"] or "<unk>" in r["prompt"]
    avg = on_disk["average"]
    assert avg["pass@1"] == pytest.approx(sum(on_disk["benchmarks"][b]["pass@1"] for b in names) / len(names))
    assert avg["problems"] == 20
    lines = (out / "results.md").read_text().splitlines()
    table = [line for line in lines if line.startswith("| ")]
    assert table[0].startswith("| benchmark | n | problems | avg@n (pass@1) | pass@2 |")
    assert [line.split(" | ")[0].removeprefix("| ") for line in table[1:]] == [*names, "**average**"]


def test_cli_on_the_builtin_task_via_python_m(tmp_path: Path) -> None:
    """`python -m lens.eval` on the committed checkpoint: clean avg@n high, noisy low (the learned trigger)."""
    out = tmp_path / "vt"
    cmd = [sys.executable, "-m", "lens.eval", "--model", str(vartrack.ASSETS_DIR), "--benchmarks", "vartrack"]
    cmd += ["--n", "2", "--limit", "12", "--max-tokens", "48", "--k", "1,2", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())["benchmarks"]
    assert list(rows) == ["vartrack_clean", "vartrack_noisy"]
    assert rows["vartrack_clean"]["avg@n"] > 0.8
    assert rows["vartrack_noisy"]["avg@n"] < 0.3
    assert rows["vartrack_noisy"]["verdicts"]["wrong"] > 0  # off by one, not unanswered
    records = [json.loads(line) for line in (out / "samples" / "vartrack_noisy.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(len(e) == 1 and e.isdigit() for r in records for e in r["extracted"])
    assert "| vartrack_clean | 2 | 12 |" in (out / "results.md").read_text()


def test_paper_protocol_and_k_defaults(tmp_path: Path) -> None:
    args = ev.parse_args(["--model", str(tmp_path), "--paper-protocol", "--n", "2", "--benchmarks", "aime24,math500"])
    assert [ev.samples_per_set(args, b) for b in ("aime24", "amc23", "aime25", "math500")] == [16, 16, 16, 2]
    assert ev.ks_for(args, 16) == [1, 2, 4, 8, 16] and ev.ks_for(args, 2) == [1, 2] and ev.ks_for(args, 6) == [1, 2, 4]
    args = ev.parse_args(["--model", str(tmp_path), "--n", "8", "--k", "8,1,4"])
    assert args.benchmarks == list(ev.MATH_BENCHMARKS) and args.k == [1, 4, 8] and ev.ks_for(args, 4) == [1, 4]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--benchmarks", "math500,gsm8k"], "['gsm8k'] are neither known names nor files; known: math500, aime24"),
        (["--n", "2", "--k", "4"], "--k 4 > the largest n (2)"),
        (["--n", "0"], "expected an int >= 1"),
        (["--top-p", "0"], "top_p must be in"),
    ],
)
def test_cli_flag_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        ev.main(["--model", str(tmp_path), *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_missing_model_and_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ev.main(["--model", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert f"--model={tmp_path / 'nope'}: model path {tmp_path / 'nope'} does not exist" in err
    model = str(vartrack.ASSETS_DIR)
    with pytest.raises(SystemExit) as exit_info:
        ev.main(
            ["--model", model, "--benchmarks", "openr1_math_46k", "--data-dir", str(tmp_path), "--out", str(tmp_path)]
        )
    message = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert str(tmp_path / "openr1_math_46k" / "train.jsonl") in message and "LENS_DATA_DIR" in message
    with pytest.raises(SystemExit) as exit_info:
        ev.main(
            [
                "--model",
                model,
                "--benchmarks",
                "vartrack",
                "--limit",
                "2",
                "--max-prompt-len",
                "3",
                "--out",
                str(tmp_path),
            ]
        )
    assert "vartrack_clean: no prompt fits --max-prompt-len=3" in capsys.readouterr().err


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_model_folder_without_a_tokenizer_is_a_one_line_error(tmp_path, capsys, model_type) -> None:
    # Was: a Llama folder without tokenizer files ended in HF's "You need to have sentencepiece or tiktoken
    # installed" (both were installed: the tokenizer was missing), and a Qwen2 one evaluated with an empty
    # tokenizer; a run directory without a checkpoint and its checkpoints/ folder failed like the first.
    plain = tmp_path / "weights_only"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": model_type}))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for folder, hint in ((plain, "tokenizer.save_pretrained"), (run, "no hf/ export"), (run / "checkpoints", "hf/")):
        with pytest.raises(SystemExit) as exit_info:
            ev.main(["--model", str(folder), "--benchmarks", "vartrack", "--limit", "1", "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert f"--model={folder}: no tokenizer in {folder} (none of tokenizer.json" in err and hint in err, err


def test_evaluating_step_20_after_step_40_keeps_both_results(tmp_path: Path) -> None:
    """Every trainer export is named `hf`: the default output is named by the checkpoint's run and step, and
    an output that holds results is refused in one line (issue 26.5)."""
    run = tmp_path / "runs" / "lens_s0" / "checkpoints"
    for step in (40, 20):
        (run / f"step_{step:08d}").mkdir(parents=True)
        (run / f"step_{step:08d}" / "hf").symlink_to(vartrack.ASSETS_DIR, target_is_directory=True)
        (run / f"step_{step:08d}" / "meta.json").write_text(json.dumps({"step": step}))

    def evaluate(step: int) -> subprocess.CompletedProcess:
        model = run / f"step_{step:08d}" / "hf"
        argv = ["--model", str(model), "--benchmarks", "vartrack", "--limit", "2", "--n", "1", "--max-tokens", "4"]
        cmd = [sys.executable, "-m", "lens.eval", *argv, "--engine", "hf", "--device", "cpu"]
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)

    first = evaluate(40)
    assert first.returncode == 0 and evaluate(20).returncode == 0
    # Piped: no bar drawn into the output (a plain line only for a set that takes half a minute), the set's line.
    assert "\r" not in first.stderr and "vartrack_clean: avg@1" in first.stdout
    results = {step: tmp_path / "runs" / "eval" / f"lens_s0_step{step}" / "results.json" for step in (40, 20)}
    step_40 = results[40].read_text()
    assert json.loads(results[20].read_text())["benchmarks"] and json.loads(step_40)["benchmarks"]
    again = evaluate(40)
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert "lens_s0_step40 already holds results" in again.stderr and "--overwrite" in again.stderr
    assert results[40].read_text() == step_40


def test_a_run_is_evaluated_as_its_trainer_evaluated_it(tmp_path: Path) -> None:
    # Was: `lens.eval --model <run's checkpoint>` scored 200 problems per set with its own n, seed and length,
    # other numbers than the run logged for the same checkpoint; a run directory as --model failed in transformers.
    from lens import train  # the trainer, only for this test's run

    run = tmp_path / "run"
    flags = ["data.train_size=32", "data.batch_size=4", "algorithm.m=4", "optim.steps=1", "data.eval_limit=6"]
    flags += ["data.eval_n=2", "data.eval_every=1", "rollout.max_tokens=44", "logging.tensorboard=false", "seed=3"]
    train.main([f"run_dir={run}", *flags])
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    results = ev.main(["--model", str(run), "--out", str(tmp_path / "eval")])
    assert results["config"]["model"].endswith("step_00000001/hf")
    for name in ("clean", "noisy"):
        row = results["benchmarks"][name]
        assert (row["problems"], row["n"]) == (6, 2)
        assert row["pass@1"] == pytest.approx(logged[f"eval/{name}"])


def test_eval_reads_the_trainers_data_keys(tmp_path: Path) -> None:
    # Was: a file training read with data.problem_key=question had no problem field for lens.eval.
    file = tmp_path / "mine.jsonl"
    file.write_text("".join(json.dumps({"question": f"{i} + {i} ?", "solution": str(2 * i)}) + "\n" for i in range(3)))
    sets = ev.load_eval_sets(str(file), problem_key="question", answer_key="solution")
    assert [p.answer for p in sets[0].problems] == ["0", "2", "4"]
    args = ev.parse_args(["--model", str(vartrack.ASSETS_DIR), "--benchmarks", str(file), "--problem-key", "question"])
    assert (args.problem_key, args.answer_key) == ("question", "answer")


def test_evaluation_progress_off_a_terminal_is_plain_lines(vartrack_engine, capsys, monkeypatch) -> None:
    # Was: piped to a file, the bar's carriage returns and ANSI codes came between the log lines.
    from lens import console

    monkeypatch.setattr(console, "LINE_INTERVAL_S", 0.0)  # a line per batch
    prompts, answers = _vartrack_prompts("clean", 4)
    sampling = ev.eval_sampling(temperature=1.0, top_p=1.0, max_tokens=8, seed=0)
    tokenizer, verifier = vartrack.load_tokenizer(), Verifier("vartrack")
    ev.evaluate_set(
        vartrack_engine, tokenizer, verifier, prompts, answers, n=2, sampling=sampling, batch_size=2, progress="clean"
    )
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    heads = [line.split(",")[0] for line in err.splitlines()]
    assert heads == ["clean: 2/4 prompts (50%)", "clean: 4/4 prompts (100%)"]


@pytest.mark.parametrize("rank", [0, 1])
def test_the_trainers_evaluation_shows_its_progress_on_rank_0(monkeypatch, rank: int) -> None:
    # Was: no progress at all while the trainer scored its held-out sets (one generate call, no bar).
    from types import SimpleNamespace

    from lens import metrics, train
    from lens.config import Config

    calls = []

    def fake_evaluate_set(*args, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace(accuracy=0.5)

    monkeypatch.setattr(train, "evaluate_set", fake_evaluate_set)
    run = SimpleNamespace(cfg=Config(), rank=rank, sampler=None, tokenizer=None, timer=metrics.Timer())
    sets = {"clean": SimpleNamespace(kind="vartrack", ids=[[1]], answers=["1"])}
    out = train.run_eval(run, sets, {"vartrack": None})
    assert out == {"eval/clean": 0.5, "time/eval": out["time/eval"]} and out["time/eval"] >= 0
    assert run.timer.totals == {}  # taken out of the timer: the next step's metrics do not count it again
    assert calls[0]["progress"] == ("eval clean" if rank == 0 else None)
    assert calls[0]["batch_size"] == ev.BATCH_PROMPTS  # the bar moves per batch
