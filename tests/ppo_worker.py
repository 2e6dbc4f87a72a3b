"""One rollout step with several optimizer steps, for tests/test_ppo_update.py (in-process or under torchrun).

    torchrun --nproc_per_node=2 tests/ppo_worker.py OUT_DIR [key=value ...]      # runs in OUT_DIR/<method>

For each method (GRPO, DAPO, LENS with purified rows transferred: rank 0 purifies every prompt, as in
tests/packing_worker.py) the run is set up afresh, one step's groups are sampled, and lens/train.py's `update`
runs on them with the mini-batches and epochs of the command line. OUT_DIR/rank<r>.pt holds, per method, the
weights before and after (gathered under ZeRO-3), this rank's rows and the update's metrics: everything the test
needs to recompute the update from the equations. Not collected by pytest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the checkout's lens, not an installed one
    sys.path.insert(1, str(Path(__file__).resolve().parent))

import packing_worker
import torch
import torch.distributed

from lens import purify, train
from lens.config import parse_args

METHODS = ("grpo", "dapo", "lens")
SETUP = ["optim.grad_clip=0", "data.eval=[]", "data.eval_every=0", "logging.tensorboard=false"]


def weights(run: Any) -> dict[str, torch.Tensor]:
    """The policy's parameters by name, fp32 copies of the full tensors (gathered under ZeRO-3)."""
    module = run.trainer.module
    if run.cfg.optim.zero_stage != 3:
        return {k: p.detach().float().clone() for k, p in module.named_parameters()}
    import deepspeed  # lazy: startup

    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        return {k: p.detach().float().clone() for k, p in module.named_parameters()}


def one_method(method: str, argv: list[str], root: Path) -> dict[str, Any]:
    cfg, _ = parse_args([*SETUP, f"algorithm.name={method}", f"run_dir={root / method}", *argv])
    run, *_ = train.setup(cfg)
    sg = packing_worker._informative_groups(run)
    before = weights(run)
    metrics = train.update(run, sg, 0)
    out = {
        "before": before,
        "after": weights(run),
        "metrics": metrics,
        "rows": {k: getattr(sg, k) for k in ("original", "source", "tokens", "rewards", "group", "weights")},
        "transferred": sg.transferred,
        "advantages": run.method.advantages(sg),
        "loss": cfg.algorithm.loss_config(),
        "optim": cfg.optim,
        "seed": cfg.seed,
        "batch_size": cfg.data.batch_size,
        "temperature": cfg.rollout.temperature,
    }
    run.sampler.close()
    run.verifier.close()
    return out


def run_all(argv: list[str], rank: int, root: Path) -> dict[str, dict[str, Any]]:
    purify_all = purify.needs_purification
    purify.needs_purification = lambda a_bar, tau: torch.arange(len(a_bar)) < (len(a_bar) if rank == 0 else 0)
    try:
        return {m: one_method(m, [*argv, "algorithm.scorer=random"] if m == "lens" else argv, root) for m in METHODS}
    finally:
        purify.needs_purification = purify_all


def main() -> None:
    out_dir, *argv = sys.argv[1:]
    rank = int(os.environ.get("RANK", "0"))
    torch.save(run_all(argv, rank, Path(out_dir)), Path(out_dir) / f"rank{rank}.pt")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
