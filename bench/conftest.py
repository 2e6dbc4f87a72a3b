"""pytest setup of the benchmarks: a `device` fixture, the `full` switch, and the summary table.

`pytest bench/ --benchmark-only` runs the CPU set in a few minutes; CUDA-only shapes skip without a
GPU. LENS_BENCH_FULL=1 adds the full-size CPU memory targets (minutes and ~12 GiB of RAM). At the end
every row recorded this session (bench/harness.py) is printed as one table with the ratio to its
hardware floor where the benchmark knows one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

# Kernel modules read TRITON_INTERPRET at import; benchmarks time the real paths, never the interpreter.
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") == "1":
    raise RuntimeError("bench/: unset TRITON_INTERPRET; interpreter timings are meaningless")

FULL = os.environ.get("LENS_BENCH_FULL", "0") == "1"


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device benchmarks run on: the GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if harness.SESSION_ROWS:
        terminalreporter.section("lens benchmark rows (also in bench/results/results.jsonl)")
        terminalreporter.write_line(harness.format_table(harness.SESSION_ROWS))
