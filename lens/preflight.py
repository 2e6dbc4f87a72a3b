"""What a run reads before its first step, and `--dry-run`, which checks all of it without loading weights.

    torchrun lens/train.py --config configs/paper_qwen3-4b_lens.yaml --dry-run [key=value ...]

The trainer and the dry-run share these functions, so a preset that passes the dry-run starts: the config is
resolved and validated (for a CUDA machine when the preset asks for one, so a GPU preset can be checked on a
laptop), the tokenizer and the model config are read, every training and held-out problem is loaded through
`lens.data.load_sets` (golds checked) and rendered, every rendered prompt's scorable span is checked to decode
to its problem text, the prompt + response budget is checked against the model's context, and the engines'
configs (DeepSpeed, the sampler) are built. A summary is printed, with the per-GPU memory plan of
`lens.memplan` and its verdict against the device; nothing is trained.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import statistics
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lens import data, reward_fns
from lens.config import HELDOUT, Config, resolve_path
from lens.problem import Problem

HELDOUT_PERCENT, HELDOUT_MAX = 5, 64  # the `heldout` split: 5 % of the training problems, at most 64
# Below this, 5 % rounds down to zero problems; warned about in load_data rather than silently empty.
HELDOUT_MIN_TRAIN = 100 // HELDOUT_PERCENT  # fewer training problems than this give no held-out problem
# A held-out set this small measures accuracy in steps of 5 % or more: warned about, as a noisy instrument.
HELDOUT_WARN_BELOW = 20


@dataclass(frozen=True)
class RenderedSet:
    """A problem set rendered for the model: prompt ids [n][P], scorable spans [n], golds [n], uids [n]."""

    name: str
    kind: str
    ids: list[list[int]]
    spans: list[tuple[int, int]]
    answers: list[str]
    uids: list[str]
    loaded: int  # problems loaded before rendering
    skipped_too_long: int


def _path_like(path: str) -> bool:
    # Hub ids are ORG/NAME or NAME: anything else names a local directory.
    return Path(path).is_absolute() or path.startswith((".", "~")) or path.count("/") > 1 or path.endswith("/")


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id at all: HF would reject it too
        return False


def _hub_reachable() -> bool:
    """False when HF_HUB_OFFLINE is set or huggingface.co cannot be reached in 3 s. Behind a proxy we
    cannot tell without HF's own client, so we say yes and let it try."""
    from huggingface_hub import constants

    # Honour HF's own offline switch first: HF would refuse the download anyway.
    if constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    host = urllib.parse.urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        # 3 s bounds the dry-run on an offline machine; HF's own retries would take about half a minute.
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        return False
    return True


def check_model_source(path: str, key: str) -> None:
    """ValueError in one line naming `key` unless `path` can be loaded: a local directory that exists, or
    a hub id that is in the local HF cache or downloadable. Without this, HF reports a missing local
    directory as a malformed hub id ("Repo id must be in the form ...") and an uncached id on an offline
    machine as three chained tracebacks after half a minute of retries."""
    # A local directory wins over a hub id of the same name, as in from_pretrained.
    if Path(resolve_path(path)).is_dir():
        return
    # Something path-like (or a file) that is not a directory can never be a hub id: report it as a path.
    if _path_like(path) or Path(path).exists():
        raise ValueError(f"{key}={path}: model path {path} does not exist (or is not a directory)")
    if _in_hub_cache(path) or _hub_reachable():
        return
    from huggingface_hub import constants

    raise ValueError(
        f"{key}={path}: hub model id not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and the "
        f"machine is offline; download it where there is network (`hf download {path}`) or set {key} "
        "to a local model directory"
    )


def check_model_paths(cfg: Config) -> None:
    """`check_model_source` for model.path and model.ref_path."""
    for key, path in (("model.path", cfg.model.path), ("model.ref_path", cfg.model.ref_path)):
        if path is not None:
            check_model_source(path, key)


# The files a model folder's tokenizer is read from (one is enough): the tokenizers serialization, a BPE or
# WordPiece vocabulary, a SentencePiece model (tokenizer.model, spiece.model), a tiktoken file.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "*.model", "*.tiktoken")


