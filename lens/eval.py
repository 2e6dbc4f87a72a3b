"""Benchmark evaluation: sample a checkpoint on held-out sets, score the samples, write a report.

    python -m lens.eval --model runs/x/checkpoints/step-40 [--benchmarks math500,aime24,...] [--n 4]
    python -m lens.eval --model lens/tasks/assets/vartrack --benchmarks vartrack --n 4 --max-tokens 48
    python -m lens.eval --model PATH --paper-protocol     # avg@16 on AMC23/AIME24/AIME25, pass@1 elsewhere

- `evaluate_set` is the one core: it samples n responses per prompt (in prompt batches of `batch_size`,
  the seed moved by the batch's first row, so the samples do not depend on the batch size), scores them
  and returns an `EvalResult` (rewards [P, n], texts, verdicts, lengths). The trainer's periodic
  evaluation (avg@n) and this CLI both run it, with the same seed rule (`eval_sampling`):
  the CLI with `--seed S` samples what a training run with seed S logs as `eval/<set>`.
- Metrics per set (`summarize`): pass@1 = avg@n (mean reward over all samples), pass@k with the unbiased
  estimator 1 - C(n-c, k) / C(n, k) (`pass_at_k`), verdict counts, mean response length in tokens, the
  share cut at --max-tokens, seconds; the report's average row is the unweighted mean over sets.
- Outputs in --out (default runs/eval/<model-name>): results.json (metrics and the run's config),
  results.md (one Markdown table), samples/<set>.jsonl (per problem: prompt, gold, samples, the answers the
  verifier compared (`extract_answer`), rewards, verdicts).
- `vartrack` names the built-in task's two evaluation sets, `vartrack_clean` and `vartrack_noisy`.

Run the tests with `.venv/bin/python -m pytest tests/test_eval.py -q`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import html
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lens import answers, console, data, errors, preflight, reward, reward_fns, tasks
from lens.checkpoint import refuse_tool_output
from lens.config import load_config
from lens.reward import REASONS, Verifier
from lens.rollout import Engine, SamplingParams, make_engine

__all__ = [
    "EVAL_SEED_OFFSET",
    "MATH_BENCHMARKS",
    "PAPER_AVG16",
    "EvalResult",
    "EvalSet",
    "add_common_args",
    "build_engine",
    "eval_sampling",
    "evaluate_set",
    "extract_answer",
    "known_benchmarks",
    "load_eval_sets",
    "main",
    "pass_at_k",
    "summarize",
]

MATH_BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva_math", "olympiadbench", "gaokao2023en")
PAPER_AVG16 = ("amc23", "aime24", "aime25")  # the paper reports avg@16 on these, pass@1 elsewhere
VARTRACK = "vartrack"
# The size of the task's own fixed evaluation set, so the CLI reports what training logs as eval/.
VARTRACK_DEFAULT_SIZE = 200
# `--benchmarks` of a trainer checkpoint when none is given: the held-out sets its run evaluated on (`trained_sets`).
TRAINED = "trained"
# The trainer's evaluation seed is the run seed moved by this offset, so it never equals a training seed.
EVAL_SEED_OFFSET = 12345


# ----------------------------------------------------------------------------------------------------
# Pure pieces: the pass@k estimator and answer extraction
# ----------------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct among n samples: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i): every factor lies in (0, 1), so no huge binomials
    and no cancellation; when fewer than k samples are wrong (n - c < k) every k-subset holds a correct one.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        # Floats would make the product silently wrong (pass@k is defined on counts); bool is an int subclass.
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pass_at_k: {name} must be an int, got {value!r}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    # Every k-subset then holds a correct sample: return exactly 1 rather than a product that only rounds to it.
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def extract_answer(kind: str, text: str, *, fallback_last_number: bool = True) -> str | None:
    """The answer the verifier of `kind` compares with the gold one, or None when it finds none.

    math: the last closed \\boxed{...}, else after "answer is"/"Answer:", else (evaluation only, as the
    benchmarks' own graders do) the last math span or number; choice: the letter; text: the boxed content,
    else the text after the answer marker, else (evaluation only) the last math span or number; vartrack: the
    first word after the first `#`; exact: the stripped completion. The same functions as the verifiers
    (lens/answers.py), so the two cannot drift.
    """
    if kind == "math":
        # Delegated, never re-implemented: samples.jsonl must show exactly what the verifier compared.
        return reward.extract_math_answer(text, fallback_last_number=fallback_last_number)
    if kind == "choice":
        return reward.extract_choice(text)
    if kind == "text":
        return answers.extract_final(text, fallback_last_number=fallback_last_number)
    if kind == "vartrack":
        # The first `#` only, the rule of the task's verifier, so the answer shown is the one it scored.
        tokens = text.partition("#")[2].split(maxsplit=1) if "#" in text else []
        return tokens[0] if tokens else None
    if kind == "exact":
        return text.strip() or None
    raise ValueError(f"extract_answer: kind={kind!r}: expected one of {reward.KINDS}")


# ----------------------------------------------------------------------------------------------------
# The core: sample and score one set
# ----------------------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    """Samples and verdicts of one set. P prompts, n samples each, prompt-major as the engines return them.

    rewards: [P, n] float32; lengths: [P, n] int64 response tokens; texts, reasons, finish_reasons: P lists
    of n entries (decoded response, verdict of `REASONS`, "stop" | "length"); seconds: wall time.
    """

    rewards: torch.Tensor
    lengths: torch.Tensor
    texts: list[list[str]]
    reasons: list[list[str]]
    finish_reasons: list[list[str]]
    seconds: float

    @property
    def n(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def accuracy(self) -> float:
        """avg@n = pass@1: the mean reward over all P * n samples."""
        return float(self.rewards.mean())

    def per_problem(self) -> torch.Tensor:
        """[P] mean reward of each problem over its n samples."""
        return self.rewards.mean(dim=1)

    def pass_at(self, k: int) -> float:
        """Mean over problems of the unbiased pass@k (a sample counts as correct when its reward is > 0.5)."""
        # A threshold, not equality with 1.0: rewards are float32, and the estimator needs a yes/no per sample.
        correct = (self.rewards > 0.5).sum(dim=1).tolist()
        return sum(pass_at_k(self.n, int(c), k) for c in correct) / len(correct)

    def verdicts(self) -> dict[str, int]:
        """Count of every verdict of `REASONS` (zeros included, so reports keep stable keys)."""
        counts = Counter(r for row in self.reasons for r in row)
        # Zeros included so results.json of different runs have the same keys and diff cleanly.
        return {r: counts.get(r, 0) for r in REASONS}


def eval_sampling(*, temperature: float, top_p: float, max_tokens: int, seed: int) -> SamplingParams:
    """Sampling of an evaluation from the RUN seed (the trainer's `seed`, the CLI's `--seed`)."""
    return SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed + EVAL_SEED_OFFSET)


def _chunk_sampling(sampling: SamplingParams, first_row: int) -> SamplingParams:
    """The sampling of a batch starting at global row `first_row`: row r then draws from seed + r, as in one call."""
    # Unseeded sampling stays unseeded (None + offset would raise): each call then draws its own seed.
    return sampling if sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + first_row)


# Prompts per generate call of lens.eval and of the trainer's evaluation: a progress bar moves once per batch.
BATCH_PROMPTS = 64


def evaluate_set(
    engine: Engine,
    tokenizer: Any,
    verifier: Verifier,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[str],
    *,
    n: int,
    sampling: SamplingParams,
    batch_size: int | None = None,
    progress: str | None = None,
) -> EvalResult:
    """Sample `n` responses per prompt (token ids) and score them against the gold `answers`.

    batch_size: prompts per generate call (None: all at once). With a seeded `sampling` the samples do not
    depend on it (sample j of prompt i draws from seed + i * n + j); unseeded calls draw a seed per batch.
    progress: the label of a progress bar over the prompts on stderr (None: no bar, as on ranks > 0): tqdm on
    a terminal, a plain line every half minute elsewhere (`lens.console.bar`). It moves once per batch.
    """
    # Checked before sampling: a mismatch found after minutes of generation would waste them all.
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"evaluate: need as many answers as prompts (> 0), got {len(prompts)} and {len(answers)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"evaluate: n={n!r}: expected an int >= 1")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"evaluate: batch_size={batch_size!r}: expected None or an int >= 1")
    start = time.perf_counter()
    # None means one call: the engine then batches as it likes (vLLM schedules internally).
    step = batch_size or len(prompts)
    rewards: list[torch.Tensor] = []
    texts: list[str] = []
    reasons: list[str] = []
    lengths: list[int] = []
    finish: list[str] = []
    # No closing line off a terminal: the caller prints the set's result.
    bar = console.bar(len(prompts), desc=progress, unit="prompt", disable=progress is None, final=False, leave=False)
    for lo in range(0, len(prompts), step):
        chunk = [list(p) for p in prompts[lo : lo + step]]
        # Offset by the global row (lo * n), so batching never changes which seed a sample draws.
        out = engine.generate(chunk, n, _chunk_sampling(sampling, lo * n))
        # Special tokens dropped so an <eos> or chat marker cannot end up inside an extracted answer.
        decoded = tokenizer.batch_decode(out.tokens, skip_special_tokens=True)
        # Golds repeated n times: the engine returns samples prompt-major, n per prompt in a row.
        scored = verifier.score(decoded, [a for a in answers[lo : lo + step] for _ in range(n)])
        rewards.append(scored.rewards)
        texts += decoded
        reasons += scored.item_reasons
        lengths += [len(t) for t in out.tokens]
        finish += out.finish_reasons
        bar.update(len(chunk))
    bar.close()
    rows = len(prompts)
    return EvalResult(
        rewards=torch.cat(rewards).view(rows, n),
        lengths=torch.tensor(lengths, dtype=torch.int64).view(rows, n),
        texts=[texts[i * n : (i + 1) * n] for i in range(rows)],
        reasons=[reasons[i * n : (i + 1) * n] for i in range(rows)],
        finish_reasons=[finish[i * n : (i + 1) * n] for i in range(rows)],
        seconds=time.perf_counter() - start,
    )


def summarize(result: EvalResult, ks: Sequence[int]) -> dict[str, Any]:
    """The metrics of one set for the report; pass@k for every k of `ks` that is <= n."""
    return {
        "problems": int(result.rewards.shape[0]),
        "samples": int(result.rewards.numel()),
        "n": result.n,
        "pass@1": result.accuracy,
        # Both keys on purpose: the paper calls it pass@1, the trainer logs avg@n; they are the same number.
        "avg@n": result.accuracy,
        "pass@k": {str(k): result.pass_at(k) for k in ks if k <= result.n},
        "verdicts": result.verdicts(),
        "mean_response_tokens": float(result.lengths.float().mean()),
        "truncated": sum(f == "length" for row in result.finish_reasons for f in row) / result.rewards.numel(),
        "seconds": result.seconds,
    }


# ----------------------------------------------------------------------------------------------------
# Evaluation sets
# ----------------------------------------------------------------------------------------------------


Rendered = tuple[list[data.RenderedPrompt], list[data.Problem], int]  # prompts, their problems, skipped count


EvalSet = data.ProblemSet  # problems of one reported set, their verifier kind and `{problem}` prompt template


def known_benchmarks() -> list[str]:
    """Names `--benchmarks` accepts: the named sets (evaluation sets first) and the built-in task."""
    # A stable sort on a bool: evaluation sets first, registry order kept within each group.
    by_role = sorted(data.BENCHMARKS.values(), key=lambda s: s.role != "eval")
    return [spec.name for spec in by_role] + list(tasks.NAMES)


def parse_benchmarks(text: str) -> list[str]:
    """A comma-separated list of sets (order kept, duplicates dropped): known names, data files or
    directories, and hub datasets `hf:ORG/NAME[:CONFIG][@SPLIT]`; ValueError on anything else."""
    if text == TRAINED:
        return [TRAINED]
    # dict.fromkeys keeps the first occurrence's order; a repeated set would be sampled and reported twice.
    names = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise ValueError("--benchmarks: empty list")
    known = known_benchmarks()
    # Hub sets are not checked here: that needs the network, and the loader reports a bad one clearly.
    unknown = [b for b in names if b not in known and not b.startswith("hf:") and not Path(b).exists()]
    if unknown:
        raise ValueError(f"--benchmarks: {unknown} are neither known names nor files; known: {', '.join(known)}")
    return names


def load_eval_sets(
    name: str,
    *,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    seed: int = 0,
    problem_key: str = "problem",
    answer_key: str = "answer",
) -> list[EvalSet]:
    """The sets of one benchmark (lens.data.load_sets): a named set, a file or a hub set (its fields named by
    problem_key / answer_key, as the trainer's data keys), or the built-in task's clean and noisy sets, named
    `vartrack_clean`/`vartrack_noisy` and drawn from `seed` (default 200 each)."""
    if name == TRAINED:
        raise ValueError(f"--benchmarks {TRAINED}: only for a trainer checkpoint (--model a run or its checkpoint)")
    if name in tasks.NAMES:
        # The built-in task's sets get a prefix: a bare `clean`/`noisy` row would not say which task it is.
        sets = data.load_sets(name, limit=limit or VARTRACK_DEFAULT_SIZE, seed=seed)
        return [EvalSet(f"{name}_{s.name}", s.kind, s.prompt, s.problems) for s in sets]
    try:
        return data.load_sets(
            name, limit=limit, seed=seed, data_dir=data_dir, problem_key=problem_key, answer_key=answer_key
        )
    except FileNotFoundError as e:  # the CLI reports user errors (ValueError) as one line
        raise ValueError(str(e)) from None


def render_set(
    es: EvalSet, tokenizer: Any, *, template: str, system_prompt: str | None, max_prompt_len: int | None
) -> Rendered:
    """Rendered prompts of a set, their problems (same order) and how many were skipped as too long."""
    rendered, report = data.render_all(
        es.problems,
        tokenizer,
        template=template,
        prompt=es.prompt,
        system_prompt=system_prompt,
        max_prompt_len=max_prompt_len,
    )
    if not rendered:
        raise ValueError(f"{es.name}: no prompt fits --max-prompt-len={max_prompt_len}")
    by_uid = {p.uid: p for p in es.problems}
    return rendered, [by_uid[r.uid] for r in rendered], report.skipped_too_long


# ----------------------------------------------------------------------------------------------------
# Shared command-line pieces (lens.robustness uses them too)
# ----------------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected ints >= 1, got {text!r}")
    return values


def add_common_args(parser: argparse.ArgumentParser, *, default_benchmarks: str) -> None:
    """Model, data, sampling and engine flags shared by `lens.eval` and `lens.robustness`."""
    parser.add_argument("--model", required=True, help="HF checkpoint directory (weights, config, tokenizer)")
    parser.add_argument("--benchmarks", default=default_benchmarks, help="comma-separated names (see --help)")
    parser.add_argument("--n", type=_positive_int, default=1, help="samples per problem")
    # Temperature 1 and top-p 1 by default: avg@n then estimates the policy's own accuracy, as in training.
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=_positive_int, default=4096, help="max response tokens")
    parser.add_argument("--seed", type=int, default=0, help=f"run seed; sampling uses seed + {EVAL_SEED_OFFSET}")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument(
        "--data-dir", default=None, help="where named sets live (default: LENS_DATA_DIR, then ~/.cache/lens/data)"
    )
    parser.add_argument("--limit", type=_positive_int, default=None, help="problems per benchmark (smoke runs)")
    parser.add_argument(
        "--problem-key", default="problem", help="field of the problem text in files (data.problem_key)"
    )
    parser.add_argument("--answer-key", default="answer", help="field of the gold answer in files (data.answer_key)")
    parser.add_argument("--template", default="auto", help="auto | chat | plain | a string with {problem}")
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--max-prompt-len", type=_positive_int, default=None, help="skip longer prompts (tokens)")
    parser.add_argument("--device", default="auto", help="auto (cuda if available) | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bfloat16 on GPU, float32 on CPU) | float32 | ...")
    # 64 bounds the HF engine's memory on long math responses; results do not depend on it (seeded rows).
    parser.add_argument("--batch-size", type=_positive_int, default=BATCH_PROMPTS, help="prompts per generate call")
    parser.add_argument(
        "--no-last-number-fallback",
        action="store_true",
        help="math: no answer unless boxed or marked (the training rule); default: the last number, as benchmarks do",
    )
    parser.add_argument("--out", default=None, help="output directory (default: runs/<tool>/<run>_step<N>)")
    parser.add_argument("--overwrite", action="store_true", help="write into an --out that already holds results")


def check_common_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Turns bad flag values into `parser.error` (exit 2 with the flag named)."""
    # The same model-path check as training: a typo fails in one line, before any data is read.
    preflight.check_model_source(args.model, "--model")
    if args.seed < 0:
        parser.error(f"--seed {args.seed}: expected an int >= 0")
    try:
        args.benchmarks = parse_benchmarks(args.benchmarks)
        # Built once here only to validate: SamplingParams rejects bad values, reported as a flag error.
        eval_sampling(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    args.device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.dtype == "auto":
        # bfloat16 matmuls are slow on most CPUs; on a GPU it halves the weights' memory.
        args.dtype = "float32" if args.device == "cpu" else "bfloat16"


def model_name(path: str | Path) -> str:
    """A short name of a model for output paths. A trainer checkpoint (`runs/x/checkpoints/step_00000040`
    or its `hf/` export) -> `x_step40`, the step read from its meta.json: every export is named `hf`, so
    the directory name alone would send every checkpoint's results to one place. Else the directory's
    name (a hub id ORG/NAME -> NAME)."""
    p = Path(os.path.abspath(path))  # not resolve(): a symlinked export keeps its checkpoint's name
    for checkpoint in (p, p.parent):
        meta = checkpoint / "meta.json"
        if meta.is_file() and checkpoint.parent.name == "checkpoints":
            step = json.loads(meta.read_text(encoding="utf-8"))["step"]
            return f"{checkpoint.parent.parent.name}_step{step}"
    return p.name


def out_dir(args: argparse.Namespace, kind: str) -> Path:
    """--out, default runs/<kind>/<model_name>; ValueError if it already holds files and --overwrite is not
    set, so evaluating step 20 after step 40 never replaces step 40's results."""
    out = Path(args.out) if args.out else Path("runs") / kind / model_name(args.model)
    # An empty existing directory is fine (e.g. made by a wrapper script); only results are protected.
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise ValueError(f"{out} already holds results: give another --out, or --overwrite to replace them")
    return out


def build_engine(args: argparse.Namespace, longest_prompt: int) -> Engine:
    """The rollout engine of `--engine` on the checkpoint (vLLM sized for the longest prompt + --max-tokens)."""
    if args.engine == "vllm":
        return make_engine(
            "vllm", args.model, dtype=args.dtype, seed=args.seed, max_model_len=longest_prompt + args.max_tokens
        )
    return make_engine("hf", args.model, dtype=args.dtype, device=args.device, seed=args.seed)


class Verifiers:
    """One `Verifier` per kind, made on first use (the math one starts worker processes); close() stops all."""

    def __init__(self, *, fallback_last_number: bool = True) -> None:
        self.fallback_last_number = fallback_last_number
        self._by_kind: dict[str, Verifier] = {}

    def __call__(self, kind: str) -> Verifier:
        if kind not in self._by_kind:
            self._by_kind[kind] = Verifier(kind, fallback_last_number=self.fallback_last_number)
        return self._by_kind[kind]

    def close(self) -> None:
        for v in self._by_kind.values():
            v.close()


def run_config(args: argparse.Namespace, sampling: SamplingParams) -> dict[str, Any]:
    """The full configuration of a run for its results file (flags, sampling, date, lens commit)."""
    # --out does not change a number, so it stays out and two runs' configs compare equal.
    config = {k: v for k, v in vars(args).items() if k != "out"}
    # Resolved so a relative path still identifies the checkpoint when the results are read elsewhere.
    config["model"] = str(Path(args.model).resolve())
    config["sampling"] = dataclasses.asdict(sampling)
    config["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    config["lens_commit"] = lens_commit()
    config["argv"] = sys.argv
    return config


def lens_commit() -> str | None:
    """The git commit of this checkout (suffix `-dirty` with uncommitted changes), or None outside git."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, timeout=10)
    # No git, or a hung git (the timeout): the commit is provenance only and must never fail an evaluation.
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def md_text(text: str) -> str:
    """Untrusted text for a Markdown table cell: HTML-escaped, pipes and newlines neutralized."""
    return html.escape(text).replace("|", "\\|").replace("\n", " ")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------------
# The `lens.eval` report
# ----------------------------------------------------------------------------------------------------


def samples_of(
    kind: str, prompts: list[str], problems: list[data.Problem], result: EvalResult, *, fallback_last_number: bool
) -> list[dict[str, Any]]:
    """One record per problem: uid, problem and rendered prompt text, gold answer, samples, the extracted
    answers, rewards and verdicts."""
    return [
        {
            "uid": p.uid,
            "problem": p.problem,
            "prompt": prompt,
            "answer": p.answer,
            "samples": texts,
            "extracted": [extract_answer(kind, t, fallback_last_number=fallback_last_number) for t in texts],
            "rewards": rewards,
            "reasons": reasons,
        }
        for p, prompt, texts, rewards, reasons in zip(
            problems, prompts, result.texts, result.rewards.tolist(), result.reasons, strict=True
        )
    ]


def average_row(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Unweighted mean over sets of the rates and lengths; sums of counts; pass@k for the k every set has."""
    values = list(rows.values())
    # Only k that every set has: averaging pass@16 over the sets with n >= 16 alone would mislead.
    shared_k = set.intersection(*(set(r["pass@k"]) for r in values))
    mean = {key: sum(r[key] for r in values) / len(values) for key in ("pass@1", "avg@n", "mean_response_tokens")}
    return {
        **mean,
        "pass@k": {k: sum(r["pass@k"][k] for r in values) / len(values) for k in sorted(shared_k, key=int)},
        "problems": sum(r["problems"] for r in values),
        "samples": sum(r["samples"] for r in values),
        "verdicts": {v: sum(r["verdicts"][v] for r in values) for v in REASONS},
        "seconds": sum(r["seconds"] for r in values),
    }


def _verdict_cell(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "-"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Lines of a Markdown table; the first column left-aligned, the others right-aligned."""
    rule = "|---|" + "---:|" * (len(header) - 1)
    return ["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(r) + " |" for r in rows)]


def results_markdown(model: str, rows: dict[str, dict[str, Any]], average: dict[str, Any]) -> str:
    """The report: a title naming the model, then one table with a row per set and the average row."""
    ks = sorted({k for r in rows.values() for k in r["pass@k"] if k != "1"}, key=int)
    header = ["benchmark", "n", "problems", "avg@n (pass@1)", *[f"pass@{k}" for k in ks], "mean len", "s", "verdicts"]

    def cells(name: str, r: dict[str, Any], n: str) -> list[str]:
        pass_k = [f"{r['pass@k'][k]:.4f}" if k in r["pass@k"] else "-" for k in ks]
        numbers = [f"{r['mean_response_tokens']:.1f}", f"{r['seconds']:.1f}", _verdict_cell(r["verdicts"])]
        return [name, n, str(r["problems"]), f"{r['pass@1']:.4f}", *pass_k, *numbers]

    body = [cells(md_text(name), r, str(r["n"])) for name, r in rows.items()]
    body.append(cells("**average**", average, "-"))
    return "\n".join([f"# Evaluation of {md_text(model)}", "", *md_table(header, body)]) + "\n"


def samples_per_set(args: argparse.Namespace, name: str) -> int:
    """n of one set: 16 on AMC23/AIME24/AIME25 under --paper-protocol, else --n."""
    return 16 if args.paper_protocol and name in PAPER_AVG16 else args.n


def ks_for(args: argparse.Namespace, n: int) -> list[int]:
    """pass@k sizes of a set with n samples: --k (those <= n), default the powers of 2 up to n."""
    if args.k is not None:
        return [k for k in args.k if k <= n]
    # Powers of 2 up to n: the usual pass@k curve, and k = 1 always included.
    return [2**i for i in range(n.bit_length())]


def _specs(text: str) -> list[str]:
    """The entries of --reward-functions, each checked to be a function's name (`lens.reward_fns.parse_specs`)."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    try:
        reward_fns.parse_specs(specs)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return specs


def _floats(text: str) -> list[float]:
    try:
        return [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def function_row(
    functions: reward_fns.RewardFunctions, prompts: list[str], problems: list[data.Problem], result: EvalResult
) -> dict[str, Any]:
    """The reward functions on every sample of a set -> `reward` (the mean summed reward: the verdict's plus
    the weighted functions', a failed row 0, as training counts it) and per function its mean and errors."""
    n = result.n
    scores = functions.score(
        [p for p in prompts for _ in range(n)],
        [t for row in result.texts for t in row],
        [reward_fns.row_columns(p) for p in problems for _ in range(n)],
    )
    means = reward_fns.means({f"reward/{k}": v for k, v in scores.counts.items()})
    per_fn = {
        name: {"mean": means[f"reward/fn/{name}/mean"], "errors": int(means[f"reward/fn/{name}/errors"])}
        for name in functions.names
    }
    return {"reward": float(scores.apply(result.rewards).mean()), "reward_functions": per_fn}


def trained_checkpoint(path: str | Path) -> Path | None:
    """The trainer checkpoint `--model` names (a step directory holding meta.json and config.yaml), from the
    step directory, its `hf/` export, or the run directory (its newest checkpoint); None for a plain model."""
    p = Path(os.path.abspath(path))
    if (p / "checkpoints").is_dir():
        steps = sorted(
            d for d in (p / "checkpoints").glob("step_*") if (d / "hf").is_dir() and (d / "meta.json").is_file()
        )
        return steps[-1] if steps else None
    for step in (p, p.parent):
        if (step / "meta.json").is_file() and (step / "config.yaml").is_file() and step.parent.name == "checkpoints":
            return step
    return None


def trained_defaults(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    """For a trainer checkpoint, the defaults of the flags the trainer's own evaluation fixes are its run's:
    the held-out sets (`--benchmarks trained`), samples per problem, sampling, seed, rendering and data keys,
    so that `lens.eval --model <checkpoint>` scores what the run logged as `eval/<set>`. Flags still win."""
    known, _ = parser.parse_known_args(argv)
    # An output folder of lens.eval is no model: transformers would fail on it with an unrelated message.
    refuse_tool_output(known.model, "--model", "give a run directory, a checkpoint or a model directory")
    step = trained_checkpoint(known.model)
    if step is None:
        return
    cfg = load_config(step / "config.yaml", validate=False)
    d, r = cfg.data, cfg.rollout
    parser.set_defaults(
        benchmarks=TRAINED,
        n=d.eval_n,
        temperature=r.temperature,
        top_p=r.top_p,
        max_tokens=r.max_tokens,
        seed=cfg.seed,
        template=d.template,
        system_prompt=d.system_prompt,
        max_prompt_len=d.max_prompt_len,
        problem_key=d.problem_key,
        answer_key=d.answer_key,
        trained_from=str(step),
    )


def trained_sets(args: argparse.Namespace) -> list[EvalSet]:
    """The held-out sets the run of `args.trained_from` evaluated on (lens.preflight.load_data on its saved
    config: named sets, the `heldout` split of its training file, data.eval_limit or --limit)."""
    cfg = load_config(Path(args.trained_from) / "config.yaml", validate=False)
    if args.limit is not None:
        cfg.data.eval_limit = args.limit
    _, sets = preflight.load_data(cfg)
    if not sets:
        raise ValueError(f"{args.trained_from}: its run evaluated on no held-out set; name --benchmarks")
    return sets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = errors.ArgumentParser(
        prog="python -m lens.eval",
        description="Evaluate a checkpoint on benchmarks. Known benchmarks: " + ", ".join(known_benchmarks()),
    )
    add_common_args(parser, default_benchmarks=",".join(MATH_BENCHMARKS))
    parser.add_argument("--k", type=_int_list, default=None, help="pass@k sizes, e.g. 1,4,16 (default: 2^i <= n)")
    parser.add_argument("--paper-protocol", action="store_true", help="n=16 on amc23/aime24/aime25, --n elsewhere")
    parser.add_argument(
        "--reward-functions",
        type=_specs,
        default=[],
        help="comma-separated FILE.py:NAME or package.module:NAME, the trainer's reward.functions: their means "
        "are reported beside the accuracy (docs/rewards.md)",
    )
    parser.add_argument(
        "--reward-weights", type=_floats, default=None, help="one weight per --reward-functions entry (default 1.0)"
    )
    parser.set_defaults(trained_from=None)
    trained_defaults(parser, argv)
    args = parser.parse_args(argv)
    check_common_args(parser, args)
    if args.reward_weights is not None and len(args.reward_weights) != len(args.reward_functions):
        parser.error(f"--reward-weights: {len(args.reward_weights)} weights for {len(args.reward_functions)} functions")
    largest_n = max(samples_per_set(args, b) for b in args.benchmarks)
    if args.k is not None and args.k[-1] > largest_n:
        parser.error(f"--k {args.k[-1]} > the largest n ({largest_n}); pass@k needs k <= n")
    return args


def evaluate_one(
    es: EvalSet,
    rendered: Rendered,
    engine: Engine,
    tokenizer: Any,
    verifier: Verifier,
    args: argparse.Namespace,
    sampling: SamplingParams,
    functions: reward_fns.RewardFunctions | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One set through `evaluate_set` (and the reward functions, when given) -> (its report row, its samples
    records)."""
    prompts, problems, skipped = rendered
    n = samples_per_set(args, es.name)
    ids = [r.ids for r in prompts]
    golds = [p.answer for p in problems]
    result = evaluate_set(
        engine, tokenizer, verifier, ids, golds, n=n, sampling=sampling, batch_size=args.batch_size, progress=es.name
    )
    row = {"kind": es.kind, **summarize(result, ks_for(args, n)), "skipped_too_long": skipped}
    if functions is not None:  # the prompts as the trainer decodes them for its functions
        row.update(function_row(functions, tokenizer.batch_decode(ids, skip_special_tokens=True), problems, result))
    fallback = not args.no_last_number_fallback
    return row, samples_of(es.kind, tokenizer.batch_decode(ids), problems, result, fallback_last_number=fallback)


def write_report(out: Path, args: argparse.Namespace, sampling: SamplingParams, rows: dict[str, Any]) -> dict:
    """Writes results.json and results.md, prints the table; returns the results."""
    config = {**run_config(args, sampling), "n_per_benchmark": {name: r["n"] for name, r in rows.items()}}
    results = {"config": config, "benchmarks": rows, "average": average_row(rows)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    table = results_markdown(args.model, rows, results["average"])
    (out / "results.md").write_text(table, encoding="utf-8")
    print(table)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'samples'}/")
    return results


@errors.cli_errors
def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the evaluation, writes results.json / results.md / samples/, prints the table; returns the results."""
    from transformers import AutoTokenizer

    args = parse_args(argv)
    if args.trained_from is not None:  # the export of a run directory or a step directory is its hf/ folder
        args.model = str(Path(args.trained_from) / "hf")
    out = out_dir(args, "eval")
    preflight.check_tokenizer_files(args.model, "--model")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    opts = {"template": args.template, "system_prompt": args.system_prompt, "max_prompt_len": args.max_prompt_len}
    # every data file is read and rendered before the model loads, so bad data fails fast
    keys = {"problem_key": args.problem_key, "answer_key": args.answer_key}
    sets = (
        trained_sets(args)
        if args.benchmarks == [TRAINED]
        else [
            s
            for b in args.benchmarks
            for s in load_eval_sets(b, data_dir=args.data_dir, limit=args.limit, seed=args.seed, **keys)
        ]
    )
    rendered = {s.name: render_set(s, tokenizer, **opts) for s in sets}
    specs = reward_fns.parse_specs(args.reward_functions)
    if specs:  # imported and called on two rows before the model loads: a bad one is one line
        first_prompts, first_problems, _ = rendered[sets[0].name]
        texts = tokenizer.batch_decode([r.ids for r in first_prompts[:2]], skip_special_tokens=True)
        rows_of = reward_fns.columns_of([reward_fns.row_columns(p) for p in first_problems[:2]])
        batch = (tuple(texts), tuple(p.answer for p in first_problems[:2]), rows_of)
        reward_fns.check(specs, batch, timeout_s=reward.DEFAULT_TIMEOUT_S)
    longest = max(len(r.ids) for prompts, _, _ in rendered.values() for r in prompts)
    sampling = eval_sampling(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed)
    # One engine for every set: loading the model once dominates the cost of small sets.
    engine = build_engine(args, longest)
    verifiers = Verifiers(fallback_last_number=not args.no_last_number_fallback)
    functions = (
        reward_fns.RewardFunctions(specs, args.reward_weights, timeout_s=reward.DEFAULT_TIMEOUT_S) if specs else None
    )
    rows: dict[str, dict[str, Any]] = {}
    try:
        for s in sets:
            rows[s.name], records = evaluate_one(
                s, rendered[s.name], engine, tokenizer, verifiers(s.kind), args, sampling, functions
            )
            write_jsonl(out / "samples" / f"{s.name}.jsonl", records)
            r = rows[s.name]
            summed = f", reward with functions {r['reward']:.4f}" if "reward" in r else ""
            print(f"{s.name}: avg@{r['n']} {r['pass@1']:.4f}{summed} ({r['problems']} problems, {r['seconds']:.1f} s)")
    # Closed even on error: the math verifier's worker processes and vLLM's GPU memory outlive us otherwise.
    finally:
        verifiers.close()
        if functions is not None:
            functions.close()
        engine.close()
    return write_report(out, args, sampling, rows)


cli = errors.console_script(main)

if __name__ == "__main__":
    sys.exit(cli())
