"""Models for the trainer: HF loading, the DeepSpeed engine, the LR schedule and the log-prob passes.

    policy, ref = load_models(cfg, device)                    # after setup_distributed(device)
    train = build_engine(policy, cfg)                         # DeepSpeed, torch AdamW client optimizer
    logp, mask = sequence_logprobs(train.engine, prompts, responses, temperature=1.0, **batching(cfg))
    train.backward(loss); grad_norm = train.step()

Log-probs never materialize [n, V] logits: the decoder gives last hidden states, and
`lens_kernels.linear_token_logprobs` / `linear_interference_scores` fuse the LM head with the
log-softmax, on the positions that are needed only. The fused head runs *as the lm_head module*
(its forward is swapped for the duration of the call) so DeepSpeed ZeRO-3's module hooks gather and
release its weight exactly as for a normal forward, with gradients.

Micro-batches (`micro_batches`, lens/packing.py): `optim.micro_batch_size` rows in rollout order, or under
`optim.max_tokens_per_micro_batch` rows grouped by length and packed so that every forward computes (nearly)
only real tokens; with `model.padding_free` the rows of a micro-batch are concatenated into one sequence
(lens/attention.py) and not even the spread of lengths inside it is padded. Results come back in row order.

Lockstep under ZeRO-3: every forward of a partitioned model is a collective (each layer all-gathers its
shards), so every rank must run the same number of them. `micro_batches` pads a rank's list to the largest
count over the ranks with empty micro-batches; one of those (or one with nothing to predict) runs on `FILLER`
rows whose outputs are dropped and whose loss, sliced to zero rows, adds zero gradient. The update's loop
(lens/train.py) walks the same `micro_batches`.

DeepSpeed (measured on CPU machines): a torch AdamW client optimizer avoids the ~95 s fused-Adam JIT build; the
shared-memory all-reduce build (~60 s) is skipped; gloo on CPU, nccl on GPU; one process works without
torchrun (the env vars of a 1-rank group are set). Gradient accumulation is caller-owned
(`managed_gradient_accumulation: false`): any number of `backward` calls, then one `step`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

import lens_kernels
from lens import attention, dist, memplan, packing
from lens.config import Config, resolve_padding_free, resolve_path

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------
# Distributed setup and loading
# ----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_distributed(device: str | torch.device) -> tuple[int, int]:
    """Initialize torch.distributed through DeepSpeed (gloo on CPU, nccl on GPU) -> (rank, world_size).

    Without torchrun the env vars of a one-rank group are set first. Idempotent.
    """
    import deepspeed

    launched = "WORLD_SIZE" in os.environ  # by torchrun (or another launcher that sets the env contract)
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    # `import deepspeed.comm.torch as m` binds the torch package, not the module.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    cuda = torch.device(device).type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not torch.distributed.is_initialized():
        if not launched:
            # One process needs no rendezvous: an in-memory store cannot lose a race for a TCP port to
            # another process on the machine (a free port found above may be taken before it is bound).
            torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def local_device(device: str) -> torch.device:
    """`cuda` -> this rank's GPU (LOCAL_RANK); `cpu` -> cpu."""
    if device == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(device)