def check_tokenizer_files(path: str, key: str) -> None:
    """ValueError in one line naming `key` when the local model folder `path` holds no tokenizer: from such a
    folder HF builds an empty tokenizer for some models (every text encodes to no tokens) and fails for others
    with "You need to have sentencepiece or tiktoken installed", which installing either does not cure. A hub
    id is left to HF."""
    folder = Path(resolve_path(path))
    if not folder.is_dir() or any(p.is_file() for pattern in TOKENIZER_FILES for p in folder.glob(pattern)):
        return
    if (folder / "checkpoints").is_dir() or folder.name == "checkpoints" or (folder / "meta.json").is_file():
        hint = "a run directory whose checkpoints have no hf/ export yet: evaluate one that has (checkpoints/step_*/hf)"
    else:
        hint = "save the tokenizer beside the weights (tokenizer.save_pretrained(DIR))"
    raise ValueError(f"{key}={path}: no tokenizer in {folder} (none of {', '.join(TOKENIZER_FILES)}); {hint}")


def load_tokenizer(cfg: Config) -> Any:
    from transformers import AutoTokenizer

    # Checked first so a typo in model.path fails in one line, not in HF's misleading repo-id error.
    check_model_paths(cfg)
    check_tokenizer_files(cfg.model.path, "model.path")
    return AutoTokenizer.from_pretrained(resolve_path(cfg.model.path))


def load_data(cfg: Config) -> tuple[data.ProblemSet, list[data.ProblemSet]]:
    """The training set and the held-out sets, through the one loader (lens.data.load_sets)."""
    d = cfg.data
    train_sets = data.load_sets(
        d.train,
        role="train",
        limit=d.train_size,
        seed=cfg.seed,
        data_dir=d.dir,
        kind=None if d.reward == "auto" else d.reward,  # the override is for training; eval sets keep their own
        split=d.split,
        problem_key=d.problem_key,
        answer_key=d.answer_key,
    )
    if len(train_sets) != 1:
        # A multi-set name (e.g. a benchmark group) would silently train on only its first member.
        raise ValueError(f"data.train={d.train!r}: expected one training set, got {[s.name for s in train_sets]}")
    train, evals = train_sets[0], []
    if d.prompt != "auto":  # the held-out split below inherits it; named eval sets keep their own
        train = dataclasses.replace(train, prompt=d.prompt)
    for name in d.eval or []:
        if name != HELDOUT:
            evals += data.load_sets(name, limit=d.eval_limit, seed=cfg.seed, data_dir=d.dir)
            continue
        # Split after loading (and after data.train_size), so held-out problems are removed from training.
        train, held = split_heldout(train)
        if held.problems:
            # eval_limit trims what is evaluated only; the held-out problems stay out of training all the same.
            evals.append(dataclasses.replace(held, problems=held.problems[: d.eval_limit]))
            if len(held.problems) < HELDOUT_WARN_BELOW and d.eval_every:
                warnings.warn(
                    f"data.eval=[{HELDOUT}]: {train.name} gives {len(held.problems)} held-out problem(s) "
                    f"({HELDOUT_PERCENT} % of {len(train.problems) + len(held.problems)}): its accuracy moves in "
                    f"steps of 1/{len(held.problems)}, too coarse to compare runs; name a set in data.eval",
                    stacklevel=2,
                )
        elif d.eval_every:
            warnings.warn(
                f"data.eval=[{HELDOUT}]: {train.name} has {len(train.problems)} problems, fewer than "
                f"{HELDOUT_MIN_TRAIN}: no held-out split, no evaluation on it (name a set in data.eval)",
                stacklevel=2,
            )
    return train, evals


