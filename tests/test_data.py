"""Tests of lens/data/ (the loader): loading (every shared data file, bad rows, formats), rendering spans, the sampler.

Run: `.venv/bin/python -m pytest tests/test_data.py -q` (about 15 s: it parses all ~40 MB of shared data).
Tokenizers are trained locally with the `tokenizers` library; nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from shared_data import DATA_DIR
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from lens import console, data
from lens.data import (
    BENCHMARKS,
    MATH_PROMPT,
    Problem,
    PromptSampler,
    load,
    load_benchmark,
    load_with_report,
    render,
    render_all,
)

needs_data = pytest.mark.skipif(not (DATA_DIR / "README.md").is_file(), reason=f"no shared data at {DATA_DIR}")


# ------------------------------------------------------------------------------------------------
# the shared data directory
# ------------------------------------------------------------------------------------------------


def _readme_counts() -> dict[str, int]:
    """{relative path: rows} from the table of data/README.md."""
    counts = {}
    for line in (DATA_DIR / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([^`]+\.jsonl(?:\.gz)?)`\s*\|[^|]*\|\s*([\d,]+)\s*\|", line)
        if m:
            counts[m.group(1)] = int(m.group(2).replace(",", ""))
    return counts


@needs_data
def test_every_shared_file_loads_with_the_readme_count() -> None:
    counts = _readme_counts()
    files = sorted(str(p.relative_to(DATA_DIR)) for p in DATA_DIR.rglob("*.jsonl*"))
    assert len(counts) == 15 and sorted(counts) == files
    for rel, expected in counts.items():
        problems, report = load_with_report(DATA_DIR / rel)
        assert len(problems) == expected == report.loaded == report.rows, rel
        assert report.skipped == {} and report.duplicates == [] and report.derived_uids == 0, rel
        assert len({p.uid for p in problems}) == expected, rel


SHARED = sorted(n for n in BENCHMARKS if (DATA_DIR / BENCHMARKS[n].path).is_file())


@needs_data
def test_every_set_of_the_shared_readme_is_a_named_set() -> None:
    excluded = ["dapo_math_17k/excluded.jsonl", "math_train_deepscaler/excluded.jsonl"]  # kept for provenance
    assert sorted(_readme_counts()) == sorted([BENCHMARKS[n].path for n in SHARED] + excluded)


@needs_data
@pytest.mark.parametrize("name", SHARED)
def test_load_benchmark(name: str) -> None:
    bench = load_benchmark(name)
    spec = BENCHMARKS[name]
    assert len(bench.problems) == spec.rows
    assert bench.kind == spec.kind
    assert "{problem}" in bench.prompt
    assert all(p.problem.strip() and p.answer.strip() for p in bench.problems)
    if spec.kind == "choice":
        assert {p.answer for p in bench.problems} <= set("ABCDEFGHIJ")


@needs_data
def test_benchmark_spot_checks() -> None:
    aime25 = {p.uid: p for p in load_benchmark("aime25").problems}
    assert aime25["aime25-19"].answer == "336"
    assert aime25["aime25-19"].meta["answer_original"] == "336^\\circ"
    math500 = load_benchmark("math500", limit=3).problems
    assert [p.uid for p in math500] == ["math500-0", "math500-1", "math500-2"]
    assert {"solution", "subject", "level"} <= set(math500[0].meta)
    assert "uid" not in math500[0].meta and "problem" not in math500[0].meta
    assert load_benchmark("bbeh_mini").kind == "text"
    assert load_benchmark("mmlu_pro", limit=1).problems[0].answer == "I"


def test_load_benchmark_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown data set name 'nope'"):
        load_benchmark("nope")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LENS_DATA_DIR", str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError) as err:
        load_benchmark("openr1_math_46k", data_dir=tmp_path / "cfg")
    message = str(err.value)  # every place, in order, and the way to get the set
    # The way to get it runs as printed: this environment's lens-data, or its interpreter, never a bare `python`.
    places = ["data.dir", "LENS_DATA_DIR", "user cache", console.command("lens.data", "prepare", "openr1_math_46k")]
    assert [message.index(p) for p in places] == sorted(message.index(p) for p in places)
    assert str(tmp_path / "cfg" / "openr1_math_46k" / "train.jsonl") in message


def test_data_dir_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LENS_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # Only the places the user names and the cache `prepare` writes: never a folder guessed from the checkout's place.
    assert [p for _, p in data.data_dirs()] == [tmp_path / "home/.cache/lens/data"]
    for where in ("cfg", "env", "home/.cache/lens/data"):
        (tmp_path / where / "aime24").mkdir(parents=True)
        (tmp_path / where / "aime24" / "test.jsonl").write_text(f'{{"problem": "{where}", "answer": "1"}}\n')
    monkeypatch.setenv("LENS_DATA_DIR", str(tmp_path / "env"))
    assert load_benchmark("aime24").problems == [Problem("test-1", "env", "1")]
    assert load_benchmark("aime24", tmp_path / "cfg").problems[0].problem == "cfg"
    (tmp_path / "env" / "math500").mkdir()  # a set data.dir lacks: the next place has it
    (tmp_path / "env" / "math500" / "test.jsonl").write_text('{"problem": "env only", "answer": "2"}\n')
    assert load_benchmark("math500", tmp_path / "cfg").problems[0].problem == "env only"
    monkeypatch.delenv("LENS_DATA_DIR")
    assert load_benchmark("aime24").problems[0].problem == "home/.cache/lens/data"


# ------------------------------------------------------------------------------------------------
# loading: formats and bad rows
# ------------------------------------------------------------------------------------------------


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"uid": "a", "problem": "1+1?", "answer": "2", "level": 1})


ROW_B = '{"uid": "b", "problem": "x", "answer": "2"'


@pytest.mark.parametrize(
    ("bad_line", "message", "reason"),
    [
        ('{"problem": "x", "answer": ', "invalid JSON", "invalid_json"),
        ('{"uid": "b", "answer": "2"}', "missing problem field 'problem'", "missing_problem"),
        ('{"uid": "b", "problem": "  ", "answer": "2"}', "empty problem", "empty_problem"),
        ('{"uid": "b", "problem": "x"}', "missing answer field 'answer'", "missing_answer"),
        ('{"uid": "b", "problem": "x", "answer": null}', "missing answer", "missing_answer"),
        ('{"uid": "b", "problem": "x", "answer": ""}', "empty answer", "empty_answer"),
        (
            '{"uid": "b", "problem": "x", "answer": ["2", "3"]}',
            "answer field 'answer': expected a string or a number, got list",
            "bad_answer_type",
        ),
        (
            '{"uid": "b", "problem": 3, "answer": "2"}',
            "problem field 'problem' must be a string, got int",
            "bad_problem_type",
        ),
        ('["not", "an", "object"]', "row is a JSON list, not an object", "not_an_object"),
        ('{"uid": "a", "problem": "again", "answer": "3"}', "duplicate uid 'a' \\(first on line 1\\)", "duplicate_uid"),
        # Malformed inputs that used to end in a traceback or load (a fuzz audit of the loader):
        (ROW_B + ', "m": ' + "[" * 30000 + "]" * 30000 + "}", "JSON nested deeper than 64 levels", "too_deep"),
        (ROW_B + ', "m": ' + "[" * 65 + "]" * 65 + "}", "JSON nested deeper than 64", "too_deep"),
        ('{"problem": "x", "answer": ' + "7" * 5000 + "}", "invalid JSON \\(Exceeds the limit", "invalid_json"),
        ('{"problem": "x\\ud800", "answer": "2"}', "problem field 'problem' holds a lone surrogate", "bad_text"),
        ('{"problem": "x", "answer": "\\udfff"}', "answer field 'answer' holds a lone surrogate", "bad_text"),
        ('{"problem": "' + "x" * (data.MAX_FIELD_CHARS + 1) + '", "answer": "2"}', "problem field .* more", "too_long"),
    ],
)
def test_bad_rows_raise_with_line_or_are_skipped(tmp_path: Path, bad_line: str, message: str, reason: str) -> None:
    path = _write_jsonl(tmp_path / "train.jsonl", [GOOD, "", bad_line, '{"problem": "3+3?", "answer": 6}'])
    with pytest.raises(ValueError, match=rf"train\.jsonl:3: {message}"):
        load(path)
    if reason == "duplicate_uid":
        with pytest.warns(UserWarning, match="'a' on lines 1 and 3"):
            problems, report = load_with_report(path, on_error="skip")
        assert report.duplicates == [("a", 1, 3)]
    else:
        problems, report = load_with_report(path, on_error="skip")
    assert [p.uid for p in problems] == ["a", "train-4"]
    assert problems[1].answer == "6"  # a numeric answer becomes its string
    assert problems[0].meta == {"level": 1}
    assert report.rows == 3 and report.loaded == 2 and report.skipped == {reason: 1} and report.derived_uids == 1


def test_gzip_custom_keys_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "olymp.jsonl.gz"
    rows = [{"id": i, "question": f"q{i}", "final_answer": f"{i}", "unit": None} for i in range(5)]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    problems = load(path, problem_key="question", answer_key="final_answer", uid_key="id", limit=3)
    assert problems == [Problem(str(i), f"q{i}", str(i), {"unit": None}) for i in range(3)]
    assert load(path, problem_key="question", answer_key="final_answer", limit=0) == []
    with pytest.raises(ValueError, match="missing problem field 'problem'"):
        load(path)


def _gzip_rows(path: Path, n: int) -> bytes:
    data_ = gzip.compress(
        "".join(json.dumps({"problem": f"q{i} " * 50, "answer": i}) + "\n" for i in range(n)).encode()
    )
    path.write_bytes(data_)
    return data_


@pytest.mark.parametrize(
    ("damage", "pattern"),
    [
        (lambda b: b[: len(b) // 2], r":\d+: unreadable compressed data, truncated or corrupt \(EOFError"),
        (lambda b: b"\x00" * 10 + b[10:], r":1: unreadable compressed data, truncated or corrupt \(BadGzipFile"),
        (lambda b: b[:400] + bytes(x ^ 0x55 for x in b[400:800]) + b[800:], r":\d+: unreadable compressed data"),
    ],
    ids=["truncated", "bad_header", "bad_block"],
)
@pytest.mark.parametrize("suffix", [".jsonl.gz", ".json.gz"])
def test_a_corrupt_compressed_file_names_file_and_line(tmp_path: Path, damage, pattern: str, suffix: str) -> None:
    path = tmp_path / f"train{suffix}"
    path.write_bytes(damage(_gzip_rows(tmp_path / "whole.gz", 400)))
    for on_error in ("raise", "skip"):  # not a bad row to skip: the rest of the file cannot be read
        with pytest.raises(ValueError, match=re.escape(str(path)) + pattern):
            load(path, on_error=on_error)


def test_a_deeply_nested_json_document_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(
        '[\n{"problem": "x", "answer": "1"},\n{"problem": "y", "answer": ' + "[" * 50000 + "]" * 50000 + "}]"
    )
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}:3: JSON nested deeper than 64 levels"):
        load(path)
    path.write_text(
        '[{"problem": "x", "answer": "1"}, {"problem": "y", "answer": "2", "m": ' + "[" * 70 + "]" * 70 + "}]"
    )
    problems, report = load_with_report(path, on_error="skip")
    assert [p.problem for p in problems] == ["x"] and report.skipped == {"too_deep": 1}


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b"garbage" * 50, lambda b: b[:4] + bytes(len(b) - 4)],
    ids=["truncated", "not_parquet", "zeroed"],
)
def test_a_broken_parquet_file_names_the_file(tmp_path: Path, damage) -> None:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"problem": [f"p{i}" for i in range(100)], "answer": [str(i) for i in range(100)]}), path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}:1: unreadable parquet file"):
        load(path)


def test_parquet(tmp_path: Path) -> None:
    path = tmp_path / "dapo.parquet"
    table = pa.table({"prompt": ["p0", "p1", ""], "ground_truth": ["0", "1", "2"], "source": ["s", "s", "s"]})
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"dapo\.parquet:3: empty problem"):
        load(path, problem_key="prompt", answer_key="ground_truth")
    problems, report = load_with_report(path, problem_key="prompt", answer_key="ground_truth", on_error="skip")
    assert problems == [Problem("dapo-1", "p0", "0", {"source": "s"}), Problem("dapo-2", "p1", "1", {"source": "s"})]
    assert report.skipped == {"empty_problem": 1}


def test_load_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load(tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="no such data file"):
        load(tmp_path / "a" / "b" / "c")
    with pytest.raises(FileNotFoundError, match="written hf:someone/some-dataset"):
        load("someone/some-dataset")  # a bare hub name is a missing path; the error says how to name the hub
    with pytest.raises(ValueError, match="no `train` data file and not exactly one"):
        load(tmp_path)  # an empty directory
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        load(tmp_path / "x.csv")
    path = _write_jsonl(tmp_path / "ok.jsonl", [GOOD])
    with pytest.raises(ValueError, match="on_error='ignore'"):
        load(path, on_error="ignore")
    with pytest.raises(ValueError, match="limit=-1"):
        load(path, limit=-1)


def test_json_files_directories_and_nested_fields(tmp_path: Path) -> None:
    rows = [
        {
            "id": "a",
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"}],
            "reward_model": {"ground_truth": 27.0},
        },
        {"id": "b", "prompt": [{"role": "user", "content": "q2"}], "reward_model": {"ground_truth": ["$\\frac12$"]}},
    ]
    keys = {"problem_key": "prompt", "answer_key": "reward_model.ground_truth", "uid_key": "id"}
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": rows}))
    (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("list.json", "wrapped.json", "lines.json"):
        got = load(tmp_path / name, **keys)
        assert [(p.uid, p.problem, p.answer) for p in got] == [("a", "q1", "27"), ("b", "q2", "\\frac12")], name
    split_dir = tmp_path / "set"
    split_dir.mkdir()
    _write_jsonl(split_dir / "train.jsonl", [GOOD])
    _write_jsonl(split_dir / "test.jsonl", [GOOD.replace('"a"', '"t"')])
    assert load(split_dir)[0].uid == "a" and load(split_dir, split="test")[0].uid == "t"
    assert load(split_dir)[0].where == f"{split_dir / 'train.jsonl'}:1"


def test_non_utf8_and_empty_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"problem": "p", "answer": "1"}\n{"problem": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not UTF-8 \(byte 0xe9 at column 17\)"):
        load(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_bytes(b'[\n{"problem": "p", "answer": "1"},\n{"problem": "\xff", "answer": "2"}\n]')
    with pytest.raises(ValueError, match=r"bad.json:3: not UTF-8 \(byte 0xff"):
        load(bad_json)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"empty\.jsonl: data set 'empty' has no problems"):
        data.load_sets(str(tmp_path / "empty.jsonl"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (27, "27"),
        (27.0, "27"),
        (0.5, "0.5"),
        (["3"], "3"),
        (" $x^2$ ", "x^2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{1}+\\boxed{2}", "\\boxed{1}+\\boxed{2}"),
        ("B", "B"),
    ],
)
def test_normalize_answer(value: object, expected: str) -> None:
    assert data.normalize_answer(value) == expected


def test_bad_golds_fail_at_load_time_with_file_and_line(tmp_path: Path) -> None:
    rows = [{"problem": "p", "answer": "A"}, {"problem": "q", "answer": "B, C"}]
    path = _write_jsonl(tmp_path / "mc.jsonl", [json.dumps(r) for r in rows])
    assert data.load_sets(str(path), kind="math")[0].kind == "math"
    with pytest.raises(ValueError, match=r"mc.jsonl:2: gold answer 'B, C' is unusable for the choice verifier"):
        data.load_sets(str(path), kind="choice")


@needs_data
def test_load_sets_every_kind_of_source(tmp_path: Path) -> None:
    (named,) = data.load_sets("dapo_math_17k", role="train", limit=7)
    assert (named.name, named.kind, len(named.problems)) == ("dapo_math_17k", "math", 7)
    assert named.prompt == MATH_PROMPT and named.problems[0].where.endswith("dapo_math_17k/train.jsonl:1")
    clean, noisy = data.load_sets("vartrack", limit=5, seed=3)
    assert (clean.name, noisy.name, clean.kind, len(noisy.problems)) == ("clean", "noisy", "vartrack", 5)
    (train,) = data.load_sets("vartrack", role="train", limit=9)
    assert train.name == "train" and len(train.problems) == 9
    (mc,) = data.load_sets("mmlu_pro", limit=2)
    assert mc.kind == "choice" and "letter" in mc.prompt
    path = _write_jsonl(tmp_path / "my_problems.jsonl", [GOOD, GOOD.replace('"a"', '"x2"')])
    (own,) = data.load_sets(str(path), limit=1)
    assert (own.name, own.kind, len(own.problems)) == ("my_problems", "math", 1)
    with pytest.raises(ValueError, match="role='dev'"):
        data.load_sets("math500", role="dev")


def test_hf_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(ValueError, match=r"optional `datasets` package \(pip install 'lens-rl\[hub\]'\)"):
        load("hf:someone/some-dataset")
    calls = []

    def load_dataset(name: str, config: str | None, split: str) -> list[dict[str, str]]:
        calls.append((name, config, split))
        if name == "someone/unreachable":
            raise ConnectionError("Couldn't reach 'someone/unreachable' on the Hub (LocalEntryNotFoundError)")
        return [{"question": "q", "solution": 4}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    problems = load("hf:someone/some-dataset:main@test", problem_key="question", answer_key="solution")
    assert problems == [Problem("someone_some-dataset-1", "q", "4")]
    assert problems[0].where == "hf:someone/some-dataset:main@test:1"
    (s,) = data.load_sets("hf:someone/some-dataset", problem_key="question", answer_key="solution")
    assert s.name == "some-dataset" and calls[-1] == ("someone/some-dataset", None, "test")  # eval: split test
    data.load_sets("hf:someone/some-dataset", role="train", problem_key="question", answer_key="solution")
    assert calls[-1][2] == "train"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"hf:someone/unreachable@train: could not load \(the hub is offline"):
        load("hf:someone/unreachable")


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is the value of $x$ if $2x + 3 = 11$? Please reason step by step.",
    "Let $f(x) = x^2 - 4x + 4$. Find all real roots, and put your final answer within \\boxed{}.",
    "A triangle has sides 3, 4 and 5. Compute its area; √2 ≤ x ≤ π.",
    "system user assistant You are a helpful assistant.",
]


def _bpe(special: list[str], bos: str | None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 5, trainer=trainer)
    if bos is not None:  # Llama-style: the tokenizer itself prepends BOS to every sequence
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)])
    return tok


@pytest.fixture(scope="module")
def chat_tokenizer() -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module")
def base_tokenizer() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=_bpe(["<s>", "</s>"], "<s>"), bos_token="<s>", eos_token="</s>")


PROBLEM = Problem("p-1", "Let $f(x) = x^2 - 4x + 4$. Find all real roots of f; √2 ≤ x ≤ π.", "2")


def test_render_chat_span_is_the_problem(chat_tokenizer: PreTrainedTokenizerFast) -> None:
    out = render(PROBLEM, chat_tokenizer, system_prompt="You are a helpful assistant.")
    assert out is not None and out.uid == "p-1" and not out.truncated
    start, end = out.scorable
    assert chat_tokenizer.decode(out.ids[start:end]) == PROBLEM.problem
    user = MATH_PROMPT.replace("{problem}", PROBLEM.problem)
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": user}]
    expected_text = chat_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat_tokenizer.decode(out.ids) == expected_text
    im_start = chat_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert out.ids[0] == im_start and out.ids.count(im_start) == 3  # system, user, assistant: none doubled
    assert chat_tokenizer.decode(out.ids[end:]).startswith("\nPlease reason step by step")


def test_render_plain_base_model(base_tokenizer: PreTrainedTokenizerFast) -> None:
    out = render(PROBLEM.problem, base_tokenizer)
    assert out is not None and out.uid is None
    bos = base_tokenizer.bos_token_id
    assert out.ids[0] == bos and out.ids.count(bos) == 1
    start, end = out.scorable
    assert base_tokenizer.decode(out.ids[start:end]) == PROBLEM.problem
    assert base_tokenizer.decode(out.ids[1:]) == MATH_PROMPT.replace("{problem}", PROBLEM.problem)
    custom = render(PROBLEM, base_tokenizer, template="Question: {problem}\nAnswer:")
    assert base_tokenizer.decode(custom.ids[1:]) == f"Question: {PROBLEM.problem}\nAnswer:"
    s, e = custom.scorable
    assert base_tokenizer.decode(custom.ids[s:e]) == PROBLEM.problem


def test_render_plain_on_a_chat_tokenizer_when_asked(chat_tokenizer: PreTrainedTokenizerFast) -> None:
    out = render(PROBLEM, chat_tokenizer, template="plain", system_prompt="Be brief.")
    text = chat_tokenizer.decode(out.ids)
    assert text == "Be brief.\n\n" + MATH_PROMPT.replace("{problem}", PROBLEM.problem)
    assert "<|im_start|>" not in text


def test_render_overflow(base_tokenizer: PreTrainedTokenizerFast) -> None:
    full = render(PROBLEM, base_tokenizer)
    n, (start, end) = len(full.ids), full.scorable
    assert render(PROBLEM, base_tokenizer, max_prompt_len=n) == full
    assert render(PROBLEM, base_tokenizer, max_prompt_len=n - 1) is None
    cut = render(PROBLEM, base_tokenizer, max_prompt_len=n - 3, on_overflow="truncate")
    assert cut.truncated and len(cut.ids) == n - 3
    assert cut.scorable == (start, end - 3)
    assert cut.ids[: end - 3] == full.ids[: end - 3] and cut.ids[end - 3 :] == full.ids[end:]
    prefix_and_suffix = n - (end - start)
    assert render(PROBLEM, base_tokenizer, max_prompt_len=prefix_and_suffix, on_overflow="truncate") is None
    with pytest.raises(ValueError, match="p-1 has"):
        render(PROBLEM, base_tokenizer, max_prompt_len=n - 1, on_overflow="error")
    short = Problem("s", "x = 1", "1")
    prompts, report = render_all([PROBLEM, short, PROBLEM], base_tokenizer, max_prompt_len=n - 1)
    assert [p.uid for p in prompts] == ["s"] and report.rendered == 1 and report.skipped_too_long == 2
    prompts, report = render_all([PROBLEM, short], base_tokenizer, max_prompt_len=n - 1, on_overflow="truncate")
    assert report.rendered == 2 and report.truncated == 1 and report.skipped_too_long == 0


def test_render_errors(chat_tokenizer: PreTrainedTokenizerFast, base_tokenizer: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ValueError, match="no chat template"):
        render(PROBLEM, base_tokenizer, template="chat")
    with pytest.raises(ValueError, match="exactly once"):
        render(PROBLEM, chat_tokenizer, prompt="no placeholder")
    with pytest.raises(ValueError, match="template='bogus'"):
        render(PROBLEM, chat_tokenizer, template="bogus")
    with pytest.raises(ValueError, match="on_overflow"):
        render(PROBLEM, chat_tokenizer, on_overflow="drop")
    with pytest.raises(ValueError, match="max_prompt_len"):
        render(PROBLEM, chat_tokenizer, max_prompt_len=0)


# ------------------------------------------------------------------------------------------------
# the sampler
# ------------------------------------------------------------------------------------------------


def test_sampler_unshuffled_crosses_epochs() -> None:
    s = PromptSampler(5, seed=0, shuffle=False)
    assert [s.next_indices(3) for _ in range(3)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]
    assert (s.epoch, s.position) == (1, 4)
    d = PromptSampler(5, seed=0, shuffle=False, drop_last=True)
    assert [d.next_indices(3) for _ in range(3)] == [[0, 1, 2], [0, 1, 2], [0, 1, 2]]
    assert d.state_dict()["epoch"] == 2
    assert PromptSampler(2, seed=0, shuffle=False).next_indices(5) == [0, 1, 0, 1, 0]


def test_sampler_shuffles_per_epoch_deterministically() -> None:
    a, b = PromptSampler(10, seed=3), PromptSampler(10, seed=3)
    epochs = [a.next_indices(10) for _ in range(3)]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3  # a fresh order every epoch
    assert [b.next_indices(10) for _ in range(3)] == epochs
    assert PromptSampler(10, seed=4).next_indices(10) != epochs[0]


def test_sampler_resume_yields_the_same_future() -> None:
    for drop_last in (False, True):
        s = PromptSampler(7, seed=11, drop_last=drop_last)
        for _ in range(4):
            s.next_indices(3)
        state = s.state_dict()
        future = [s.next_indices(3) for _ in range(6)]
        resumed = PromptSampler(7, seed=0, drop_last=drop_last)
        resumed.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON round trip
        assert resumed.state_dict() == state
        assert [resumed.next_indices(3) for _ in range(6)] == future


def test_sampler_errors() -> None:
    with pytest.raises(ValueError, match="num_items"):
        PromptSampler(0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        PromptSampler(3, seed=-1)
    with pytest.raises(ValueError, match="batch_size"):
        PromptSampler(3, seed=0).next_indices(0)
    with pytest.raises(ValueError, match="drop_last"):
        PromptSampler(3, seed=0, drop_last=True).next_indices(4)
    with pytest.raises(ValueError, match="num_items=4"):
        PromptSampler(5, seed=0).load_state_dict(PromptSampler(4, seed=0).state_dict())
