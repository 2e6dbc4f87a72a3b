"""Getting the data: `python -m lens.data prepare|check` (its entry point is lens/data/__main__.py).

    python -m lens.data prepare math500 aime24 dapo_math_17k [--out DIR]   # needs the Hugging Face hub
    python -m lens.data prepare all --out DIR
    python -m lens.data check DIR                                          # rows and sha256 vs manifest.json

`prepare` reads each set from its hub id (`CATALOG`) through `lens.data.load` (so the same answer
normalisation and row checks apply as for every other source), and writes the layout `lens.data.find_data`
reads: `DIR/<set>/<split>.jsonl` with `uid`, `problem`, `answer` per row, and `DIR/manifest.json` with each
file's row count, sha256 and source. The default DIR is `~/.cache/lens/data`, the last place the loader
looks. It needs network access to the hub and the `hub` extra (`datasets`): when the hub cannot be reached
within seconds, it reads only what the local Hugging Face cache holds and fails with one line naming the set
and the hub id, instead of retrying for half a minute. Named sets without a hub source (`NO_HUB_SOURCE`) are
read from a data directory only: `prepare` says so rather than calling them unknown.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lens import console, data, errors

MANIFEST = "manifest.json"
# The DAPO-Math-17k hub copy wraps every problem in an instruction that asks for "Answer: X" on the last
# line; lens renders its own instruction (\boxed{}), so the wrapper is cut (the shared copy has it cut too).
_DAPO_HEAD = re.compile(r"^Solve the following math problem step by step\..*?\n\n", re.DOTALL)
_DAPO_TAIL = re.compile(r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$")


def _strip_dapo_wrapper(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "problem": _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", row["problem"]))}


def _with_options(row: dict[str, Any]) -> dict[str, Any]:
    """Multiple choice: the options go into the problem text as `A. ...` lines (the shared layout)."""
    options = row.get("options") or []
    # Letters in order, as the choice verifier reads them: option i is the i-th letter from A.
    lines = [f"{chr(ord('A') + i)}. {opt}" for i, opt in enumerate(options)]
    return {**row, "problem": row["problem"] + "\n\n" + "\n".join(lines)}


@dataclass(frozen=True)
class HubSource:
    """Where a named set (lens.data.BENCHMARKS) lives on the hub and how its fields map to ours."""

    hub_id: str
    split: str
    problem_key: str
    answer_key: str
    config: str | None = None
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    # The `hf:` source string of lens.data, so prepare reads the hub through the same loader as training.
    def spec(self) -> str:
        return f"hf:{self.hub_id}{':' + self.config if self.config else ''}@{self.split}"


CATALOG: dict[str, HubSource] = {
    "math500": HubSource("HuggingFaceH4/MATH-500", "test", "problem", "answer"),
    "aime24": HubSource("HuggingFaceH4/aime_2024", "train", "problem", "answer"),
    "aime25": HubSource("math-ai/aime25", "test", "problem", "answer"),
    "amc23": HubSource("math-ai/amc23", "test", "question", "answer"),
    "minerva_math": HubSource("math-ai/minervamath", "test", "question", "answer"),
    "olympiadbench": HubSource("Hothan/OlympiadBench", "train", "question", "final_answer", "OE_TO_maths_en_COMP"),
    "gaokao2023en": HubSource("MARIO-Math-Reasoning/Gaokao2023-Math-En", "train", "question", "answer"),
    "mmlu_pro": HubSource("TIGER-Lab/MMLU-Pro", "test", "question", "answer", transform=_with_options),
    "bbeh": HubSource("BBEH/bbeh", "train", "input", "target"),
    "supergpqa_sample300": HubSource("m-a-p/SuperGPQA", "train", "question", "answer_letter", transform=_with_options),
    "dapo_math_17k": HubSource(
        "BytedTsinghua-SIA/DAPO-Math-17k", "train", "prompt", "reward_model.ground_truth", transform=_strip_dapo_wrapper
    ),
    "openr1_math_46k": HubSource("Elliott/Openr1-Math-46k-8192", "train", "prompt", "reward_model.ground_truth"),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        # 1 MiB reads: a training set of hundreds of MB is hashed without being held in memory.
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _rows_of(name: str, source: HubSource) -> list[dict[str, Any]]:
    """uid/problem/answer rows of one set, read from the hub through the one loader."""
    problems = data.load(source.spec, problem_key=source.problem_key, answer_key=source.answer_key)
    rows = [{"uid": f"{name}-{i}", "problem": p.problem, "answer": p.answer, **p.meta} for i, p in enumerate(problems)]
    # The transform sees the hub row's other fields (options), which the written layout then drops.
    rows = [source.transform(r) if source.transform else r for r in rows]
    # Only the shared layout's three fields: the written files are the same whatever the hub adds.
    return [{"uid": r["uid"], "problem": r["problem"], "answer": r["answer"]} for r in rows]


# Named sets of lens.data.BENCHMARKS that no public hub dataset holds in their form: a data directory only.
NO_HUB_SOURCE = tuple(n for n, spec in data.BENCHMARKS.items() if not spec.hub)
REACH_TIMEOUT_S = 3.0


def hub_reachable(timeout_s: float = REACH_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub ($HF_ENDPOINT, default huggingface.co) opens within timeout_s."""
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _offline_unless_reachable() -> None:
    """Offline, `datasets` retries each download for tens of seconds before it fails: when the hub does not
    answer at once, switch it to the local cache (what it holds still loads; the rest fails in one line)."""
    if data._hub_offline() or hub_reachable():
        return
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    print(
        f"prepare: the Hugging Face hub does not answer within {REACH_TIMEOUT_S:g} s: reading the local cache only "
        "(prepare needs network access for a set not cached)",
        file=sys.stderr,
    )


