"""Step metrics and their sinks: success bins, response statistics, stage timers, metrics.jsonl,
TensorBoard, wandb (when configured and installed) and a console progress line with ETA.

    timer = Timer()
    with timer("generate"):
        rollouts = engine.generate(...)
    row = {**success_bins(success_counts(rewards), m), **timer.metrics(), ...}
    with MetricsLogger(run_dir, resume_step=ckpt_step, tensorboard=True) as log, Progress(steps) as bar:
        log.log(step, row); bar.update(step, row)

Success bins generalize the paper's m = 8 bins (Failure 0/8, Low 1-3, Mid 4-6, High 7-8) to any m
with c successes out of m: Failure c = 0, Low 0 < c < m/2, Mid m/2 <= c < 7m/8, High c >= 7m/8.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from lens import algos, console, dist
from lens.checkpoint import latest
from lens.reward import BINS

METRICS_FILE = "metrics.jsonl"
PROGRESS_KEYS = ("reward/mean", "loss/pg", "eval/noisy", "time/step")

# How the metrics this module computes combine over ranks (lens.dist.reduce_metrics).
REDUCTIONS = dist.declare(
    {
        # Local counts (batch_counts, LossMeter): the weights of the means below.
        "tokens": dist.SUM,  # response tokens of this rank's update
        "prompts": dist.SUM,  # groups of this rank's first sampling
        "rollouts": dist.SUM,  # rows of this rank's first sampling
        # crpo_loss divides by the GLOBAL token (or sequence) count, so each rank's loss is its share of
        # the step's objective: the sum over ranks is the objective. Averaging would divide it by world.
        "loss/pg": dist.SUM,
        "loss/total": dist.SUM,
        **{f"loss/{k}": dist.PER_TOKEN for k in ("kl", "clipfrac_low", "clipfrac_high", "clipfrac_dual", "ratio_mean")},
        "entropy": dist.PER_TOKEN,
        "loss/ratio_max": dist.MAX,
        "loss/ratio_min": dist.MIN,
        # PolicyMeter: clip fractions per row kind, weighted by that kind's tokens; approx KL per token.
        "ppo/tokens_own": dist.SUM,
        "ppo/tokens_moved": dist.SUM,
        **{f"ppo/clipfrac_{side}_own": dist.Reduction("mean", "ppo/tokens_own") for side in ("low", "high")},
        **{f"ppo/clipfrac_{side}_moved": dist.Reduction("mean", "ppo/tokens_moved") for side in ("low", "high")},
        "ppo/approx_kl": dist.PER_TOKEN,
        **{f"bins/{name}": dist.PER_PROMPT for name in BINS},
        "zero_variance_share": dist.PER_PROMPT,
        "response/len_mean": dist.PER_ROLLOUT,
        "response/clip_ratio": dist.PER_ROLLOUT,
        "response/len_max": dist.MAX,
        # Computed from every rank's gathered values (TransferMeter): the same number on every rank.
        "transfer/*": dist.MAX,
        "time/*": dist.MAX,  # stage times (Timer): the step waits for the slowest rank
        "cpu/step": dist.MAX,  # CPU seconds of the busiest rank's process in the step (Timer)
        "load/avg1": dist.MAX,  # the machine's load while it ran (the busiest node)
    }
)


# ----------------------------------------------------------------------------------------------
# Step metrics (pure functions)
# ----------------------------------------------------------------------------------------------


def success_counts(rewards: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """rewards [B, m] -> successes per prompt [B] int64 (a success is reward >= threshold)."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, m], got shape {tuple(rewards.shape)}")
    # A threshold, not equality: rewards are floats, and anything at or above full credit is a success.
    return (rewards >= threshold).sum(dim=1)


def success_bins(successes: torch.Tensor, m: int) -> dict[str, float]:
    """Shares of prompts per success bin (see the module docstring); successes [B] int in [0, m]."""
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    c = successes.to(torch.int64)
    if c.numel() and (int(c.min()) < 0 or int(c.max()) > m):
        raise ValueError(f"successes must be in [0, {m}], got range [{int(c.min())}, {int(c.max())}]")
    # Integer comparisons: 2c < m is c < m/2 and 8c >= 7m is c >= 7m/8, with no rounding.
    failure, high = c == 0, 8 * c >= 7 * m
    low = (c > 0) & (2 * c < m)
    mid = ~(failure | low | high)
    # An empty batch gives all-zero shares instead of a division by zero.
    n = max(c.numel(), 1)
    return {f"bins/{name}": float(mask.sum()) / n for name, mask in zip(BINS, (failure, low, mid, high), strict=True)}