def load_model(
    path: str,
    *,
    dtype: torch.dtype,
    device: torch.device,
    attn_implementation: str = "sdpa",
    trainable: bool = True,
    gradient_checkpointing: bool = False,
) -> nn.Module:
    """An HF causal LM from a directory or hub id. trainable=False: eval mode, no parameter grads."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        resolve_path(path), dtype=dtype, attn_implementation=attn_implementation
    )
    if attn_implementation == attention.VARLEN_SDPA:
        attention.check_model(model.config)
    model.to(device)
    if trainable:
        model.train()
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
    else:
        model.eval().requires_grad_(False)
    return model


def load_models(cfg: Config, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """(policy, frozen reference). Under ZeRO-3 both load partitioned (HF's zero.Init integration)."""
    dtype = DTYPES[cfg.model.dtype]
    impl = attention.load_implementation(cfg.model.attn_implementation, padding_free(cfg))
    kw = {"dtype": dtype, "device": device, "attn_implementation": impl}
    with _zero3_loading(cfg):
        policy = load_model(cfg.model.path, gradient_checkpointing=cfg.model.gradient_checkpointing, **kw)
        ref = load_model(cfg.model.ref_path or cfg.model.path, trainable=False, **kw)
    return policy, ref


@contextlib.contextmanager
def _zero3_loading(cfg: Config) -> Iterator[None]:
    # transformers partitions weights at load time while an HfDeepSpeedConfig with stage 3 is alive;
    # otherwise every rank would first hold the whole model.
    if cfg.optim.zero_stage != 3:
        yield
        return
    from transformers.integrations import HfDeepSpeedConfig

    keep_alive = HfDeepSpeedConfig(deepspeed_config(cfg))
    try:
        yield
    finally:
        del keep_alive


# ----------------------------------------------------------------------------------------------
# DeepSpeed engine and schedule
# ----------------------------------------------------------------------------------------------


def deepspeed_config(cfg: Config, world_size: int | None = None) -> dict[str, Any]:
    """The DeepSpeed config dict for `cfg` (ZeRO stage, bf16, clipping; caller-owned accumulation)."""
    world = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    o = cfg.optim
    bf16 = cfg.model.dtype == "bfloat16"
    zero: dict[str, Any] = {"stage": o.zero_stage}
    if o.zero_stage == 3:
        zero |= {"stage3_gather_16bit_weights_on_model_save": False, "stage3_param_persistence_threshold": 1e4}
    return {
        "train_micro_batch_size_per_gpu": o.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": o.micro_batch_size * world,
        "managed_gradient_accumulation": False,
        # ZeRO-0 fp32 clips in lens (see _ClipAndRecord): DeepSpeed would clip there but drop the norm.
        "gradient_clipping": o.grad_clip if (o.zero_stage > 0 or bf16) else 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    kind: str,
    *,
    total_steps: int,
    warmup_steps: int = 0,
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """`constant` (after an optional linear warmup) or `warmup_cosine` (linear warmup, then cosine from
    lr to lr * min_lr_ratio at total_steps). Step s (0-based) runs at lr * factor(s)."""
    if kind not in ("constant", "warmup_cosine"):
        raise ValueError(f"optim.scheduler={kind!r}: expected constant or warmup_cosine")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class _ClipAndRecord:
    """Optimizer step pre-hook for ZeRO-0 fp32: grads are all-reduced when the client optimizer steps,
    so clip there and keep the global norm (DeepSpeed's own ZeRO-0 clipping discards it)."""

    def __init__(self, params: list[nn.Parameter], max_norm: float) -> None:
        self.params, self.max_norm, self.norm = params, max_norm, float("nan")

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        max_norm = self.max_norm if self.max_norm > 0 else float("inf")
        self.norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))


class TrainEngine:
    """The DeepSpeed engine with lens's step contract.

    Losses handed to `backward` are already normalized by global (all ranks) token counts, so the
    gradient wanted is the SUM over ranks; DeepSpeed averages, hence the factor world_size.
    """

    def __init__(self, engine: Any, optimizer: torch.optim.Optimizer, scheduler: Any, probe: Any) -> None:
        self.engine, self.optimizer, self.scheduler, self._probe = engine, optimizer, scheduler, probe
        self.world_size = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1

    @property
    def module(self) -> nn.Module:
        """The HF model inside the engine."""
        return self.engine.module

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate d loss / d params (one micro-batch); call `step` after the last one."""
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)

    def step(self) -> float:
        """All-reduce/partition grads, clip, AdamW step, LR schedule step -> global grad norm (pre-clip)."""
        self.engine.step()
        norm = self.engine.get_global_grad_norm() if self._probe is None else self._probe.norm
        return float(norm) if norm is not None else float("nan")

    @property
    def lr(self) -> float:
        """Learning rate of the next step."""
        return float(self.optimizer.param_groups[0]["lr"])


def build_engine(policy: nn.Module, cfg: Config) -> TrainEngine:
    """deepspeed.initialize with a torch AdamW client optimizer and the LR schedule of `cfg.optim`."""
    import deepspeed

    o = cfg.optim
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    # The schedule counts optimizer steps; its keys count rollout steps (optim.steps, optim.warmup_steps).
    per_step = o.optimizer_steps(cfg.data.batch_size)
    scheduler = make_scheduler(
        optimizer,
        o.scheduler,
        total_steps=o.steps * per_step,
        warmup_steps=o.warmup_steps * per_step,
        min_lr_ratio=o.min_lr_ratio,
    )
    ds = deepspeed_config(cfg)
    probe = None
    if ds["gradient_clipping"] == 0.0 and o.zero_stage == 0:
        probe = _ClipAndRecord(params, o.grad_clip)
        optimizer.register_step_pre_hook(probe)
    engine, ds_optimizer, _, ds_scheduler = deepspeed.initialize(
        model=policy, optimizer=optimizer, lr_scheduler=scheduler, config=ds
    )
    return TrainEngine(engine, ds_optimizer, ds_scheduler, probe)


def wrap_reference(ref: nn.Module, cfg: Config) -> nn.Module:
    """Under ZeRO-3 the partitioned reference needs an (optimizer-free) engine for its gather hooks."""
    if cfg.optim.zero_stage != 3:
        return ref
    import deepspeed

    ds = deepspeed_config(cfg)
    ds.pop("gradient_clipping")
    engine, *_ = deepspeed.initialize(model=ref, config=ds)
    engine.eval()
    return engine


# ----------------------------------------------------------------------------------------------
# Log-prob passes
# ----------------------------------------------------------------------------------------------


def unwrap(model: nn.Module) -> nn.Module:
    """The HF model inside a DeepSpeed engine (or the model itself)."""
    return getattr(model, "module", model)


def model_device(model: nn.Module) -> torch.device:
    # a parameter's device: HF models and DeepSpeed engines both have parameters, not all have `.device`
    return next(unwrap(model).parameters()).device


def padding_free(cfg: Config) -> bool:
    """Whether this run's passes concatenate their rows (model.padding_free, resolved for the backend)."""
    device = "cuda" if str(cfg.device).startswith("cuda") else "cpu"
    return resolve_padding_free(cfg.model.padding_free, cfg.model.attn_implementation, device)


