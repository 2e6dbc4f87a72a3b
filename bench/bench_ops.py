"""Benchmarks of the native lens ops (csrc/, lens/ops.py) against the eager torch references of lens.algos,
both in the same run.

CPU: N=1024 x T=2048 forward + backward of crpo_loss (target: native >= 3x faster than
lens.algos.crpo_loss(impl="torch"), and no [N, T] temporaries beyond the gradient: see the peak column), plus
the advantages of 128 groups (the Eq. 5 ratio has no op of its own: the loss computes it inside).
CUDA only: N=1024 x T=4096 in bf16 with the floor of reading the inputs once and writing the gradient
once at the measured copy bandwidth.
Also the native loss's thread scaling and its bf16 path against fp32, interleaved (writes
bench/results/ops_cpu_scaling.md): `pytest bench/bench_ops.py -k threads_and_bf16`.
Run: `pytest bench/bench_ops.py --benchmark-only` (rows land in bench/results/results.jsonl).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time

import pytest
import torch
from harness import RESULTS_FILE, copy_bandwidth, git_commit, quantiles, record, run_case

from lens import algos, ops

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not ops.native_available(), reason="lens._C is not built")
gpu_only = pytest.mark.skipif(not CUDA, reason="GPU shapes run only on CUDA")
LOSSES = {impl: functools.partial(algos.crpo_loss, impl=impl) for impl in ("torch", "native")}


def _loss_inputs(n: int, t: int, dtype: torch.dtype, device: torch.device) -> tuple:
    g = torch.Generator(device=device).manual_seed(0)
    logp = -3.0 * torch.rand(n, t, generator=g, device=device)
    old = logp + 0.3 * torch.randn(n, t, generator=g, device=device)
    ref = logp + 0.3 * torch.randn(n, t, generator=g, device=device)
    adv = torch.randn(n, generator=g, device=device)
    weights = torch.rand(n, generator=g, device=device)
    mask = torch.rand(n, t, generator=g, device=device) > 0.2
    return logp.to(dtype), old.to(dtype), ref.to(dtype), adv, weights, mask


def _fwd_bwd(fn, logp: torch.Tensor, *rest: torch.Tensor):
    """Closure: forward + backward of one crpo_loss implementation (the trainer's use)."""
    x = logp.detach().requires_grad_(True)

    def run() -> None:
        x.grad = None
        loss, _ = fn(x, *rest)
        loss.backward()

    return run


def _input_bytes(inputs: tuple) -> int:
    """Bytes read once (logp, old, ref, mask, [N] vectors) plus the gradient written once."""
    return sum(t.numel() * t.element_size() for t in inputs) + inputs[0].numel() * inputs[0].element_size()


@pytest.mark.parametrize("provider", list(LOSSES))
def test_crpo_loss_cpu(benchmark, provider: str) -> None:
    inputs = _loss_inputs(1024, 2048, torch.float32, torch.device("cpu"))
    run_case(
        benchmark,
        "crpo_loss_fwd_bwd",
        provider,
        {"N": 1024, "T": 2048, "dtype": "fp32"},
        _fwd_bwd(LOSSES[provider], *inputs),
        device="cpu",
        grad_bytes=inputs[0].numel() * 4,
    )


@gpu_only
@pytest.mark.parametrize("provider", list(LOSSES))
def test_crpo_loss_cuda(benchmark, provider: str, device: torch.device) -> None:
    inputs = _loss_inputs(1024, 4096, torch.bfloat16, device)
    floor_s = _input_bytes(inputs) / copy_bandwidth(device)
    run_case(
        benchmark,
        "crpo_loss_fwd_bwd",
        provider,
        {"N": 1024, "T": 4096, "dtype": "bf16"},
        _fwd_bwd(LOSSES[provider], *inputs),
        device=device,
        rounds=20,
        floor_s=floor_s,
    )


ADVANTAGES = {
    "torch": lambda r, w, g: algos.weighted_group_advantages_torch(r, w, g),
    "native": lambda r, w, g: ops.weighted_group_advantages(r, w, g),
}


@pytest.mark.parametrize("provider", list(ADVANTAGES))
def test_weighted_advantages_128_groups(benchmark, provider: str, device: torch.device) -> None:
    # 128 prompts x 8 rollouts (+ a few LENS groups larger than m), one launch on CUDA.
    g = torch.Generator().manual_seed(0)
    index = torch.arange(128).repeat_interleave(8)
    rewards = (torch.rand(index.numel(), generator=g) > 0.5).float()
    weights = torch.rand(index.numel(), generator=g)
    args = [x.to(device) for x in (rewards, weights, index)]
    fn = ADVANTAGES[provider]
    run_case(benchmark, "weighted_advantages", provider, {"N": 1024, "G": 128}, lambda: fn(*args), device=device)


# Thread scaling and the bf16 path of the native CPU loss (one thread whatever
# set_num_threads said, bf16 2.5x slower than fp32). Configurations run interleaved, in a rotating
# order, so load on a shared machine falls on all alike; ratios are per round, then median [IQR].
SCALING_SHAPE = (4096, 2048)
SCALING_CONFIGS = [("fp32", 1), ("fp32", 2), ("bf16", 1), ("bf16", 2)]


def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) used so far by each thread of this process (Linux /proc)."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks


def _busiest_share(used: dict[str, int]) -> float:
    """The busiest thread's share of the CPU ticks `used` per thread (summed by `_add_ticks`).

    1.0: one thread did all the work; 0.5: two threads split it evenly. Unlike CPU seconds per wall
    second this does not depend on how much of the machine other processes leave to the call.
    """
    return max(used.values()) / max(1, sum(used.values()))


def _ratio_stats(num: list[float], den: list[float]) -> dict[str, float]:
    ratios = sorted(a / b for a, b in zip(num, den, strict=True))
    q1, med, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return {"median": med, "q1": q1, "q3": q3}


def test_crpo_loss_cpu_threads_and_bf16(rounds: int = 9) -> None:
    n, t = SCALING_SHAPE
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    cpu = torch.device("cpu")
    runs = {cfg: _fwd_bwd(LOSSES["native"], *_loss_inputs(n, t, dtypes[cfg[0]], cpu)) for cfg in SCALING_CONFIGS}
    times: dict[tuple[str, int], list[float]] = {cfg: [] for cfg in SCALING_CONFIGS}
    # Process CPU seconds per wall second of each call: > 1 shows the threads at work even where a
    # loaded machine gives them no spare core to finish sooner.
    busy: dict[tuple[str, int], list[float]] = {cfg: [] for cfg in SCALING_CONFIGS}
    split: dict[tuple[str, int], dict[str, int]] = {cfg: {} for cfg in SCALING_CONFIGS}
    threads = torch.get_num_threads()
    try:
        for cfg, run in runs.items():  # warm-up: allocator, first-touch of the gradient
            torch.set_num_threads(cfg[1])
            run()
        for r in range(rounds):
            order = SCALING_CONFIGS[r % 4 :] + SCALING_CONFIGS[: r % 4]
            for cfg in order if r % 2 == 0 else order[::-1]:
                torch.set_num_threads(cfg[1])
                t0, c0, k0 = time.perf_counter(), time.process_time(), _thread_ticks()
                runs[cfg]()
                times[cfg].append(time.perf_counter() - t0)
                busy[cfg].append((time.process_time() - c0) / times[cfg][-1])
                _add_ticks(split[cfg], k0, _thread_ticks())
    finally:
        torch.set_num_threads(threads)
    ratios = {
        "fp32: 2 threads / 1 thread": _ratio_stats(times["fp32", 2], times["fp32", 1]),
        "bf16: 2 threads / 1 thread": _ratio_stats(times["bf16", 2], times["bf16", 1]),
        "1 thread: bf16 / fp32": _ratio_stats(times["bf16", 1], times["fp32", 1]),
        "2 threads: bf16 / fp32": _ratio_stats(times["bf16", 2], times["fp32", 2]),
    }
    for (dtype, nthreads), samples in times.items():
        med, p20, p80 = quantiles(samples)
        record("crpo_loss_fwd_bwd", f"native x{nthreads}", {"N": n, "T": t, "dtype": dtype}, med, p20, p80, 0, "cpu")
    shares = {cfg: _busiest_share(split[cfg]) for cfg in SCALING_CONFIGS}
    _write_scaling(times, busy, shares, ratios, rounds)
    assert all(math.isfinite(v["median"]) for v in ratios.values())


def _add_ticks(acc: dict[str, int], before: dict[str, int], after: dict[str, int]) -> None:
    """Add the per-thread ticks used between two `_thread_ticks` readings to acc."""
    for tid, tick in after.items():
        acc[tid] = acc.get(tid, 0) + tick - before.get(tid, 0)


def _write_scaling(
    times: dict[tuple[str, int], list[float]],
    busy: dict[tuple[str, int], list[float]],
    shares: dict[tuple[str, int], float],
    ratios: dict[str, dict[str, float]],
    rounds: int,
) -> None:
    lines = [
        "# Native CRPO loss on CPU: threads and bf16 (bench/bench_ops.py::test_crpo_loss_cpu_threads_and_bf16)",
        "",
        f"Forward + backward of `lens.algos.crpo_loss(impl='native')`, N {SCALING_SHAPE[0]} x T {SCALING_SHAPE[1]}, "
        f"{rounds} interleaved rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
        f"(a shared machine: the 2-thread figures need 2 idle cores), commit {git_commit()}.",
        "Busiest thread's share: of the CPU time all threads of the process used during the timed calls "
        "(/proc/self/task), the part of the busiest thread; 0.5 = the work split evenly over two threads, "
        "whatever the load.",
        "",
        "| dtype | threads | median (ms) | CPU s per wall s (median) | busiest thread's share |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {d} | {k} | {1e3 * statistics.median(v):.1f} | {statistics.median(busy[d, k]):.2f} | {shares[d, k]:.2f} |"
        for (d, k), v in times.items()
    ]
    lines += ["", "| ratio | median [IQR] |", "|---|---|"]
    lines += [f"| {name} | {r['median']:.2f} [{r['q1']:.2f}-{r['q3']:.2f}] |" for name, r in ratios.items()]
    (RESULTS_FILE.parent / "ops_cpu_scaling.md").write_text("\n".join(lines) + "\n")
