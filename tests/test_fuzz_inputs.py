"""Seeded fuzzing of what a user types and feeds: config overrides and data files.

Every input is either accepted (and then every numeric value lies in its range) or refused with ONE line that
names the key (`lens: error: optim.lr=...`) or the file and line (`train.jsonl:7: ...`), exit 2, never a
traceback. A few hundred cases in a few seconds, the same cases every run (fixed seeds).

Run: `OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_fuzz_inputs.py -q`.
"""

from __future__ import annotations

import gzip
import json
import random
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lens import data
from lens.config import RANGES, Config, _flat_items, load_config
from lens.errors import USER_ERRORS, cli_errors, one_line

# Values that have broken or slipped through config checks before, and plain ones around them.
TEXTS = [
    "0", "-0", "1", "-1", "2", "7", "2147483648", "-2147483649", "9223372036854775808", "1" + "0" * 400,
    ".inf", "-.inf", ".nan", "1e308", "-1e308", "1e-320", "0.5", "1.0", "-0.5", "3.7",
    "12:30:00", "0x1F", "0o17", "1_000", "~", "null", "true", "false", "auto", "none", "",
    "abc", "/dev/null", "/etc/passwd/x", "a" * 300, "/" + "b" * 300, "{problem}", "Q: {problem} {problem}", "é",
    "[]", "[1, 2]", "[0.9, 0.95]", "[[1]]", "[x]", "{a: 1}", "[1, 2", "{a: 1", "!!python/object/apply:os.system [ls]",
    "'quoted'", "\"dq\"", "- 1", "? x", "&a 1", "*a",
]  # fmt: skip


def _keys() -> list[str]:
    leaves = [key for key, _ in _flat_items(Config().to_dict())]
    return [*leaves, "algorithm.nope", "optimizer.lr", "data", "algorithm.dapo", "x.y.z"]


def _overrides(seed: int, n: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    keys = _keys()
    out = []
    for _ in range(n):
        key = rng.choice(keys)
        text = rng.choice(TEXTS) if rng.random() < 0.8 else repr(rng.uniform(-1e3, 1e3) * 10 ** rng.randint(-5, 40))
        out.append((key, text))
    return out


@cli_errors
def _load(override: str) -> Config:
    return load_config(None, [override], cuda_available=False, world_size=1)


def _names_the_key(message: str, key: str, override: str) -> bool:
    parts = key.split(".")
    prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    if key in message or f"override {override!r}" in message:
        return True
    # An unknown key is named as far as it is unknown (`optimizer` of `optimizer.lr`).
    return any(message.startswith(f"lens: error: unknown config key {p}") for p in prefixes)


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_config_overrides_are_accepted_in_range_or_refused_in_one_line(seed, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LENS_DEBUG", raising=False)
    refused = 0
    for key, text in _overrides(seed, 150):
        override = f"{key}={text}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ignored-key warnings are not what this test is about
            try:
                cfg = _load(override)
            except SystemExit as stop:
                err = capsys.readouterr().err
                assert stop.code == 2, (override, err)
                assert err.count("\n") == 1 and err.startswith("lens: error: "), (override, err)
                assert _names_the_key(err, key, override), (override, err)
                refused += 1
                continue
        flat = dict(_flat_items(cfg.to_dict()))
        for name, allowed in RANGES.items():  # accepted: every number means something
            values = flat[name] if isinstance(flat[name], list) else [flat[name]]
            assert all(v is None or v in allowed for v in values), (override, name, flat[name])
    assert refused > 50  # the generator does reach the checks


# ----------------------------------------------------------------------------------------------
# Data files
# ----------------------------------------------------------------------------------------------

ROWS = [{"uid": f"u{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i), "level": i % 3} for i in range(20)]


def _jsonl() -> bytes:
    return "".join(json.dumps(r) + "\n" for r in ROWS).encode()


def _truncate(rng: random.Random, b: bytes) -> bytes:
    return b[: rng.randrange(len(b))]


def _flip(rng: random.Random, b: bytes) -> bytes:
    out = bytearray(b)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _insert(rng: random.Random, b: bytes, what: bytes) -> bytes:
    at = rng.randrange(len(b))
    return b[:at] + what + b[at:]


def _deep(rng: random.Random, b: bytes) -> bytes:
    n = rng.choice([70, 1000, 30000, 120000])
    return b.replace(b'"level": 1', b'"level": ' + b"[" * n + b"]" * n, 1)


def _huge_int(rng: random.Random, b: bytes) -> bytes:
    return b.replace(b'"answer": "4"', b'"answer": ' + b"9" * rng.choice([300, 4301, 10000]), 1)


def _surrogate(rng: random.Random, b: bytes) -> bytes:
    return b.replace(b"What is 3", rng.choice([b"What is \\ud800 3", b"What is \\udfff3", b"\\ud83d 3"]), 1)


MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": _truncate,
    "flip": _flip,
    "nul": lambda rng, b: _insert(rng, b, b"\x00"),
    "bad_utf8": lambda rng, b: _insert(rng, b, bytes([0xFF, 0xC3])),
    "deep": _deep,
    "huge_int": _huge_int,
    "surrogate": _surrogate,
    "garbage": lambda rng, b: rng.randbytes(rng.randint(1, 2000)),
    "empty": lambda rng, b: rng.choice([b"", b"\n\n", b"   "]),
    "long_field": lambda rng, b: b.replace(b"What is 5", b"x" * (data.MAX_FIELD_CHARS + 10), 1),
}


def _write(path: Path, kind: str, body: bytes, rng: random.Random, mutate: str) -> None:
    """A data file of `kind` holding `body` (JSON Lines), damaged by `mutate` before or after compression."""
    if kind == "jsonl":
        path.write_bytes(MUTATIONS[mutate](rng, body))
    elif kind == "json":
        doc = json.dumps([json.loads(line) for line in body.decode().splitlines()], indent=1).encode()
        path.write_bytes(MUTATIONS[mutate](rng, doc))
    elif kind in ("jsonl.gz", "json.gz"):
        inner = body if kind == "jsonl.gz" else json.dumps(ROWS).encode()
        raw = gzip.compress(MUTATIONS[mutate](rng, inner) if rng.random() < 0.5 else inner)
        path.write_bytes(_truncate(rng, raw) if rng.random() < 0.5 else _flip(rng, raw))
    else:
        pq.write_table(pa.Table.from_pylist(ROWS), path)
        path.write_bytes(MUTATIONS[rng.choice(["truncate", "flip", "garbage"])](rng, path.read_bytes()))


def _files(tmp: Path, seed: int, n: int) -> list[Path]:
    rng = random.Random(seed)
    kinds = ["jsonl", "json", "jsonl.gz", "json.gz", "parquet"]
    paths = []
    for i in range(n):
        kind = rng.choice(kinds)
        path = tmp / f"f{i:03d}.{kind}"
        _write(path, kind, _jsonl(), rng, rng.choice(list(MUTATIONS)))
        paths.append(path)
    return paths


def test_fuzzed_data_files_load_or_name_file_and_line(tmp_path):
    refused = 0
    for path in _files(tmp_path, seed=0, n=150):
        for load in (lambda p: data.load_sets(str(p), role="train"), lambda p: data.load(p, on_error="skip")):
            try:
                load(path)
            except USER_ERRORS as e:
                message = one_line(e)
                assert "\n" not in str(e).strip() or message, message
                assert message.startswith(f"{path}:") or message.startswith(f"{path} "), message
                refused += 1
    assert refused > 100