def batching(cfg: Config) -> dict[str, Any]:
    """The micro-batching keywords of every pass over rollouts or prompts (sequence_logprobs, the scorers)."""
    return {
        "micro_batch_size": cfg.optim.micro_batch_size,
        "max_tokens": cfg.optim.max_tokens_per_micro_batch,
        "padding_free": padding_free(cfg),
    }


def no_grad_batching(cfg: Config, model_config: Any) -> dict[str, Any]:
    """`batching` for the passes without grad (pi_old, the reference, Eq. 1's scoring): their own token budget,
    optim.no_grad_tokens_per_micro_batch or the memory plan's multiple of the update's (memplan.no_grad_tokens)."""
    return {**batching(cfg), "max_tokens": memplan.no_grad_tokens(cfg, model_config)}


# A filler row for lockstep padding: two tokens, so one position predicts one token. Id 0 exists in every vocab.
FILLER: tuple[list[int], list[int]] = ([0], [0])  # (prompt ids, response ids)


def is_partitioned(model: nn.Module) -> bool:
    """Whether `model` is ZeRO-3 partitioned over several ranks (its forwards are then collectives)."""
    several = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    return several and any(hasattr(p, "ds_id") for p in unwrap(model).parameters())


def lockstep_count(model: nn.Module, count: int) -> int:
    """The number of forwards this rank must run for `count` of its own: under ZeRO-3 with several ranks the
    largest count of any rank (a collective: every rank calls it), else `count`."""
    if not is_partitioned(model):
        return count
    return int(dist.all_reduce(float(count), "max"))


def micro_batches(
    model: nn.Module, lengths: Sequence[int], *, micro_batch_size: int, max_tokens: int = 0, padding_free: bool = False
) -> list[list[int]]:
    """The row indices of each micro-batch over rows of these token lengths (lens.packing: a token budget when
    max_tokens > 0, else micro_batch_size rows in order); under ZeRO-3 with several ranks, followed by empty
    micro-batches until every rank has the same number. Callers run a forward per micro-batch, on `FILLER`
    rows when it holds no row (see the module docstring)."""
    plan = packing.plan_micro_batches(lengths, rows=micro_batch_size, max_tokens=max_tokens, padding_free=padding_free)
    return plan + [[] for _ in range(lockstep_count(model, len(plan)) - len(plan))]


