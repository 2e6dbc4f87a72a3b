"""Data-parallel helpers: rank slices and offsets, one all-reduce, the table of metric reductions,
and stops that every rank takes after the same step.

    lo, hi = rank_slice(len(index), rank(), world())          # this rank's prompts of the global batch
    first = rank_offset(len(local_rows))                       # global index of this rank's first row
    total = all_reduce(float(mask.sum()), "sum")
    row = reduce_metrics(local_row, world())                   # every key reduced as REDUCTIONS declares
    with StopFlag(request_file=run_dir / "STOP") as stop:      # SIGINT/SIGTERM, or `python -m lens.stop`
        for step in ...:
            ...
            if stop.should_stop():                             # collective, once per step on every rank
                break

Every helper is a no-op (or the identity) in one process without torch.distributed. The collectives
run on the process group's device: the current CUDA device under NCCL, the CPU under gloo.
"""

from __future__ import annotations

import fnmatch
import math
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import torch
import torch.distributed as dist

Op = Literal["sum", "max", "min", "mean"]
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "mean": dist.ReduceOp.SUM}


def rank() -> int:
    """This process's rank (0 without torch.distributed)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    """The number of ranks (1 without torch.distributed)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def _device() -> torch.device:
    # NCCL only reduces CUDA tensors; gloo only CPU ones.
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def rank_slice(n: int, rank: int, world: int) -> tuple[int, int]:
    """This rank's contiguous share [lo, hi) of n global items; shares differ by at most one item."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    return n * rank // world, n * (rank + 1) // world


def rank_offset(count: int) -> int:
    """Sum of `count` over the ranks before this one: the global index of this rank's first item.
    Collective: every rank calls it, also with count 0."""
    if world() == 1:
        return 0
    mine = torch.tensor([count], dtype=torch.int64, device=_device())
    counts = [torch.zeros_like(mine) for _ in range(world())]
    dist.all_gather(counts, mine)
    return int(sum(int(c) for c in counts[: rank()]))


def all_gather_objects(obj: Any) -> list[Any]:
    """`obj` of every rank, in rank order (picklable objects; collective). [obj] in one process."""
    if world() == 1:
        return [obj]
    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def all_reduce(value: float | torch.Tensor, op: Op = "sum") -> float | torch.Tensor:
    """`value` reduced over all ranks (sum, max, min or mean): a float for a float, a new tensor for a
    tensor (on the tensor's device). Collective; the identity in one process."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    if world() == 1:
        return value
    is_tensor = isinstance(value, torch.Tensor)
    # float64 on the wire: token counts beyond 2^24 stay exact, and sums of shares lose nothing.
    t = value.detach().clone() if is_tensor else torch.tensor(value, dtype=torch.float64, device=_device())
    dist.all_reduce(t, op=_OPS[op])
    if op == "mean":
        t = t / world()
    return t if is_tensor else float(t)


# ----------------------------------------------------------------------------------------------
# The table of metric reductions
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reduction:
    """How one metric combines over ranks. A mean names `weight`, the key of the local count it is a
    mean over (reduced as the global weighted mean: sum of value * weight / sum of weight); a mean
    without weight counts every rank once."""

    op: Op
    weight: str | None = None


SUM, MAX, MIN = Reduction("sum"), Reduction("max"), Reduction("min")
PER_TOKEN = Reduction("mean", "tokens")
PER_PROMPT = Reduction("mean", "prompts")
PER_ROLLOUT = Reduction("mean", "rollouts")

# Every metric that goes through `reduce_metrics`, declared once, beside the code that produces it: each
# producing module declares its keys (`REDUCTIONS = dist.declare({...})`: lens.metrics, lens.methods,
# lens.train) and this table collects them. Keys with `*` are fnmatch patterns; an exact key wins over a
# pattern. A key found nowhere is an error: a new metric must say how it combines, because the wrong
# default (an average of averages) looks plausible and is silently wrong.
REDUCTIONS: dict[str, Reduction] = {}


def declare(table: Mapping[str, Reduction]) -> dict[str, Reduction]:
    """Add a module's metric reductions to REDUCTIONS -> the table (the module keeps it as its own REDUCTIONS).
    A key may be declared again only with the same reduction (a module imported twice); ValueError otherwise."""
    for key, r in table.items():
        if REDUCTIONS.setdefault(key, r) != r:
            raise ValueError(f"metric {key!r} is declared twice: as {REDUCTIONS[key]} and as {r}")
    return dict(table)


def reduction_of(key: str) -> Reduction:
    """The declared reduction of a metric key; KeyError for a key REDUCTIONS does not declare."""
    if key in REDUCTIONS:
        return REDUCTIONS[key]
    matches = [r for pattern, r in REDUCTIONS.items() if "*" in pattern and fnmatch.fnmatchcase(key, pattern)]
    if not matches:
        raise KeyError(f"metric {key!r} has no reduction over ranks: declare it with lens.dist.declare")
    assert len(matches) == 1, f"metric {key!r} matches several patterns of REDUCTIONS"
    return matches[0]


def reduce_metrics(local: Mapping[str, float], world: int) -> dict[str, float]:
    """This rank's step metrics -> the step's metrics over all ranks, each key reduced as REDUCTIONS
    declares. Keys may be missing on some ranks (a stage that did not run there). Collective when
    world > 1 (two all-reduces and one small all-gather of key names); checks the keys in any case."""
    for key in local:
        weight = reduction_of(key).weight
        if weight is not None and weight not in local:
            raise KeyError(f"metric {key!r} is a mean over {weight!r}, which is missing from the metrics")
    if world == 1:
        return dict(local)
    names: list[Any] = [None] * world
    dist.all_gather_object(names, sorted(local))
    keys = sorted({k for part in names for k in part})
    sums: list[float] = []
    maxes: list[float] = []  # MIN travels as MAX of the negation: one collective for both
    for key in keys:
        r, present = reduction_of(key), key in local
        value = float(local[key]) if present else 0.0
        if r.op == "sum":
            sums.append(value)
        elif r.op == "mean":
            weight = (float(local[r.weight]) if r.weight else 1.0) if present else 0.0
            sums += [value * weight, weight]
        else:
            sign = 1.0 if r.op == "max" else -1.0
            maxes.append(sign * value if present else -math.inf)
    sum_t = all_reduce(torch.tensor(sums, dtype=torch.float64, device=_device()), "sum").tolist()
    max_t = all_reduce(torch.tensor(maxes, dtype=torch.float64, device=_device()), "max").tolist()
    out: dict[str, float] = {}
    for key in keys:
        r = reduction_of(key)
        if r.op == "sum":
            out[key] = sum_t.pop(0)
        elif r.op == "mean":
            total, weight = sum_t.pop(0), sum_t.pop(0)
            out[key] = total / weight if weight else 0.0  # no items anywhere: 0, as the local means do
        else:
            out[key] = max_t.pop(0) * (1.0 if r.op == "max" else -1.0)
    return out


# ----------------------------------------------------------------------------------------------
# Stops
# ----------------------------------------------------------------------------------------------


class StopFlag:
    """SIGINT/SIGTERM or a stop request file ask for a stop after the current step; `should_stop` makes
    every rank agree.

        with StopFlag(request_file=run_dir / "STOP") as stop:   # installs the handlers; restores them on exit
            for step in range(start, steps):
                ...                         # one whole step
                stopping = stop.should_stop()   # collective: all ranks, once per step, same place
                if stopping or step_is_a_save_step:
                    save(...)
                if stopping:
                    print(f"stopped by {stop.cause}")
                    break

    The handler only sets a local flag, and rank 0 looks for `request_file` (written by
    `python -m lens.stop RUN_DIR`); `should_stop` all-reduces both with MAX, so a signal that reached one
    rank (a scheduler, the OOM killer's neighbour, `kill` by hand) or the file stops all ranks after the
    same step and none waits forever in the next collective. Rank 0 removes the file once the stop is
    agreed, so a resumed run trains on. A second signal of the same kind, `repeat_s` or more after the
    first, runs the previous handler (Ctrl-C twice: KeyboardInterrupt at once). One sooner is the same
    request delivered twice: a terminal's Ctrl-C and a scheduler's cancel reach torchrun and the workers,
    and torchrun forwards its own copy; escalating on it would kill a worker before it saves.

    Time limit: torchrun forwards SIGTERM/SIGINT to every worker and SIGKILLs them
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds later (default 30), so the rest of the step plus the
    checkpoint must fit in it; raise it for long steps: `TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600 torchrun ...`
    (a batch scheduler's own grace period, e.g. SLURM's KillWait, still bounds it). torchrun itself exits 1
    after a signal even when every worker saved and exited 0; the request file does not involve it, so
    the job exits 0. Signal handlers can only be installed from the main thread.
    """

    def __init__(
        self,
        signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
        request_file: str | os.PathLike | None = None,
        ignore_after: bool = False,
        repeat_s: float = 2.0,
    ) -> None:
        """ignore_after: after the block, ignore the signals instead of restoring the previous handlers; for a
        process that ends with the block (the trainer script). A stop signal that comes while it tears down,
        after its checkpoint, then does nothing, where the default action would kill it and torchrun would
        report the finished job as failed (and kill the other ranks). Ignored rather than left to this
        handler, because the interpreter puts the default action back as it finalises, and torch's teardown
        runs after that."""
        self.signals = signals
        self.request_file = Path(request_file) if request_file is not None else None
        self.ignore_after = ignore_after
        self.repeat_s = repeat_s
        self.requested: signal.Signals | None = None  # the first signal received, if any
        self._requested_at = 0.0  # time.monotonic() of the first signal
        self.cause: str | None = None  # what stopped the ranks, once `should_stop` returned True
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self.requested is None:
            self.requested, self._requested_at = sig, time.monotonic()
            return
        if self.requested != sig or time.monotonic() - self._requested_at < self.repeat_s:
            return  # another kind, or the same request delivered twice (see the class docstring)
        previous = self._previous[sig]
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # e.g. SIGTERM's default: terminate now
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def __enter__(self) -> StopFlag:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            # None: a handler set from C that Python cannot reinstall; the default is the safe choice.
            restored = previous if previous is not None else signal.SIG_DFL
            signal.signal(sig, signal.SIG_IGN if self.ignore_after else restored)
        self._previous.clear()

    def _file_requests(self) -> bool:
        # Rank 0 alone looks: one stat per step, not one per rank on a shared filesystem, and the run
        # directory is rank 0's (it writes the config, the metrics and the checkpoint metadata there).
        return self.request_file is not None and rank() == 0 and self.request_file.is_file()

    def should_stop(self) -> bool:
        """Whether any rank received a stop signal or rank 0 found the request file (collective: call on
        every rank once per step). When True, `cause` says why, the same on every rank."""
        local = [float(self.requested is not None), float(self._file_requests())]
        # One collective for both causes: MAX of each tells every rank whether anyone saw it.
        by_signal, by_file = all_reduce(torch.tensor(local, dtype=torch.float64, device=_device()), "max").tolist()
        causes = []
        if by_signal:
            causes.append("a signal")
        if by_file:
            causes.append(f"the stop request {self.request_file}")
            if rank() == 0:
                assert self.request_file is not None  # only a rank with a request file can have seen one
                self.request_file.unlink(missing_ok=True)  # honoured: `--resume auto` must not stop again
        self.cause = " and ".join(causes) or None
        return self.cause is not None