def zero_variance_share(rewards: torch.Tensor) -> float:
    """Share of groups (rows of rewards [B, m]) whose rewards are all equal: no GRPO signal."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, m], got shape {tuple(rewards.shape)}")
    if rewards.shape[0] == 0:
        return 0.0
    # Equal rewards give zero group-normalized advantage, so such prompts contribute no policy gradient.
    return float((rewards == rewards[:, :1]).all(dim=1).float().mean())


def response_length_stats(
    lengths: Sequence[int] | torch.Tensor, max_tokens: int, finish_reasons: Sequence[str] | None = None
) -> dict[str, float]:
    """Mean/max response length [R] and the clip ratio: the share cut at max_tokens (finish "length"
    when finish reasons are given, else length >= max_tokens)."""
    lens = torch.as_tensor(lengths, dtype=torch.float64)
    if lens.numel() == 0:
        return {"response/len_mean": 0.0, "response/len_max": 0.0, "response/clip_ratio": 0.0}
    if finish_reasons is not None:
        if len(finish_reasons) != lens.numel():
            raise ValueError(f"finish_reasons ({len(finish_reasons)}) and lengths ({lens.numel()}) differ")
        # Finish reasons are exact; a response that ends with EOS at exactly max_tokens is not clipped.
        clipped = sum(r == "length" for r in finish_reasons) / lens.numel()
    else:
        clipped = float((lens >= max_tokens).double().mean())
    return {
        "response/len_mean": float(lens.mean()),
        "response/len_max": float(lens.max()),
        "response/clip_ratio": clipped,
    }


def batch_counts(rewards: torch.Tensor) -> dict[str, float]:
    """Prompts and rollouts of this rank's sampling (rewards [B, m]): the weights with which
    lens.dist.reduce_metrics averages the per-prompt and per-rollout means over ranks."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, m], got shape {tuple(rewards.shape)}")
    return {"prompts": float(rewards.shape[0]), "rollouts": float(rewards.numel())}


class LossMeter:
    """The loss metrics of one optimizer step on one rank, summed over its micro-batches.

        meter = LossMeter()
        for rows in micro_batches:
            loss, parts = algos.crpo_loss(..., num_tokens=global_tokens)
            meter.add(loss, parts, mask, entropy)
        row.update(meter.metrics())

    `metrics()` has the form REDUCTIONS expects: loss/pg and loss/total as this rank's
    share of the step's objective (crpo_loss already divides by the global count, so shares add up),
    token means (loss/kl, loss/clipfrac_*, loss/ratio_mean, entropy) over this rank's tokens with
    `tokens` as their weight, and loss/ratio_max.
    """

    TOKEN_MEANS = ("kl", "clipfrac_low", "clipfrac_high", "clipfrac_dual", "ratio_mean")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.shares = {"loss/pg": 0.0, "loss/total": 0.0}
        self.token_sums = dict.fromkeys((*(f"loss/{k}" for k in self.TOKEN_MEANS), "entropy"), 0.0)
        self.ratio_max = 0.0

    def add(
        self, loss: torch.Tensor, parts: Mapping[str, torch.Tensor], mask: torch.Tensor, entropy: torch.Tensor
    ) -> None:
        """One micro-batch: its loss, crpo_loss's metrics (means over its tokens), mask [R, T] and
        per-token entropy [R, T]."""
        n = float(mask.sum())
        self.tokens += n
        # Shares are summed, not averaged: crpo_loss already divides by the global token count.
        self.shares["loss/pg"] += float(parts["pg_loss"])
        self.shares["loss/total"] += float(loss.detach())
        for key in self.TOKEN_MEANS:
            # crpo_loss reports means over the micro-batch's tokens: weight them back to sums.
            self.token_sums[f"loss/{key}"] += float(parts[key]) * n
        self.token_sums["entropy"] += float((entropy.detach().float() * mask).sum())
        # A max, not a mean: one exploding ratio is what this metric exists to show.
        self.ratio_max = max(self.ratio_max, float(parts["ratio_max"]))

    def metrics(self, optimizer_steps: int = 1) -> dict[str, float]:
        """This rank's loss metrics (see the class docstring); token means are 0 without tokens. With several
        optimizer steps the shares are each step's objective averaged over the steps (each is normalised by its
        own mini-batch), and the token means and `tokens` run over every pass."""
        shares = {k: v / optimizer_steps for k, v in self.shares.items()}
        means = {k: v / self.tokens if self.tokens else 0.0 for k, v in self.token_sums.items()}
        return {**shares, **means, "tokens": self.tokens, "loss/ratio_max": self.ratio_max}