def pad_right(seqs: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # Right padding keeps positions 0..len-1 for every real token, so no position ids are needed.
    length = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), length, dtype=torch.long)
    attn = torch.zeros(len(seqs), length, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        attn[i, : len(s)] = 1
    return ids.to(device), attn.to(device)


def batch_inputs(seqs: Sequence[Sequence[int]], device: torch.device, padding_free: bool) -> dict[str, Any]:
    """The decoder's keyword inputs for one micro-batch: right-padded [b, L] ids with their attention mask, or
    (padding-free) one [1, sum L] sequence with restarting positions (lens.attention)."""
    if padding_free:
        return attention.packed_inputs(seqs, device)
    ids, attn = pad_right(seqs, device)
    return {"input_ids": ids, "attention_mask": attn}


def in_batch(
    rows: torch.Tensor, pos: torch.Tensor, lengths: Sequence[int], padding_free: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, position) within each sequence -> (row, column) in `batch_inputs`'s tensors: the same when padded;
    row 0 and the row's start + position when the rows are concatenated."""
    if not padding_free:
        return rows, pos
    starts = torch.tensor(attention.row_starts(lengths), dtype=torch.long)
    return torch.zeros_like(rows), starts[rows] + pos


def as_forward(model: nn.Module, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(hf_model, *args), run as the forward of `model`. Through a DeepSpeed engine its bookkeeping
    runs too: without it ZeRO-3 does not advance its micro-step counter, and the grads of a second
    micro-batch overwrite those of the first instead of adding to them."""
    inner = unwrap(model)
    if inner is model:
        return fn(inner, *args)
    inner.forward = functools.partial(fn, inner)
    try:
        return model(*args)
    finally:
        del inner.forward


def hidden_at(inner: nn.Module, inputs: dict[str, Any], rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Last hidden states (final norm applied, no logits) at (rows, pos) of the `batch_inputs` tensors -> [n, H]."""
    # The decoder alone: the HF forward would compute [b, L, V] logits that the fused head never needs.
    out = inner.get_decoder()(**inputs, use_cache=False)
    return out.last_hidden_state[rows, pos]


def token_logprobs(
    inner: nn.Module,
    inputs: dict[str, Any],
    rows: torch.Tensor,
    pos: torch.Tensor,
    temperature: float,
    return_entropy: bool,
) -> Any:
    """log pi(ids[rows, pos + 1] | prefix) [n] (and entropy [n]) through the fused LM head."""
    hidden = hidden_at(inner, inputs, rows, pos)
    with fused_head(lm_head(inner), temperature, return_entropy) as head:
        return head(hidden, inputs["input_ids"][rows, pos + 1])


def lm_head(model: nn.Module) -> nn.Module:
    head = unwrap(model).get_output_embeddings()
    # the fused kernels compute hidden @ W^T only; a bias would be silently dropped
    if getattr(head, "bias", None) is not None:
        raise ValueError("lens log-prob passes support bias-free LM heads only (lm_head.bias is set)")
    return head


@contextlib.contextmanager
def fused_head(head: nn.Module, temperature: float, return_entropy: bool) -> Iterator[nn.Module]:
    """Make `head(hidden [n, H], targets [n])` return fused log-probs (and entropy) for the duration."""

    def forward(hidden: torch.Tensor, targets: torch.Tensor) -> Any:
        return lens_kernels.linear_token_logprobs(
            hidden, head.weight, targets, temperature=temperature, return_entropy=return_entropy
        )

    # an instance attribute shadows the class's forward, so ZeRO-3's hooks on the module still fire around it
    head.forward = forward
    try:
        yield head
    finally:
        del head.forward


@contextlib.contextmanager
def gathered(params: list[nn.Parameter]) -> Iterator[None]:
    # ZeRO-3 partitioned parameters carry ds_id; gather them for a read-only use outside a forward.
    if not any(hasattr(p, "ds_id") for p in params):
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params):
        yield


def full_bytes(param: nn.Parameter) -> int:
    """Bytes of the whole parameter, also when ZeRO-3 keeps only a shard of it here (`ds_numel`)."""
    return getattr(param, "ds_numel", param.numel()) * param.element_size()


def gathered_buckets(model: nn.Module, max_bytes: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """The full parameters of `model` {HF name: tensor}, in order, a bucket of at most `max_bytes` (default
    memplan.SYNC_BUCKET_BYTES) at a time
    (lens.packing.consecutive_buckets): under ZeRO-3 each bucket is gathered while the caller uses it and
    released when it asks for the next, so a rank never holds more than one bucket of the model (the rollout
    engine's `load_weights`). A collective under ZeRO-3: every rank walks the same buckets."""
    named = list(unwrap(model).named_parameters())
    sizes = [full_bytes(p) for _, p in named]
    for bucket in packing.consecutive_buckets(sizes, max_bytes or memplan.SYNC_BUCKET_BYTES):
        params = [named[i][1] for i in bucket]
        with gathered(params):
            yield {named[i][0]: named[i][1].detach() for i in bucket}


def check_prompts(prompts: Sequence[Sequence[int]], name: str = "prompts") -> None:
    # an empty prompt has no position to predict the first response token from
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"{name}[{i}] is empty: every sequence needs at least one prompt token")


def response_positions(prompt_lens: list[int], resp_lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, position) of the hidden state predicting each response token, row-major [n] each."""
    rows = [i for i, n in enumerate(resp_lens) for _ in range(n)]
    # the hidden state at position p - 1 + t predicts response token t (causal shift by one)
    pos = [p - 1 + t for p, n in zip(prompt_lens, resp_lens, strict=True) for t in range(n)]
    return torch.tensor(rows, dtype=torch.long), torch.tensor(pos, dtype=torch.long)


def micro_batch_logprobs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    width: int,
    temperature: float = 1.0,
    return_entropy: bool = False,
    padding_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """ONE forward over these rows -> (logp [b, width] fp32, entropy [b, width] or None, mask [b, width] bool), 0
    past each response. Under ZeRO-3 with several ranks it runs even without rows (see `sequence_logprobs`)."""
    if sum(len(r) for r in responses) == 0 and is_partitioned(model):
        # Nothing to predict (or a padding micro-batch), but every rank must run this forward: run it with the
        # filler row appended and keep only this batch's rows. Sliced outputs stay in the graph, so a loss on
        # them backpropagates zero gradient through the same collectives as a real micro-batch.
        n, (fp, fr) = len(prompts), FILLER
        kw = {"temperature": temperature, "return_entropy": return_entropy, "padding_free": padding_free}
        out = micro_batch_logprobs(model, [*prompts, fp], [*responses, fr], width=max(width, 1), **kw)
        return tuple(t[:n, :width] if t is not None else None for t in out)  # type: ignore[return-value]
    device = model_device(model)
    resp_lens = [len(r) for r in responses]
    mask = (torch.arange(width).unsqueeze(0) < torch.tensor(resp_lens, dtype=torch.long).unsqueeze(1)).to(device)
    logp = torch.zeros(len(prompts), width, dtype=torch.float32, device=device)
    entropy = torch.zeros_like(logp) if return_entropy else None
    if sum(resp_lens) == 0:
        return logp, entropy, mask
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    inputs = batch_inputs(seqs, device, padding_free)
    rows, pos = response_positions([len(p) for p in prompts], resp_lens)
    rows, pos = (t.to(device) for t in in_batch(rows, pos, [len(s) for s in seqs], padding_free))
    out = as_forward(model, token_logprobs, inputs, rows, pos, temperature, return_entropy)
    flat_logp, flat_ent = out if return_entropy else (out, None)
    logp = logp.masked_scatter(mask, flat_logp.float())
    if entropy is not None:
        entropy = entropy.masked_scatter(mask, flat_ent.float())
    return logp, entropy, mask


def sequence_logprobs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    micro_batch_size: int = 8,
    max_tokens: int = 0,
    padding_free: bool = False,
    return_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log pi(y_t | x, y_<t) of every response token, response r conditioned on prompts[r].

    prompts, responses: R token-id lists each (prompt r must be non-empty). Returns logp [R, T] fp32
    (T = longest response; padding 0), mask [R, T] bool (real response tokens) and, when asked, the
    entropy [R, T] fp32 of the temperature-scaled distribution at each token, in row order whatever the
    micro-batches (`micro_batches`: micro_batch_size rows, or a token budget of max_tokens positions; padded
    or padding-free). With grad when the model is in training mode and grad is enabled; every micro-batch's
    graph is then kept until backward, so the update calls this once per micro-batch. Tensors are on the
    model's device.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"prompts ({len(prompts)}) and responses ({len(responses)}) must have equal lengths")
    check_prompts(prompts)
    width = max((len(r) for r in responses), default=0)
    grad = unwrap(model).training and torch.is_grad_enabled()
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    plan = micro_batches(
        model, lengths, micro_batch_size=micro_batch_size, max_tokens=max_tokens, padding_free=padding_free
    )
    kw = {"width": width, "temperature": temperature, "return_entropy": return_entropy, "padding_free": padding_free}
    with torch.set_grad_enabled(grad):
        parts = [
            micro_batch_logprobs(model, [prompts[i] for i in rows], [responses[i] for i in rows], **kw) for rows in plan
        ]
    if not parts:
        empty = torch.zeros(0, 0)
        return (empty, empty.bool(), empty) if return_entropy else (empty, empty.bool())
    # Concatenated in plan order, then gathered back into row order: the gather keeps every micro-batch's graph
    # (a filler micro-batch's too, so its backward still runs ZeRO-3's collectives).
    order = torch.tensor(packing.inverse_order([r for r in plan if r], len(prompts)), dtype=torch.long)
    order = order.to(parts[0][0].device)
    logp = torch.cat([p[0] for p in parts])[order]
    mask = torch.cat([p[2] for p in parts])[order]
    if return_entropy:
        return logp, mask, torch.cat([p[1] for p in parts])[order]
    return logp, mask
