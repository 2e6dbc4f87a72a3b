"""One step's gradient under every micro-batching, for tests/test_packing_step.py (in-process or under torchrun).

    torchrun --nproc_per_node=2 tests/packing_worker.py OUT_DIR [key=value ...]

The run is set up once (lens/train.py's `setup`, model.padding_free=true so the packed forwards have their
attention). One step's groups are sampled once for LENS (random deletion scores: Eq. 1 is zero before the first
step; rank 0 purifies every prompt, the other ranks none:
purified rows on one rank, unequal scoring and update work across ranks) and once for GRPO. lens/train.py's
`update` then runs on the same groups under each MODE. A global optimizer pre-step hook records the gradient the
optimizer receives (all-reduced; under ZeRO-3 this rank's fp32 partition) and zeroes it: with no weight decay
AdamW's step is then exactly 0, so every mode sees the same weights. OUT_DIR/rank<r>.pt holds, per method and
mode, the gradient and the update's metrics (loss parts, entropy, transfer diagnostics). Not collected by pytest.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the checkout's lens, not an installed one

import torch
import torch.distributed
from torch.optim.optimizer import register_optimizer_step_pre_hook

from lens import dist, methods, purify, train
from lens.config import Config, parse_args

SETUP = ["model.padding_free=true", "optim.weight_decay=0", "optim.grad_clip=0", "data.eval=[]", "data.eval_every=0"]


def modes(cfg: Config) -> dict[str, dict[str, Any]]:
    """(optim, model) overrides per mode; the budget is the smallest valid one (a full prompt + response), so
    that rows split over several micro-batches of different sizes."""
    budget = cfg.data.max_prompt_len + cfg.rollout.max_tokens
    return {
        "rows": {"max_tokens_per_micro_batch": 0, "padding_free": False},
        "budget": {"max_tokens_per_micro_batch": budget, "padding_free": False},
        "padding_free": {"max_tokens_per_micro_batch": budget, "padding_free": True},
        "padding_free_rows": {"max_tokens_per_micro_batch": 0, "padding_free": True},
    }


def _with_mode(cfg: Config, mode: dict[str, Any]) -> Config:
    optim = dataclasses.replace(cfg.optim, max_tokens_per_micro_batch=mode["max_tokens_per_micro_batch"])
    model = dataclasses.replace(cfg.model, padding_free=mode["padding_free"])
    return dataclasses.replace(cfg, optim=optim, model=model)


def _informative_groups(run: Any, tries: int = 8) -> Any:
    """The first step's groups (of steps 0, 1, ...) that carry a gradient and, for LENS, transferred rows: which
    groups have mixed rewards and pass the transfer guard depends on sampling, not on this test."""
    for step in range(tries):
        sg, _ = run.method.sample(run, step)
        moved = any(s != o for s, o in zip(sg.source, sg.original, strict=True))
        mixed = bool((run.method.advantages(sg) != 0).any())
        # Decided over all ranks (some rank has a mixed group, some rank transferred rows): every rank stops at the
        # same step, since sampling runs collectives and one rank ahead would hang the others.
        mixed_anywhere = dist.all_reduce(float(mixed), "max") == 1.0
        if mixed_anywhere and (dist.all_reduce(float(moved), "max") == 1.0 or not run.method.transfers):
            return sg
    raise AssertionError(f"no informative step in {tries} samplings")


def step_gradients(argv: list[str], rank: int) -> dict[str, dict[str, Any]]:
    """{method: {mode: {"grad": [n] fp32, "metrics": update's metrics}}} for this rank."""
    captured: list[torch.Tensor] = []

    def capture(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    captured.append(p.grad.detach().float().flatten().clone())
                    p.grad.zero_()

    purify_all = purify.needs_purification
    purify.needs_purification = lambda a_bar, tau: torch.arange(len(a_bar)) < (len(a_bar) if rank == 0 else 0)
    hook = register_optimizer_step_pre_hook(capture)
    try:
        cfg, _ = parse_args([*SETUP, "algorithm.name=lens", "algorithm.scorer=random", *argv])
        run, *_ = train.setup(cfg)
        grpo_cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, name="grpo"))
        runs = {"lens": run, "grpo": dataclasses.replace(run, cfg=grpo_cfg, method=methods.build(grpo_cfg))}
        out: dict[str, dict[str, Any]] = {}
        for name, r in runs.items():
            sg = _informative_groups(r)
            out[name] = {
                "rows": len(sg.tokens),
                "moved": sum(s != o for s, o in zip(sg.source, sg.original, strict=True)),
            }
            for mode, overrides in modes(r.cfg).items():
                captured.clear()
                metrics = train.update(dataclasses.replace(r, cfg=_with_mode(r.cfg, overrides)), sg, 0)
                out[name][mode] = {"grad": torch.cat(captured), "metrics": metrics}
        run.sampler.close()
        run.verifier.close()
        return out
    finally:
        hook.remove()
        purify.needs_purification = purify_all


def main() -> None:
    out_dir, *argv = sys.argv[1:]
    rank = int(os.environ.get("RANK", "0"))
    torch.save(step_gradients(argv, rank), Path(out_dir) / f"rank{rank}.pt")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