def prepare(names: Sequence[str], out: Path) -> dict[str, dict[str, Any]]:
    """Writes each named set under `out` and merges its entry into `out/manifest.json`; returns the entries."""
    # All names checked before any download, so a typo does not fail after minutes of work.
    no_source = [n for n in names if n in NO_HUB_SOURCE]
    if no_source:
        files = ", ".join(f"{n}: <DIR>/{data.BENCHMARKS[n].path}" for n in no_source)
        raise ValueError(
            f"prepare: {', '.join(no_source)} has no hub source to prepare from; put the file in a data directory "
            f"yourself ({files}) and set data.dir or LENS_DATA_DIR to it"
        )
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ValueError(f"prepare: unknown set(s) {unknown}; known: {', '.join(CATALOG)} (or all)")
    _offline_unless_reachable()
    # Merged, not replaced: preparing one more set must not forget the ones already there.
    manifest = read_manifest(out) if (out / MANIFEST).is_file() else {}
    written = {}
    # A big set takes minutes to download and convert: a bar over the sets on stderr.
    bar = console.bar(len(names), desc="prepare", unit="set")
    for name in names:
        bar.set_postfix_str(name)
        rows = _rows_of(name, CATALOG[name])
        rel = data.BENCHMARKS[name].path.removesuffix(".gz")  # written uncompressed: plain JSON Lines
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(path)  # never a half-written set under the final name
        written[name] = {"file": rel, "rows": len(rows), "sha256": sha256(path), "source": CATALOG[name].spec}
        bar.update()
        bar.write(f"{name}: {len(rows)} rows -> {path}")
    bar.close()
    manifest.update(written)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return written


def write_manifest(root: Path) -> dict[str, dict[str, Any]]:
    """Writes `root/manifest.json` for the named sets found in `root` (their rows and sha256 as they are now,
    source "local"), so that later `check`s notice a changed file; returns the entries."""
    manifest = {}
    for name, spec in sorted(data.BENCHMARKS.items()):
        # Both the compressed name of the shared layout and the plain one prepare writes; dict.fromkeys keeps
        # the order and drops the duplicate when the path has no .gz.
        for rel in dict.fromkeys((spec.path, spec.path.removesuffix(".gz"))):
            path = root / rel
            if path.is_file():
                manifest[name] = {"file": rel, "rows": len(data.load(path)), "sha256": sha256(path), "source": "local"}
                break
    if not manifest:
        raise ValueError(f"{root}: no named data set in it (expected e.g. {data.BENCHMARKS['math500'].path})")
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(root: Path) -> dict[str, dict[str, Any]]:
    file = root / MANIFEST
    # FileNotFoundError, which the CLI layer prints as one line naming the directory.
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such data directory")
    if not file.is_file():
        raise ValueError(
            f"{root}: no {MANIFEST} (`{console.command('lens.data', 'prepare')}` writes one); to record the files "
            f"there as they are now, run `{console.command('lens.data', 'check', root, '--write-manifest')}`"
        )
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{file}: expected an object of sets")
    return manifest


def check(root: Path) -> list[str]:
    """Problems of a data directory against its manifest (missing file, row count, sha256); [] when all match."""
    problems = []
    for name, entry in sorted(read_manifest(root).items()):
        path = root / entry["file"]
        if not path.is_file():
            problems.append(f"{name}: {path} is missing")
            continue
        # Rows through the loader, not a line count: a file with bad rows fails here with its line.
        rows = len(data.load(path))
        if rows != entry["rows"]:
            problems.append(f"{name}: {path} has {rows} rows, the manifest says {entry['rows']}")
        if sha256(path) != entry["sha256"]:
            problems.append(f"{name}: {path} sha256 differs from the manifest")
    return problems


@errors.cli_errors
def main(argv: Sequence[str] | None = None) -> int:
    parser = errors.ArgumentParser(prog=console.command("lens.data"), description="Get and verify lens's data sets")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="download named sets from the Hugging Face hub (needs network)")
    prep.add_argument("names", nargs="+", help=f"set names ({', '.join(CATALOG)}) or all")
    prep.add_argument("--out", type=Path, default=data.data_dirs()[-1][1], help="data directory to write")
    chk = sub.add_parser("check", help="verify a data directory against its manifest")
    chk.add_argument("dir", type=Path)
    chk.add_argument("--write-manifest", action="store_true", help="first write DIR/manifest.json from its files")
    args = parser.parse_args(argv)
    # `all` is spelled out here so prepare() itself only ever sees real set names.
    if args.command == "prepare":
        if args.names == ["all"]:
            print(f"prepare all: every set with a hub source (not {', '.join(NO_HUB_SOURCE)})", file=sys.stderr)
        prepare(list(CATALOG) if args.names == ["all"] else args.names, args.out)
        return 0
    if args.write_manifest:
        written = write_manifest(args.dir)
        print(f"wrote {args.dir / MANIFEST} ({len(written)} sets: {', '.join(written)})")
    failures = check(args.dir)
    for line in failures:
        print(f"FAIL {line}")
    print(f"{args.dir}: {'ok' if not failures else f'{len(failures)} problem(s)'}")
    # 1, not 2: the command worked and found differences (2 is for a wrong command line).
    return 1 if failures else 0


cli = errors.console_script(main)
