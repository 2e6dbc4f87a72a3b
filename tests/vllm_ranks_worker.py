"""A torchrun entry point for tests/test_vllm_ranks.py: one vLLM engine per rank, as the trainer builds them.

    torchrun --nproc_per_node=2 tests/vllm_ranks_worker.py MODEL_DIR OUT_DIR

Each rank joins the trainer's process group (lens.model.setup_distributed), builds its VLLMEngine, perturbs
its own copy of the model with a rank-seeded noise, syncs it into its engine and samples greedily from both
the engine and an HF engine over the same weights. OUT_DIR/rank<r>.json gets where vLLM put the engine's
worker (rank, local rank, executor backend) and both continuations. Not collected by pytest.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the checkout's lens, not an installed one

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from lens import model  # noqa: E402
from lens.rollout import HFEngine, SamplingParams, default_stop_ids, make_engine  # noqa: E402

PROMPTS = [[5, 9, 13], [7, 2, 30, 41, 11, 8, 3], [21, 22, 23, 24, 25]]


def _where(worker: Any) -> dict[str, Any]:
    """(runs in the vLLM worker) Which rank and local rank vLLM gave it, and under which executor."""
    return {
        "rank": worker.rank,
        "local_rank": worker.local_rank,
        "backend": worker.vllm_config.parallel_config.distributed_executor_backend,
    }


def main() -> None:
    model_dir, out_dir = sys.argv[1:]
    rank, _ = model.setup_distributed("cpu")
    engine = make_engine("vllm", model_dir, dtype="float32", max_model_len=128, seed=0)
    where = engine.llm.collective_rpc(_where)[0]
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    noise = torch.Generator().manual_seed(100 + rank)  # each rank trains to other weights
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=noise))
    engine.sync_weights(policy)
    greedy = SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=8, seed=0)
    hf = HFEngine(policy, eos_token_ids=default_stop_ids(model_dir), pad_token_id=0, seed=0)
    result = {
        **where,
        "env_rank": rank,
        "env_local_rank": int(os.environ["LOCAL_RANK"]),
        "vllm": engine.generate(PROMPTS, 1, greedy).tokens,
        "hf": hf.generate(PROMPTS, 1, greedy).tokens,
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
    engine.close()
    if torch.distributed.is_initialized():  # vLLM's shutdown may already have destroyed it
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
