"""Eager vs torch.compile for the chunked CPU paths of lens_kernels (`_common.py:compiled_or_eager`).

    python bench/bench_cpu_compile.py [--pairs 15]   # -> bench/results/cpu_compile.{json,md}

Decides LENS_KERNELS_COMPILE's default. Cases are the public CPU ops at the default run's head
(the committed tiny model: H 128, V 36, ~1,500 response tokens per micro-batch) and at a real
vocabulary (H 256, V 32,000): forward (the old/ref log-prob and score passes) and forward+backward
(the update). Each pair runs the same op once eagerly and once compiled, in alternating order
(the machine may be shared: interleaving exposes both modes to the same load); the table gives the
median over pairs of compiled / eager and its inter-quartile range. The compile itself is timed apart:
the first compiled call of each case with an empty Inductor cache (TORCHINDUCTOR_CACHE_DIR is pointed
at a fresh temporary directory before torch is imported), minus the eager call's time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lens_inductor_")

import torch

import lens_kernels
from lens_kernels import _common

OUT = Path(__file__).resolve().parent / "results"


def _linear_case(n: int, h: int, v: int, backward: bool) -> Callable[[], None]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) / h**0.5
    targets = torch.randint(0, v, (n,), generator=g)

    def run() -> None:
        hh = hidden.detach().requires_grad_(backward)
        ww = weight.detach().requires_grad_(backward)
        if backward:
            logp, ent = lens_kernels.linear_token_logprobs(hh, ww, targets, return_entropy=True)
            (logp.sum() + 1e-3 * ent.sum()).backward()
        else:
            lens_kernels.linear_token_logprobs(hh, ww, targets)

    return run


def _score_case(n: int, h: int, v: int) -> Callable[[], None]:
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(n, h, generator=g), torch.randn(v, h, generator=g) / h**0.5]
    args += [args[0] + 0.1 * torch.randn(n, h, generator=g), args[1]]
    targets = torch.randint(0, v, (n,), generator=g)
    return lambda: lens_kernels.linear_interference_scores(*args, targets)


def _logits_case(n: int, v: int) -> Callable[[], None]:
    g = torch.Generator().manual_seed(2)
    logits = 3 * torch.randn(n, v, generator=g)
    targets = torch.randint(0, v, (n,), generator=g)

    def run() -> None:
        x = logits.detach().requires_grad_(True)
        logp, ent = lens_kernels.token_logprobs(x, targets, return_entropy=True)
        (logp.sum() + 1e-3 * ent.sum()).backward()

    return run


CASES: dict[str, Callable[[], Callable[[], None]]] = {
    "default head V36: old/ref log-probs (fwd, N 1536, H 128)": lambda: _linear_case(1536, 128, 36, False),
    "default head V36: update (fwd+bwd+entropy, N 1536, H 128)": lambda: _linear_case(1536, 128, 36, True),
    "default head V36: Eq.1 score (N 512, H 128)": lambda: _score_case(512, 128, 36),
    "V4096: update (fwd+bwd+entropy, N 256, H 256)": lambda: _linear_case(256, 256, 4096, True),
    "V32000: log-probs (fwd, N 1024, H 256)": lambda: _linear_case(1024, 256, 32000, False),
    "V32000: update (fwd+bwd+entropy, N 1024, H 256)": lambda: _linear_case(1024, 256, 32000, True),
    "V32000: Eq.1 score (N 1024, H 256)": lambda: _score_case(1024, 256, 32000),
    "V32000: token_logprobs from logits (fwd+bwd, N 512)": lambda: _logits_case(512, 32000),
}


def _timed(fn: Callable[[], None], compiled: bool) -> float:
    _common.COMPILE_MODE = "1" if compiled else "0"
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(fn: Callable[[], None], pairs: int) -> dict[str, float]:
    """First compiled call's extra time, then `pairs` interleaved eager/compiled calls: medians and ratio IQR."""
    eager_first = _timed(fn, False)
    # 0 when the case reuses a graph that an earlier case compiled (one graph per op and chunk width).
    compile_s = max(0.0, _timed(fn, True) - eager_first)
    eager, comp = [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        for compiled in order:
            (comp if compiled else eager).append(_timed(fn, compiled))
    ratios = sorted(c / e for c, e in zip(comp, eager, strict=True))
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return {
        "eager_median_s": statistics.median(eager),
        "compiled_median_s": statistics.median(comp),
        "ratio_compiled_over_eager": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
        "first_compile_s": compile_s,
    }


def write(rows: dict[str, dict[str, float]], pairs: int) -> None:
    meta = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "pairs": pairs,
        "load_avg": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (OUT / "cpu_compile.json").write_text(json.dumps({"meta": meta, "cases": rows}, indent=2) + "\n")
    lines = [
        "# Chunked CPU paths: eager vs torch.compile (bench/bench_cpu_compile.py)",
        "",
        f"torch {meta['torch']}, {meta['threads']} thread(s), {pairs} interleaved pairs per case, "
        f"load average {meta['load_avg'][0]:.1f} (shared machine), {meta['date']}. Ratio < 1: compiled faster. "
        "First compile: the first compiled call minus an eager call; 0 where an earlier case already "
        "compiled the same graph (one per op and chunk width: rows dynamic, columns static). "
        "LENS_KERNELS_COMPILE=auto compiles chunks of >= "
        f"{_common.COMPILE_MIN_ELEMS:,} elements only: the V36 cases run eagerly, the others compiled.",
        "",
        "| case | eager (ms) | compiled (ms) | compiled / eager [IQR] | first compile, empty cache (s) |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {1e3 * r['eager_median_s']:.2f} | {1e3 * r['compiled_median_s']:.2f} | "
            f"{r['ratio_compiled_over_eager']:.2f} [{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}] | "
            f"{r['first_compile_s']:.1f} |"
        )
    (OUT / "cpu_compile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args(argv)
    rows = {}
    for name, make in CASES.items():
        rows[name] = measure(make(), args.pairs)
        print(name, {k: round(v, 5) for k, v in rows[name].items()}, flush=True)
    write(rows, args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
