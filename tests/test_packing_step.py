"""One training step's gradient is the same under row-count, token-budget and padding-free micro-batches, on 1
and 2 ranks under ZeRO-0 and ZeRO-3, for LENS (with purified rows transferred) and for GRPO: the loss is
normalised by global token counts, so how rows are grouped only changes the order of fp32 sums.

tests/packing_worker.py samples the step once per method and runs lens/train.py's `update` under each mode.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import packing_worker
import pytest
import torch

from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
BASE = [f"model.path={vartrack.ASSETS_DIR}", "optim.steps=1", "logging.tensorboard=false"]
# Metrics that are sums or quantiles of per-token values: equal up to the order of summation.
COMPARED = ("loss/total", "loss/pg", "loss/kl", "loss/ratio_mean", "entropy", "tokens")
# The modes' gradients differ only by fp32 rounding (sums in another order, matmuls of other shapes): measured
# 4.5e-8 to 3.9e-7 relative over these tests (-s prints them), so the threshold keeps a margin of 12x. A fault is
# far beyond it: each micro-batch normalised by its own tokens instead of the step's moved LENS's gradient by 2.6
# (relative) in the one-rank ZeRO-0 test.
GRAD_TOLERANCE = 5e-6

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _check(results: list[dict], ranks: int) -> None:
    """Every mode's gradient and metrics equal the row-count mode's, on every rank; LENS moved rows on rank 0."""
    assert sum(r["lens"]["moved"] for r in results) > 0, "no purified row was transferred: LENS would go untested"
    for rank in results:
        for method in ("lens", "grpo"):
            want = rank[method]["rows"]
            grad = want["grad"]
            assert grad.norm() > 0
            for mode in ("budget", "padding_free", "padding_free_rows"):
                got = rank[method][mode]
                rel = float((got["grad"] - grad).norm() / grad.norm())
                print(f"{ranks} ranks, {method} {mode}: relative gradient difference {rel:.2e}")
                assert rel < GRAD_TOLERANCE, f"{method} {mode}: relative gradient difference {rel:.2e} ({ranks} ranks)"
                for key in COMPARED:
                    assert math.isclose(got["metrics"][key], want["metrics"][key], rel_tol=1e-5, abs_tol=1e-7), key
            transfer = {k: v for k, v in rank["lens"]["rows"]["metrics"].items() if k.startswith("transfer/")}
            assert transfer, "the LENS update reported no transfer diagnostics"
            for key, value in transfer.items():
                got = rank["lens"]["padding_free"]["metrics"][key]
                assert math.isclose(got, value, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(got) and math.isnan(value))


@pytest.mark.parametrize("zero", [0, 3])
def test_one_rank_step_gradient_is_the_same_in_every_mode(tmp_path, zero):
    argv = [*BASE, f"optim.zero_stage={zero}", f"run_dir={tmp_path / 'run'}", "data.batch_size=8", "algorithm.m=8"]
    _check([packing_worker.step_gradients(argv, rank=0)], 1)


def _env() -> dict[str, str]:
    skip = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


@pytest.mark.parametrize("zero", [0, 3])
def test_two_ranks_step_gradient_is_the_same_in_every_mode(tmp_path, zero):
    # ~40 s each. Rank 0 purifies all its prompts, rank 1 none: under ZeRO-3 the ranks' micro-batch counts differ
    # by mode and method, and lockstep filler forwards keep them in step.
    argv = [*BASE, f"optim.zero_stage={zero}", f"run_dir={tmp_path / 'run'}", "data.batch_size=16", "algorithm.m=8"]
    worker = str(REPO / "tests" / "packing_worker.py")
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", worker, str(tmp_path), *argv]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _check([torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)], 2)