class PolicyMeter:
    """`lens.algos.policy_terms` summed over a rollout step's micro-batches and optimizer steps -> `ppo/` metrics:
    clip fractions each side for own-prompt and transferred rows (weights `ppo/tokens_own`, `ppo/tokens_moved`),
    the k3 approximate KL(pi_old || pi_theta) and the smallest ratio. With one optimizer step own-prompt rows sit
    at ratio 1 and their clip fractions are 0."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(algos.POLICY_TERMS, 0.0)
        self.ratio_min = math.inf

    def add(self, terms: Mapping[str, float]) -> None:
        for key in self.sums:
            self.sums[key] += terms[key]
        self.ratio_min = min(self.ratio_min, terms["ratio_min"])

    def metrics(self) -> dict[str, float]:
        s = self.sums
        own, moved, tokens = s["tokens_own"], s["tokens_moved"], s["tokens_own"] + s["tokens_moved"]
        return {
            "ppo/tokens_own": own,
            "ppo/tokens_moved": moved,
            "ppo/clipfrac_low_own": s["low_own"] / own if own else 0.0,
            "ppo/clipfrac_high_own": s["high_own"] / own if own else 0.0,
            "ppo/clipfrac_low_moved": s["low_moved"] / moved if moved else 0.0,
            "ppo/clipfrac_high_moved": s["high_moved"] / moved if moved else 0.0,
            "ppo/approx_kl": s["approx_kl"] / tokens if tokens else 0.0,
            "loss/ratio_min": self.ratio_min,
        }


class TransferMeter:
    """The transfer diagnostics of one optimizer step (LENS runs): `lens.algos.transfer_terms` of each
    micro-batch, summarized over every rank by `metrics`.

        meter = TransferMeter()
        for rows in micro_batches:
            meter.add(algos.transfer_terms(logp, old, adv, weights, mask, transferred, loss_config))
        row.update(meter.metrics(dist.all_gather_objects))

    Quantiles do not reduce over ranks, so `metrics` gathers every rank's values (a collective: every rank
    calls it) and returns the same `transfer/` metrics on every rank.
    """

    def __init__(self) -> None:
        self.parts: list[dict[str, torch.Tensor]] = []

    def add(self, terms: Mapping[str, torch.Tensor]) -> None:
        # Kept on CPU in double: they are gathered as Python objects and summed across many micro-batches.
        self.parts.append({k: v.detach().double().cpu() for k, v in terms.items()})

    def local(self) -> dict[str, torch.Tensor]:
        """This rank's terms: ratios concatenated, counts and masses summed."""
        out = {k: torch.cat([p[k] for p in self.parts]) if self.parts else torch.zeros(0) for k in ("ratios", "decide")}
        for k in ("clipped", "adv_mass", "grad_mass"):
            out[k] = torch.stack([p[k] for p in self.parts]).sum(0) if self.parts else torch.zeros(2)
        return out

    def metrics(self, gather: Callable[[Any], list[Any]]) -> dict[str, float]:
        """The step's `transfer/` metrics over all ranks; `gather` is `lens.dist.all_gather_objects`."""
        ranks = gather(self.local())
        merged = {k: torch.cat([r[k] for r in ranks]) for k in ("ratios", "decide")}
        merged.update({k: torch.stack([r[k] for r in ranks]).sum(0) for k in ("clipped", "adv_mass", "grad_mass")})
        return algos.transfer_summary(**merged)


def throughput(num_tokens: int, seconds: float) -> float:
    """Tokens per second (0 when no time elapsed)."""
    return num_tokens / seconds if seconds > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# Stage timer
# ----------------------------------------------------------------------------------------------


