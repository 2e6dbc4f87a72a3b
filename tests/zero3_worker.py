"""A torchrun entry point for tests/test_zero3.py: lens/train.py's `main`, with what each rank did recorded.

    torchrun --nproc_per_node=2 tests/zero3_worker.py RECORD_DIR CANDIDATES ROWS [key=value ...]

RECORD_DIR/rank<r>.jsonl gets one line per scoring call ({"scored": K}) and per update ({"rows": N}), so the
test can check that the ranks really did unequal work. Which groups fall below tau, and how many purified
successes join them, depends on sampling, and a test of lockstep must not depend on luck, so both can be
forced per rank: CANDIDATES "4,0" makes rank 0 purify its first 4 prompts and rank 1 none; ROWS "32,24"
trains rank r on at most that many of its rows (the first ones: whole groups when it is a multiple of m).
"-" forces nothing. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the checkout's lens, not an installed one

import torch  # noqa: E402
import torch.distributed  # noqa: E402

from lens import purify, scoring, train  # noqa: E402


def _record(out: Path, **row: int) -> None:
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    record_dir, candidates, rows, *argv = sys.argv[1:]
    rank = int(os.environ.get("RANK", "0"))
    out = Path(record_dir) / f"rank{rank}.jsonl"
    token_scores, update = scoring.token_scores, train.update

    def scored(scorer, policy, ref, prompts, **kw):
        _record(out, scored=len(prompts))
        return token_scores(scorer, policy, ref, prompts, **kw)

    def updated(run, sg, step):
        if rows != "-":
            n = int(rows.split(",")[rank])
            per_row = ("original", "source", "tokens", "sampler_logprobs", "rewards", "group", "weights")
            sg = dataclasses.replace(sg, **{k: getattr(sg, k)[:n] for k in per_row})
        _record(out, rows=len(sg.tokens))
        return update(run, sg, step)

    scoring.token_scores, train.update = scored, updated
    if candidates != "-":
        want = int(candidates.split(",")[rank])

        def forced(a_bar: torch.Tensor, tau: float) -> torch.Tensor:
            del tau
            return torch.arange(len(a_bar)) < want

        purify.needs_purification = forced
    train.main(argv)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
