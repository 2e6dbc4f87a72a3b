"""Shared benchmark harness of lens: timing, peak memory, hardware floors, a results file, a summary table.

Used by every `bench/bench_<name>.py` (pytest-benchmark files). Typical use inside a benchmark test:

    row = run_case(benchmark, "token_logprobs", "triton", {"N": n, "V": v}, lambda: fn(x, y), device=dev)

`run_case` times `fn` with pytest-benchmark (CUDA-synchronised, one call per round), measures its peak
memory with a separate call, appends one row to `bench/results/results.jsonl` and returns it.
Rows may carry `floor_s` (a hardware lower bound for the time); `bench/conftest.py` prints every row
of the session as one table with the ratio to the floor. Run: `pytest bench/ --benchmark-only`.

Peak memory:
- CUDA: `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()`, minus the memory
  allocated before the call: the extra memory the call needs on top of its inputs.
- CPU: the torch profiler with `profile_memory=True` records every allocation and free of the torch
  CPU allocator with its size and timestamp; the running sum in time order, maximised, is the exact
  peak of live torch allocations made during the call (inputs allocated before it do not count).
  RSS sampling was rejected: glibc keeps freed pages and a sampler misses short-lived peaks.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

# Rows land in runs/bench/ of the checkout; LENS_BENCH_RESULTS=bench/results updates the committed ones (a plain
# `pytest bench/ --benchmark-only` must leave a clone as it was).
RESULTS_FILE = (
    Path(os.environ.get("LENS_BENCH_RESULTS") or Path(__file__).resolve().parent.parent / "runs" / "bench")
    / "results.jsonl"
)
# Rows recorded in this process, printed as one table by bench/conftest.py at the end of the session.
SESSION_ROWS: list[dict[str, Any]] = []


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work (no-op on CPU) so that wall-clock timings cover the kernels."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of timing samples in seconds (inclusive method: exact for tiny samples)."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    cuts = statistics.quantiles(samples, n=10, method="inclusive")
    return statistics.median(samples), cuts[1], cuts[7]


def interleaved(closures: dict[str, Callable[[], Any]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Wall and process-CPU seconds of `rounds` calls per provider, interleaved in a rotating order.

    On a shared machine the load changes within seconds: every provider of a round sees about the same
    load, so per-round ratios are fair where absolute times are not. One thread: CPU time is the work
    done, which the load inflates less than wall time (it still pays for cache misses).
    """
    names = list(closures)
    out: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order if r % 2 == 0 else order[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            closures[name]()
            out[name]["wall"].append(time.perf_counter() - t0)
            out[name]["cpu"].append(time.process_time() - c0)
    return out


def ratio_quartiles(num: list[float], den: list[float]) -> list[float]:
    """[median, q1, q3] of the per-round ratios num / den."""
    ratios = sorted(a / b for a, b in zip(num, den, strict=True))
    if len(ratios) == 1:
        return [ratios[0]] * 3
    q1, med, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return [med, q1, q3]


def time_fn(fn: Callable[[], Any], device: torch.device | str, *, reps: int = 10, warmup: int = 2) -> list[float]:
    """Wall-clock seconds of `reps` synchronised calls of `fn` after `warmup` calls (own loop)."""
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - t0)
    return samples


def peak_memory(fn: Callable[[], Any], device: torch.device | str) -> int:
    """Peak bytes of torch allocations live during one call of `fn`, above what was live before it."""
    dev = torch.device(device)
    if dev.type == "cuda":
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        fn()
        sync(dev)
        return torch.cuda.max_memory_allocated(dev) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    return max(itertools.accumulate((e.nbytes() for e in events), initial=0))


def copy_bandwidth(device: torch.device | str, nbytes: int = 1 << 30) -> float:
    """Measured device copy bandwidth in bytes/s, counting read + write (the issue's 'copy bandwidth')."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    best = min(time_fn(lambda: dst.copy_(src), device, reps=10, warmup=3))
    return 2 * nbytes / best


def matmul_rate(device: torch.device | str, dtype: torch.dtype = torch.bfloat16, size: int = 8192) -> float:
    """Measured dense matmul rate in FLOP/s for a [size, size] @ [size, size] product."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = min(time_fn(lambda: a @ b, device, reps=10, warmup=3))
    return 2 * size**3 / best


def git_commit() -> str:
    """Short commit of the working tree (read-only git call), or 'unknown' outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def device_name(device: torch.device | str) -> str:
    """Human-readable device: GPU name on CUDA, CPU model and thread count otherwise."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"cpu x{torch.get_num_threads()} ({os.uname().machine})"


def record(
    name: str,
    provider: str,
    shape: dict[str, Any],
    median: float,
    p20: float,
    p80: float,
    peak_bytes: int,
    device: torch.device | str,
    *,
    results_file: Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Append one result row to the results file (JSON lines) and to SESSION_ROWS; return it.

    Times are seconds; `extra` holds anything else worth keeping (floor_s, dtype, notes).
    """
    row = {
        "name": name,
        "provider": provider,
        "shape": shape,
        "median": median,
        "p20": p20,
        "p80": p80,
        "peak_bytes": int(peak_bytes),
        "device": device_name(device),
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
    path = results_file or RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    SESSION_ROWS.append(row)
    return row


def run_case(
    benchmark: Any,
    name: str,
    provider: str,
    shape: dict[str, Any],
    fn: Callable[[], Any],
    *,
    device: torch.device | str,
    rounds: int = 5,
    warmup: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    """Time `fn` with the pytest-benchmark fixture, measure its peak memory, record and return the row.

    With `--benchmark-disable` pytest-benchmark runs `fn` once and keeps no statistics: the harness's
    own loop then provides the timings, so a row is always written.
    """

    def synced() -> None:
        fn()
        sync(device)

    benchmark.pedantic(synced, rounds=rounds, warmup_rounds=warmup, iterations=1)
    stats = getattr(benchmark, "stats", None)
    samples = list(stats.stats.data) if stats is not None else time_fn(fn, device, reps=rounds, warmup=0)
    median, p20, p80 = quantiles(samples)
    peak = peak_memory(fn, device)
    benchmark.extra_info.update({"peak_bytes": peak, "provider": provider, **extra})
    return record(name, provider, shape, median, p20, p80, peak, device, **extra)


def format_table(rows: list[dict[str, Any]]) -> str:
    """One text table of rows: name, provider, shape, median ms, peak MiB, and ratio to floor if known."""
    header = f"{'name':<28} {'provider':<14} {'shape':<34} {'median ms':>10} {'peak MiB':>10} {'x floor':>8}"
    lines = [header, "-" * len(header)]
    for r in rows:
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        ratio = f"{r['median'] / r['floor_s']:.2f}" if r.get("floor_s") else "-"
        lines.append(
            f"{r['name']:<28} {r['provider']:<14} {shape:<34} {r['median'] * 1e3:>10.2f} "
            f"{r['peak_bytes'] / 2**20:>10.1f} {ratio:>8}"
        )
    return "\n".join(lines)