class Timer:
    """Wall-clock seconds per named stage, summed over repeated entries until `reset`; for the whole `step`
    also this process's CPU seconds and the machine's load, so that step times of runs made on a busy and
    an idle machine are not read as a difference between methods.

    On CUDA the device is synchronized at both ends so asynchronous kernels count to their stage.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.cpu_step: float | None = None

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        _sync()
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            _sync()
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - start
            if name == "step":
                self.cpu_step = time.process_time() - cpu_start

    def metrics(self, prefix: str = "time/") -> dict[str, float]:
        """{prefix + stage: seconds}, and after a `step`: `cpu/step` (CPU seconds of this process, all its
        threads) and `load/avg1` (the 1-minute load average, where the platform has one)."""
        out = {f"{prefix}{k}": v for k, v in self.totals.items()}
        if self.cpu_step is not None:
            out["cpu/step"] = self.cpu_step
            with contextlib.suppress(OSError, AttributeError):  # no load average on this platform
                out["load/avg1"] = os.getloadavg()[0]
        return out

    def reset(self) -> None:
        """Forget all totals (call at the start of a step)."""
        self.totals.clear()
        self.cpu_step = None


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------
# Sinks
# ----------------------------------------------------------------------------------------------


def _scalar(value: Any) -> float | None:
    # JSON has no NaN/inf: non-finite values are written as null.
    value = float(value.item() if isinstance(value, torch.Tensor) else value)
    return value if math.isfinite(value) else None


def truncate_jsonl(path: Path, keep_through_step: int | None) -> None:
    """Keep the rows of a metrics file with step <= keep_through_step (None: none), atomically."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a row torn by a kill mid-write
            continue
        if keep_through_step is not None and isinstance(row, dict) and row.get("step", math.inf) <= keep_through_step:
            kept.append(line + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` to `path` and fsync it, whole or not at all: a write that fails part-way (a full disk
    takes what fits, then raises or returns short) is cut back off, so no torn row stays in the file."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"wrote {written} of {len(data)} bytes", str(path))
            # fsync each row: a run killed mid-step then loses at most the row being written.
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # shrinking needs no free space
            raise
    finally:
        os.close(fd)


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def disk_full_message(run_dir: Path, doing: str) -> str:
    """The one line of a full disk outside a save: the disk, what failed, and the checkpoint to resume from."""
    good = latest(run_dir)
    return (
        f"disk full at {run_dir} (filesystem {_mount_point(run_dir)}) while {doing}; metrics.jsonl keeps "
        f"every whole row; the last good checkpoint is {good if good is not None else 'none (nothing was saved yet)'}; "
        "free some space and resume with --resume auto"
    )


class MetricsLogger:
    """One JSON object per `log(step, metrics)` in <run_dir>/metrics.jsonl, plus TensorBoard and wandb.

    resume_step: the step of the checkpoint resumed from; rows (and TensorBoard events) after it are
    dropped so a resumed run writes each step once. None: a run that starts at step 0 (fresh, or resumed
    before its first checkpoint): the file starts empty and earlier TensorBoard events are purged. A row is
    written whole or not at all (`append_whole`); a full disk is one ValueError naming the disk and the last
    good checkpoint.
    enabled=False (ranks other than 0) makes every call a no-op.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        resume_step: int | None = None,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        wandb_run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        self._tb = self._wandb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._disk_full_is_one_line("rewriting metrics.jsonl for the resume"):
            truncate_jsonl(self.path, resume_step)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # TensorBoard hides the events of earlier files from purge_step on (0: every one of a run started over).
            purge = resume_step + 1 if resume_step is not None else 0
            self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=purge)
            if config is not None:  # the TEXT tab shows what ran beside the curves (indented: a code block)
                text = json.dumps(dict(config), indent=2, default=str)
                self._tb.add_text("config", "\n".join(f"    {line}" for line in text.splitlines()), purge)
        if wandb_project:
            self._wandb = _init_wandb(Path(run_dir), wandb_project, wandb_run_name, config)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append one row {"step": step, **metrics} (values as floats; non-finite as null)."""
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _scalar(v) for k, v in metrics.items()}}
        with self._disk_full_is_one_line(f"logging step {step}"):
            append_whole(self.path, (json.dumps(row) + "\n").encode())
            if self._tb is not None:
                for key, value in row.items():
                    if key != "step" and value is not None:
                        self._tb.add_scalar(key, value, global_step=step)
                self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if k != "step"}, step=int(step))

    @contextlib.contextmanager
    def _disk_full_is_one_line(self, doing: str) -> Iterator[None]:
        """A full disk (or quota) while writing the logs -> one ValueError naming the disk and the last good
        checkpoint (the run is then resumed from it); any other OSError propagates."""
        try:
            yield
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ValueError(disk_full_message(self.path.parent, doing)) from error

    def close(self) -> None:
        """Flush and close the sinks."""
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        self._tb = self._wandb = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _init_wandb(run_dir: Path, project: str, name: str | None, config: Mapping[str, Any] | None) -> Any:
    try:
        import wandb
    except ImportError:
        warnings.warn("logging.wandb_project is set but wandb is not installed: not logging to wandb", stacklevel=3)
        return None
    # A stable run id in the run directory makes a resumed run continue the same wandb run.
    id_file = run_dir / "wandb_id"
    run_id = id_file.read_text().strip() if id_file.exists() else wandb.util.generate_id()
    id_file.write_text(run_id)
    return wandb.init(project=project, name=name, id=run_id, resume="allow", config=dict(config or {}))


# ----------------------------------------------------------------------------------------------
# Console
# ----------------------------------------------------------------------------------------------


def format_metrics(metrics: Mapping[str, Any], keys: Sequence[str] = PROGRESS_KEYS) -> str:
    """`reward/mean=0.412 time/step=1.53` for the keys present (4 significant digits)."""
    parts = []
    for key in keys:
        if key in metrics and metrics[key] is not None:
            parts.append(f"{key}={float(metrics[key]):.4g}")
    return " ".join(parts)


class Progress:
    """A bar over optimizer steps with ETA and the key numbers of the last step (rank 0 only): tqdm on a
    terminal, plain periodic lines elsewhere (`lens.console.bar`: a log file holds no carriage returns).

    The rate and ETA leave out the first step of the process: that step carries the one-time warm-up
    (allocator, lazy imports, any compile: `time/warmup`) and at the default run is several times a
    steady step, so counting it predicted many times the real remaining time. The bar's clock restarts
    after it, and the rate is the plain average over the steps since (smoothing 0), not an EMA that
    the warm-up step would dominate. terminal: None asks stderr (tests force a kind).
    """

    def __init__(
        self,
        total_steps: int,
        *,
        initial: int = 0,
        keys: Sequence[str] = PROGRESS_KEYS,
        enabled: bool = True,
        terminal: bool | None = None,
    ) -> None:
        self.keys = tuple(keys)
        self._warm = False
        # A warning printed while the bar is drawn would be glued onto it: shown above it instead.
        self._showwarning = warnings.showwarning
        if enabled:
            warnings.showwarning = self._above_bar
        self._bar = console.bar(
            total_steps,
            initial=initial,
            desc="lens",
            unit="step",
            disable=not enabled,
            terminal=terminal,
            dynamic_ncols=True,
            smoothing=0,
        )

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Advance to `step` (1-based count of finished steps) and show the key numbers; a step in which no
        group carried signal (every group's rollouts rewarded alike: zero advantages) is said above the bar."""
        if metrics.get("zero_variance_share") == 1.0 and not self._bar.disable:  # tqdm.write prints on every rank
            self.write(f"step {step}: no group carries signal (each group's rollouts got one reward): nothing learned")
        self._bar.set_postfix_str(format_metrics(metrics, self.keys), refresh=False)
        self._bar.update(step - self._bar.n)
        if not self._warm and not self._bar.disable:  # a disabled bar (ranks > 0) keeps no clock
            self._warm = True
            # tqdm's average rate is (n - initial) / (now - start_t): restart both after the warm-up step.
            self._bar.initial = self._bar.n
            self._bar.start_t = self._bar.last_print_t = self._bar._time()

    def write(self, line: str) -> None:
        """Print a line above the bar (e.g. an evaluation result)."""
        self._bar.write(line)

    def _above_bar(self, *args: Any, **kwargs: Any) -> None:
        from tqdm import tqdm

        with tqdm.external_write_mode():
            self._showwarning(*args, **kwargs)

    def close(self) -> None:
        """Close the bar (and give warnings back their own printer)."""
        if warnings.showwarning == self._above_bar:
            warnings.showwarning = self._showwarning
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (e.g. the closing summary): columns padded, floats with 4 significant digits."""
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([line, sep, *body])