def heldout_size(n: int) -> int:
    """How many of n training problems the `heldout` split takes: 5 %, at most 64 (none below 20 problems)."""
    return min(HELDOUT_MAX, n * HELDOUT_PERCENT // 100)


def split_heldout(problem_set: data.ProblemSet) -> tuple[data.ProblemSet, data.ProblemSet]:
    """(training set without the held-out problems, the held-out set `<name>_heldout`).

    The held-out problems are those whose uid hashes lowest (of the problems loaded, so after
    data.train_size): the same problems for every seed and file order, so the runs of one study evaluate on
    one set, and never on a problem they train on.
    """
    n = heldout_size(len(problem_set.problems))
    # sha256 rather than hash(): Python's str hash is salted per process and would change the split.
    ranked = sorted(problem_set.problems, key=lambda p: hashlib.sha256(p.uid.encode()).hexdigest())
    held = {p.uid for p in ranked[:n]}
    train = [p for p in problem_set.problems if p.uid not in held]
    heldout = [p for p in problem_set.problems if p.uid in held]
    return (
        dataclasses.replace(problem_set, problems=train),
        dataclasses.replace(problem_set, name=f"{problem_set.name}_{HELDOUT}", problems=heldout),
    )


def data_sources(cfg: Config) -> dict[str, dict[str, Any]]:
    """The fingerprint of every data source of the run, {"train <source>" / "eval <source>": ...}
    (`lens.data.source_fingerprint`); a resumed run compares them (`checkpoint.check_resume_data`)."""
    d = cfg.data
    train = data.source_fingerprint(d.train, role="train", seed=cfg.seed, data_dir=d.dir, split=d.split)
    out = {f"train {d.train}": train}
    for name in d.eval:
        if name == HELDOUT:  # a split of the training set by uid hash: fingerprinted with it
            continue
        out[f"eval {name}"] = data.source_fingerprint(name, role="eval", seed=cfg.seed, data_dir=d.dir)
    return out


def render_set(cfg: Config, tokenizer: Any, problem_set: data.ProblemSet) -> RenderedSet:
    """Problems -> prompts with their scorable spans; over-long ones are skipped with a warning."""
    rendered, report = data.render_all(
        problem_set.problems,
        tokenizer,
        template=cfg.data.template,
        prompt=problem_set.prompt,
        system_prompt=cfg.data.system_prompt,
        max_prompt_len=cfg.data.max_prompt_len,
    )
    if not rendered:
        raise ValueError(
            f"data set {problem_set.name!r}: none of its {len(problem_set.problems)} prompts fits "
            f"data.max_prompt_len={cfg.data.max_prompt_len}"
        )
    if report.skipped_too_long:
        warnings.warn(
            f"data set {problem_set.name!r}: skipped {report.skipped_too_long} prompts longer than "
            f"data.max_prompt_len={cfg.data.max_prompt_len}",
            stacklevel=2,
        )
    # Skipped prompts leave gaps, so golds are looked up by uid rather than by position.
    by_uid = {p.uid: p for p in problem_set.problems}
    return RenderedSet(
        name=problem_set.name,
        kind=problem_set.kind,
        ids=[r.ids for r in rendered],
        spans=[r.scorable for r in rendered],
        answers=[by_uid[r.uid].answer for r in rendered],
        uids=[str(r.uid) for r in rendered],
        loaded=len(problem_set.problems),
        skipped_too_long=report.skipped_too_long,
    )


def check_spans(rendered: RenderedSet, problem_set: data.ProblemSet, tokenizer: Any) -> None:
    """Every scorable span must decode to its problem text: LENS scores and deletes only those tokens, so a
    span shifted into the chat template would purify the template instead (ValueError naming the uid)."""
    by_uid = {p.uid: _squeeze(p.problem) for p in problem_set.problems}
    for ids, (lo, hi), uid in zip(rendered.ids, rendered.spans, rendered.uids, strict=True):
        # Decoding (not comparing token ids) catches a span that is off by a template token even when the
        # tokenizer merges differently at the boundary.
        text = _squeeze(tokenizer.decode(ids[lo:hi]))
        if text != by_uid[uid] and not by_uid[uid].startswith(text):  # a truncated tail is fine
            raise ValueError(f"{uid}: the scorable span decodes to {text[:60]!r}, not the problem text")


def check_reward_functions(cfg: Config, rows: list[Problem], prompts: list[str]) -> None:
    """reward.functions imported and called here on a few training rows and their prompts, each with its gold
    answer as the completion (`lens.reward_fns.check`): a wrong path, name, signature or return value is one
    line before any worker starts."""
    if not cfg.reward.functions:
        return
    specs = reward_fns.parse_specs(cfg.reward.functions)
    columns = reward_fns.columns_of([reward_fns.row_columns(p) for p in rows])
    batch = (tuple(prompts), tuple(p.answer for p in rows), columns)
    reward_fns.check(specs, batch, timeout_s=cfg.reward.timeout_s)


def check_rendered_functions(cfg: Config, tokenizer: Any, rendered: RenderedSet, problem_set: data.ProblemSet) -> None:
    """`check_reward_functions` on the first two rendered training prompts, decoded as the trainer decodes them."""
    by_uid = {p.uid: p for p in problem_set.problems}
    prompts = tokenizer.batch_decode(rendered.ids[:2], skip_special_tokens=True)
    check_reward_functions(cfg, [by_uid[u] for u in rendered.uids[:2]], prompts)


def _squeeze(text: str) -> str:
    """`text` without whitespace: word-level tokenizers (the built-in tasks') decode without the spaces that
    separated their words, and a shifted span differs in its characters, not only in its spaces."""
    return "".join(text.split())


def check_context(cfg: Config, model_config: Any, longest_prompt: int) -> None:
    """Prompt plus response must fit the model's positions: vLLM is started with max_model_len =
    data.max_prompt_len + rollout.max_tokens and refuses a larger one after minutes of loading; the HF engine
    needs only the longest rendered prompt, and silently degrades past the positions it was trained on."""
    # Not every model config declares it: then there is nothing to check against.
    limit = getattr(model_config, "max_position_embeddings", None)
    prompt, what = (
        (cfg.data.max_prompt_len, "data.max_prompt_len")
        if cfg.rollout.engine == "vllm"
        else (longest_prompt, "the longest prompt")
    )
    if limit is not None and prompt + cfg.rollout.max_tokens > limit:
        raise ValueError(
            f"{what} + rollout.max_tokens = {prompt} + {cfg.rollout.max_tokens} > the model's "
            f"max_position_embeddings={limit} ({cfg.model.path})"
        )


def sampler_config(cfg: Config) -> dict[str, Any]:
    """The rollout engine's construction arguments (the trainer builds the engine from exactly these)."""
    r = cfg.rollout
    if r.engine == "vllm":
        return {
            "engine": "vllm",
            "model": resolve_path(cfg.model.path),
            "dtype": cfg.model.dtype,
            "seed": cfg.seed,
            # Sized for the configured maximum, not the longest prompt seen, so held-out prompts fit too.
            "max_model_len": cfg.data.max_prompt_len + r.max_tokens,
            "tensor_parallel_size": r.tensor_parallel_size,
            "gpu_memory_utilization": r.gpu_memory_utilization,
        }
    separate = cfg.optim.zero_stage == 3  # ZeRO-3 shards the trainer's module: sample from an unsharded copy
    return {"engine": "hf", "model": resolve_path(cfg.model.path), "shares_trainer_module": not separate}


def _lengths(rendered: RenderedSet) -> str:
    lengths = [len(ids) for ids in rendered.ids]
    return f"{min(lengths)}/{int(statistics.median(lengths))}/{max(lengths)}"


def dry_run(cfg: Config, *, world_size: int = 1) -> dict[str, Any]:
    """Everything a run reads before its first step, checked; returns (and the CLI prints) the summary."""
    from transformers import AutoConfig

    # lazy: startup, the kernels (Triton) and DeepSpeed: only a dry run needs them, not the launcher's checks
    from lens import memplan
    from lens.model import deepspeed_config  # lazy: startup (DeepSpeed, transformers)

    tokenizer = load_tokenizer(cfg)  # checks the model paths before HF reads any
    model_config = AutoConfig.from_pretrained(resolve_path(cfg.model.path))
    train_set, eval_sets = load_data(cfg)
    sets = []
    for problem_set in (train_set, *eval_sets):
        rendered = render_set(cfg, tokenizer, problem_set)
        check_spans(rendered, problem_set, tokenizer)
        sets.append(rendered)
    train = sets[0]
    check_rendered_functions(cfg, tokenizer, train, train_set)
    longest_prompt = max(len(ids) for s in sets for ids in s.ids)
    check_context(cfg, model_config, longest_prompt)
    # Epochs are over the rendered training prompts: skipped over-long ones are never sampled.
    prompts_seen = cfg.optim.steps * cfg.data.batch_size
    return {
        "model": f"{cfg.model.path} ({model_config.model_type}, {model_config.architectures})",
        "tokenizer": f"{type(tokenizer).__name__}, {len(tokenizer)} tokens, "
        f"chat template: {'yes' if getattr(tokenizer, 'chat_template', None) else 'no'}",
        "algorithm": f"{cfg.algorithm.name} (m={cfg.algorithm.m})",
        "training prompt": f"{train_set.prompt!r} (data.prompt) inside data.template={cfg.data.template}",
        "reward functions": _functions_line(cfg),
        "data": [
            f"{s.name}: {s.loaded} loaded, {len(s.ids)} rendered, {s.skipped_too_long} skipped as too long, "
            f"prompt tokens min/median/max {_lengths(s)}, verifier {s.kind}"
            for s in sets
        ],
        "steps": f"{cfg.optim.steps} x {cfg.data.batch_size} prompts x {cfg.algorithm.m} rollouts = "
        f"{prompts_seen / len(train.ids):.2f} epochs of {len(train.ids)} prompts",
        "optimizer steps": optimizer_steps_note(cfg),
        "deepspeed": deepspeed_config(cfg, world_size),
        "gradient clipping": clipping_note(cfg, deepspeed_config(cfg, world_size)),
        "sampler": sampler_config(cfg),
        "memory": memplan.memory_plan(cfg, model_config, world_size=world_size, longest_prompt=longest_prompt).lines(),
    }


def _functions_line(cfg: Config) -> str:
    """What the dry run says of reward.functions: each with its weight, added to which verifier."""
    r = cfg.reward
    if not r.functions:
        return "none (reward.functions)"
    weights = r.weights if r.weights is not None else [1.0] * len(r.functions)
    listed = ", ".join(f"{w:g} x {f}" for f, w in zip(r.functions, weights, strict=True))
    added = "alone (data.reward=none)" if cfg.data.reward == "none" else "added to the verifier's reward"
    return f"{listed}, {added}; each imported and called on two training rows: ok"


def optimizer_steps_note(cfg: Config) -> str:
    """How many optimizer steps each rollout step takes (docs/algorithm.md, optimizer steps per rollout batch)."""
    o, b = cfg.optim, cfg.data.batch_size
    per = o.optimizer_steps(b)
    if per == 1:
        return f"1 per rollout step (the whole batch of {b} prompts; own-prompt ratios are 1 at the update)"
    return (
        f"{per} per rollout step ({o.mini_batches(b)} mini-batches of {o.mini_batch_size or b} prompts x "
        f"{o.epochs} epochs), {per * o.steps} in the run; the LR schedule counts them"
    )


def clipping_note(cfg: Config, ds: dict[str, Any]) -> str:
    """Who clips the gradient: DeepSpeed (its `gradient_clipping`) or lens itself, which at ZeRO-0 fp32 clips
    before the optimizer step and records the norm (DeepSpeed's 0.0 there is not "no clipping")."""
    if not cfg.optim.grad_clip:
        return "off (optim.grad_clip=0)"
    if ds["gradient_clipping"]:
        return f"optim.grad_clip={cfg.optim.grad_clip}, by DeepSpeed"
    return f"optim.grad_clip={cfg.optim.grad_clip}, by lens itself (DeepSpeed's gradient_clipping 0.0 is left off)"


def print_summary(summary: dict[str, Any]) -> None:
    for key, value in summary.items():
        if isinstance(value, list):
            print(f"{key}:")
            for line in value:
                print(f"  {line}")
        else:
            print(f"{key}: {value}")
    print("dry run: ok (nothing was trained)")
