"""What the tests that launch the trainer as a user would (test_*_processes.py) share: its environment and
how far a run has logged."""

from __future__ import annotations

import json
import os
from pathlib import Path


def trainer_env() -> dict[str, str]:
    """The caller's environment without a torchrun rank of its own (the child must get a fresh one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)  # the trainer's own CPU paths, as a user runs it
    return env


def comparable(rows: list[dict]) -> list[dict]:
    """metrics.jsonl rows without what depends on the machine and not the run: wall and CPU times, the load."""
    machine = ("time/", "cpu/", "load/")
    return [{k: v for k, v in r.items() if not k.startswith(machine) and k != "tokens_per_s"} for r in rows]


def logged_steps(run_dir: Path) -> list[int]:
    """Steps of the complete lines of metrics.jsonl so far (the trainer may be writing the last one)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().split("\n")[:-1]
    except OSError:
        return []
    return [json.loads(line)["step"] for line in lines]
