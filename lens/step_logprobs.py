"""The fixed log-probs a step's loss compares against, computed once before the update's loop: pi_old of
each row on its SOURCE prompt (LENS Eq. 5's denominator) and pi_ref on its ORIGINAL prompt (the KL).

    pi_old, ref, mask = old_and_ref_logprobs(run, step_groups)   # PiOld, [N, T] or None, [N, T]
    for rows in micro_batches:
        logp = ...                                                # the update's forward of `rows`
        old = pi_old.of(rows, logp)                               # [n, T]

Two kinds of rows: own-prompt rows (sampled from the prompt they train on) take pi_old from the update's
forward itself; the others get a separate pass on their source prompt, or the sampler's log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lens import balance, groups, model
from lens.config import Config
from lens.runstate import Run


def old_and_ref_logprobs(run: Run, sg: groups.StepGroups) -> tuple[PiOld, torch.Tensor | None, torch.Tensor]:
    """pi_old of each row on its SOURCE prompt (LENS Eq. 5's denominator) and pi_ref on its ORIGINAL prompt
    (the KL) -> (PiOld, ref [N, T] or None when beta = 0, mask [N, T]). Own-prompt rows get no pass here."""
    cfg = run.cfg
    # Every log-prob of a sampled token is taken from softmax(z / T), the distribution that sampled it
    # (docs/algorithm.md): at T != 1 the ratio and the KL would otherwise compare the wrong distributions.
    kw = {
        **model.no_grad_batching(cfg, model.unwrap(run.trainer.module).config),
        "temperature": cfg.rollout.temperature,
    }
    device = model.local_device(cfg.device)
    own = own_prompt_rows(cfg, sg)
    with run.timer("old_ref_logprobs"), torch.no_grad():
        if cfg.algorithm.old_logprobs == "engine":  # as sampled: no forward pass
            old, mask = engine_old_logprobs(sg.sampler_logprobs, device)
        else:
            old, mask = _source_logprobs(run, sg, (~own).nonzero().squeeze(1).tolist(), device, **kw)
        # Both passes deal the step's rows over the ranks by tokens (lens.balance): no rank waits on the busiest.
        ref = balance.balanced_logprobs(run.ref, sg.original, sg.tokens, **kw)[0] if cfg.algorithm.beta else None
    width = loss_width(cfg, mask.shape[1])
    ref = _pad_to(ref, width) if ref is not None else None
    return PiOld(_pad_to(old, width), own.to(device)), ref, _pad_to(mask, width)


@dataclass(frozen=True)
class PiOld:
    """pi_old of every row (LENS Eq. 5's denominator), one source per row kind, fixed before the update's loop.

    Own-prompt rows (`own`, from `own_prompt_rows`) take it from the update's forward, which exists only inside
    the loop (an extra pass to have it earlier would cost a forward and change nothing); every other row has it
    in `passed`: a separate pass on its source prompt, or the sampler's log-probs.
    """

    passed: torch.Tensor  # [N, T] fp32; 0 on own-prompt rows
    own: torch.Tensor  # [N] bool

    def of(self, rows: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """pi_old [len(rows), T] of a micro-batch's `rows` [n], given the update's forward `logp` [n, T] on them."""
        return torch.where(self.own[rows, None], logp.detach(), self.passed[rows])


def own_prompt_rows(cfg: Config, sg: groups.StepGroups) -> torch.Tensor:
    """[N] bool: rows whose pi_old the update takes from its own forward instead of a separate pass.

    A row sampled from the prompt the update conditions it on (source == original) has pi_old = the
    update's first forward when the rollout batch is one optimizer step: every micro-batch's forward then runs
    on the weights that sampled the row, on the same inputs (verl does the same). With several optimizer steps
    per batch (optim.mini_batch_size, optim.epochs) later forwards see updated weights, so every row gets the
    separate pass. Rows sampled from a purified prompt always need pi_old on that prompt (LENS Eq. 5); with
    `old_logprobs=engine` the sampler's log-probs are used and nothing is reused.
    """
    several_steps = cfg.optim.optimizer_steps(cfg.data.batch_size) > 1
    if cfg.algorithm.old_logprobs == "engine" or several_steps:
        return torch.zeros(len(sg.tokens), dtype=torch.bool)
    return groups.same_prompts(sg.source, sg.original)


def _source_logprobs(
    run: Run, sg: groups.StepGroups, rows: list[int], device: torch.device, **kw: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old on the source prompt for `rows` only -> (old [N, T] fp32, 0 elsewhere; mask [N, T] of every
    row's response tokens), T = the longest response, as `model.sequence_logprobs` pads."""
    lengths = torch.tensor([len(t) for t in sg.tokens], dtype=torch.int64)
    width = int(lengths.max()) if len(lengths) else 0
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(device)
    old = torch.zeros(len(sg.tokens), width, dtype=torch.float32, device=device)
    # Called with no rows too: under ZeRO-3 every rank runs the same number of forwards (filler rows on a
    # rank with fewer purified rows), or a rank without any would leave the others waiting in a gather.
    part = balance.balanced_logprobs(
        run.trainer.module, [sg.source[i] for i in rows], [sg.tokens[i] for i in rows], **kw
    )[0]
    if rows:
        old[rows, : part.shape[1]] = part
    return old, mask


def engine_old_logprobs(sampler_logp: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old from the sampler (`old_logprobs=engine`): R tensors [len_r] -> logp [R, T] fp32, mask [R, T] bool,
    padded as `model.sequence_logprobs` pads (T = longest response, 0 at padding)."""
    logp = torch.nn.utils.rnn.pad_sequence([t.float() for t in sampler_logp], batch_first=True)
    lengths = torch.tensor([len(t) for t in sampler_logp], dtype=torch.int64)
    mask = torch.arange(logp.shape[1])[None, :] < lengths[:, None]
    return logp.to(device), mask.to(device)


def loss_width(cfg: Config, longest: int) -> int:
    """The time axis T of the loss tensors. seq_mean_token_sum_norm divides by S * T, so T must be the FIXED
    rollout.max_tokens (as Dr. GRPO and TRL do): the rank's or step's longest response would make the
    gradient depend on how rows split over ranks and on one long response."""
    return max(cfg.rollout.max_tokens, longest) if cfg.algorithm.loss_agg == "seq_mean_token_sum_norm" else longest


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[1]))
