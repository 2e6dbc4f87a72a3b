"""The per-GPU memory plan of a run, from its config and the model's HF config alone (no weights loaded).

    plan = memory_plan(cfg, AutoConfig.from_pretrained(path), world_size=8)
    print("\\n".join(plan.lines()))

`--dry-run` prints it (lens.preflight). What it counts, per rank, in bytes:
- model states under the ZeRO stage: the policy's parameters, gradients and AdamW states (with bf16, fp32
  master weights, momentum and variance: the 2 + 2 + 12 bytes per parameter of the ZeRO paper), the frozen
  reference (partitioned under ZeRO-3, like the policy), and the HF sampler's unsharded copy under ZeRO-3;
- activations of one micro-batch of the update (the only pass with grad; pi_old, the reference and the Eq. 1
  scoring run without grad and hold one layer's tensors at a time), with and without gradient checkpointing:
  what autograd saves in a Qwen2/Llama/Qwen3 decoder layer with SDPA, counted term by term below;
- the fused LM head (lens_kernels.linear_token_logprobs): it never materialises [n, V] logits; its backward
  holds one [rows, vocab columns] chunk of dz, the head's weight gradient and d hidden;
- under ZeRO-3, the parameters gathered for the running module: the head and two decoder layers;
- during generation, vLLM's share, `rollout.gpu_memory_utilization` x the device (on CUDA vLLM sleeps during
  the update: its weights are offloaded and its KV cache freed), or the HF engine's KV cache;
- the weight sync after the update: under ZeRO-3 one bucket of gathered parameters at a time
  (lens.model.SYNC_BUCKET_BYTES, or the largest parameter when that is larger), beside vLLM's woken weights;
- the residue: what PyTorch's cache holds of the update when vLLM wakes. The engine empties that cache first,
  so it is not counted; the plan says how much that is (the update's activations);
and gives a verdict against the device: the GPU's memory, or, for a `device: cuda` preset checked on a
machine without one, an 80 GiB A800 (the paper's GPU). Not counted: the CUDA context, DeepSpeed's
communication buckets (its default reduce bucket is 5e8 elements, about 1 GiB in bf16) and allocator
fragmentation, a few GiB together: hence the headroom the verdict line states.

A micro-batch is planned at its worst: `optim.max_tokens_per_micro_batch` padded positions (or
`optim.micro_batch_size` rows), rows as long as they can be: the longest prompt + `rollout.max_tokens`.
The activation formula is checked against the measured peak of a CPU forward+backward (tests/test_memplan.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# The head's own chunking constants and rule, so that the plan follows the kernel when either changes.
from lens.rollout.hf import HFEngine
from lens_kernels.linear_token_logprobs import _GPU_CHUNK_ELEMS, CHUNK_ELEMS, KEEP_LOGITS_BYTES, _chunk_sizes

GIB = 2**30
# The weight sync's bucket under ZeRO-3 (lens.model.gathered_buckets): parameters gathered, in the model dtype, for
# one hand-over to the rollout engine; a parameter larger than this (a 150k-vocabulary embedding) is gathered alone.
SYNC_BUCKET_BYTES = 512 * 2**20
# The multiples of the update's token budget the no-grad passes may take (verl's log-prob passes take 2-4x).
NO_GRAD_MULTIPLES = (4, 3, 2)
A800_BYTES = 80 * GIB  # the paper's GPU, the device a `device: cuda` preset is planned for without a GPU
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
FP32 = 4  # bytes of the fp32 tensors that exist whatever the model dtype (norm statistics, master weights)


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only causal LM that memory depends on (from its HF config)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # the LM head shares the input embedding's weight
    qkv_bias: bool  # Qwen2: biases on the q, k, v projections
    qk_norm: bool  # Qwen3: RMSNorm over each head of q and k

    @classmethod
    def from_hf(cls, config: Any) -> ModelShape:
        """From a transformers PretrainedConfig (read with AutoConfig: no weights)."""
        heads = config.num_attention_heads
        # Qwen3 and Llama 3.2 declare head_dim; older configs imply hidden / heads.
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            hidden=config.hidden_size,
            layers=config.num_hidden_layers,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
            # Qwen2's attention has q/k/v biases without a config flag; Llama and Qwen3 say attention_bias.
            qkv_bias=bool(getattr(config, "attention_bias", config.model_type == "qwen2")),
            qk_norm=config.model_type == "qwen3",
        )


def layer_params(s: ModelShape) -> int:
    """Parameters of one decoder layer: attention, gated MLP, two RMSNorms (and Qwen3's q/k norms)."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    attention = s.hidden * (q + 2 * kv) + q * s.hidden + ((q + 2 * kv) if s.qkv_bias else 0)
    return attention + 3 * s.hidden * s.intermediate + 2 * s.hidden + (2 * s.head_dim if s.qk_norm else 0)


def largest_param(s: ModelShape) -> int:
    """Elements of the largest single parameter: the embedding (or the untied head), else an MLP projection."""
    return max(s.vocab * s.hidden, s.hidden * s.intermediate)


def param_count(s: ModelShape) -> int:
    """All parameters: embedding, layers, final norm, and the LM head unless tied."""
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.layers * layer_params(s) + s.hidden


@dataclass(frozen=True)
class ModelStates:
    """Bytes per rank of what lives for the whole run."""

    params: int  # the policy's parameters, in the model dtype
    grads: int  # its gradients, in the model dtype
    optimizer: int  # AdamW: momentum and variance (+ fp32 master weights with bf16)
    reference: int  # the frozen reference's parameters
    sampler: int  # the HF engine's unsharded copy under ZeRO-3 (0 otherwise)

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.reference + self.sampler


def model_states(
    s: ModelShape, *, dtype_bytes: int, zero_stage: int, world_size: int, hf_sampler_copy: bool
) -> ModelStates:
    """Policy states under ZeRO `zero_stage` over `world_size` ranks: stage 1 partitions the optimizer
    states, 2 the gradients too, 3 the parameters too (and lens partitions the reference with them)."""
    p, w = param_count(s), max(world_size, 1)
    # bf16: DeepSpeed keeps fp32 master weights beside the fp32 momentum and variance; fp32 steps in place.
    optimizer = p * FP32 * (3 if dtype_bytes < FP32 else 2)
    return ModelStates(
        params=p * dtype_bytes // (w if zero_stage >= 3 else 1),
        grads=p * dtype_bytes // (w if zero_stage >= 2 else 1),
        optimizer=optimizer // (w if zero_stage >= 1 else 1),
        reference=p * dtype_bytes // (w if zero_stage >= 3 else 1),
        sampler=p * dtype_bytes if hf_sampler_copy else 0,
    )


def _norm_saved(width: int, b: int, *, output_saved: bool) -> int:
    """Bytes per position autograd saves for one RMSNorm over `width` (HF's: x.float(), x * rsqrt(mean x^2),
    weight * that in the model dtype)."""
    saved = FP32 * width  # the fp32 input, a copy for bf16 (pow and the rsqrt product save it)
    saved += b * width  # the normalised input in the model dtype: saved by the weight's product
    saved += FP32  # rsqrt of the mean square, one fp32 per position
    # The output, when the next op saves it (the q/k/v and gate/up projections do; Qwen3's rotary does not).
    return saved + (b * width if output_saved else 0)


def layer_saved_bytes(s: ModelShape, tokens: int, longest: int, b: int, *, padded: bool) -> int:
    """Bytes autograd saves for one decoder layer over a micro-batch of `tokens` positions (rows x `longest`).

    padded: rows right-padded to `longest` under an attention mask: HF then repeats the GQA keys and values to
    every query head (it calls SDPA with enable_gqa only without a mask) and SDPA turns the [rows, 1, S, S]
    boolean mask into an additive one in the model dtype, saved by each layer. Padding-free rows (varlen
    attention, no mask) keep the kv heads as they are.
    """
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    per_token = 2 * _norm_saved(s.hidden, b, output_saved=True)  # input and post-attention norms
    if s.qk_norm:  # Qwen3: q and k normed per head before the rotary embedding, which saves only cos/sin
        per_token += (s.heads + s.kv_heads) * _norm_saved(s.head_dim, b, output_saved=False)
    # SDPA saves q and k after the rotary embedding, v, its output (which o_proj saves as its input: the
    # transpose back to [S, heads x dim] is a view of the kernel's output) and the fp32 log-sum-exp per head.
    keys_values = 2 * (q if padded else kv)
    per_token += b * (2 * q + keys_values) + FP32 * s.heads
    # Gated MLP: gate output (saved by SiLU), SiLU output and up output (saved by their product), the product
    # (saved by down_proj).
    per_token += 4 * b * s.intermediate
    mask = b * tokens * longest if padded else 0  # [rows, 1, S, S]: rows x S^2 = tokens x S
    return per_token * tokens + mask


def backward_working_bytes(s: ModelShape, tokens: int, b: int) -> int:
    """Gradients alive at once inside one layer's backward, beyond what is saved: the gradient flowing down the
    residual stream and the one entering the MLP (2 x hidden), and in the MLP product's backward the gradients
    of the product, of the SiLU output and of the up projection (3 x intermediate)."""
    return b * (2 * s.hidden + 3 * s.intermediate) * tokens


@dataclass(frozen=True)
class HeadBytes:
    """The fused LM head of one micro-batch."""

    saved: int  # what its forward keeps for the backward
    chunk: int  # one [rows, vocab columns] chunk of the backward and its per-chunk temporaries
    backward: int  # the chunk plus d hidden (fp32) and the head's weight gradient


def head_bytes(s: ModelShape, n: int, b: int, *, cuda: bool) -> HeadBytes:
    """The fused head's memory over `n` predicted positions (lens_kernels.linear_token_logprobs: Triton on
    CUDA, torch chunks on CPU)."""
    v, h = s.vocab, s.hidden
    # The gathered hidden states [n, H], the targets (int64) and four fp32 [n] rows (log-prob, entropy, row max,
    # log-sum).
    saved = n * (b * h + 8 + 4 * FP32)
    # The CPU path keeps the forward's fp32 logits chunks for the backward up to KEEP_LOGITS_BYTES.
    if not cuda and n * v * FP32 <= KEEP_LOGITS_BYTES:
        saved += n * v * FP32
    r, c = _chunk_sizes(n, v, _GPU_CHUNK_ELEMS if cuda else CHUNK_ELEMS)
    if cuda:
        # dz [r, c] in the model dtype, the fp32 [c, H] weight-gradient accumulator, and the two GEMM outputs
        # dz @ W [r, H] and dz^T @ h [c, H], each in the model dtype and then as fp32.
        chunk = r * c * b + c * h * FP32 + (r + c) * h * (b + FP32)
    else:  # the fp32 logits chunk that dz overwrites, and the fp32 weight slice (a copy unless fp32)
        chunk = r * c * FP32 + (c * h * FP32 if b != FP32 else 0)
    # d hidden accumulates in fp32 [n, H]; the weight gradient [V, H] is a full tensor of the weight's dtype.
    return HeadBytes(saved=saved, chunk=chunk, backward=chunk + n * h * FP32 + v * h * b)


def activation_bytes(
    s: ModelShape, tokens: int, longest: int, b: int, *, head_rows: int, checkpointing: bool, padded: bool, cuda: bool
) -> int:
    """Peak bytes of one forward + backward with grad over `tokens` positions (rows x `longest`), beyond the
    model states: the larger of two moments of the backward.

    - The head's backward, first: everything the forward saved, the head's backward and d last_hidden_state.
    - A decoder layer's backward: the layers' saved tensors and the working set of gradients (the head's saved
      tensors are freed by then). With gradient checkpointing every layer keeps only its input (and the boolean
      mask, shared) and the backward recomputes one layer at a time, whose saved tensors exist beside them.
    """
    layer = layer_saved_bytes(s, tokens, longest, b, padded=padded)
    # Rotary cos and sin: [1, S, head_dim] each, shared by the rows and the layers.
    rotary = 2 * b * longest * s.head_dim
    if checkpointing:
        kept = s.layers * b * s.hidden * tokens + (tokens * longest if padded else 0)
        # In fp32 the recomputed layer's norm saves its input itself, the very tensor the checkpoint keeps.
        recomputed = layer - (b * s.hidden * tokens if b == FP32 else 0)
        saved, in_layer_backward = kept, kept + recomputed
    else:
        saved = in_layer_backward = s.layers * layer
    head = head_bytes(s, head_rows, b, cuda=cuda)
    final_norm = _norm_saved(s.hidden, b, output_saved=False) * tokens
    # The gather of the predicted positions has the gradient d last_hidden_state [rows, S, H].
    head_moment = saved + final_norm + head.saved + head.backward + b * s.hidden * tokens
    layer_moment = in_layer_backward + backward_working_bytes(s, tokens, b)
    return rotary + max(head_moment, layer_moment)


def no_grad_bytes(s: ModelShape, tokens: int, longest: int, b: int, *, padded: bool) -> int:
    """A pass without grad (pi_old, the reference, Eq. 1 scoring) holds about one layer's tensors at a time."""
    return layer_saved_bytes(s, tokens, longest, b, padded=padded)


def no_grad_tokens(cfg: Any, model_config: Any, longest_prompt: int | None = None) -> int:
    """The token budget of one micro-batch of the passes without grad (0: row count, as the update):
    optim.no_grad_tokens_per_micro_batch; the update's budget when that is 0; `auto`: the largest multiple of the
    update's budget in NO_GRAD_MULTIPLES whose pass needs no more memory than the update's micro-batch, so the
    update's peak bounds theirs (else the update's budget)."""
    budget, setting = cfg.optim.max_tokens_per_micro_batch, cfg.optim.no_grad_tokens_per_micro_batch
    if not budget:
        return 0
    if setting is not None:
        return setting or budget
    s, b = ModelShape.from_hf(model_config), DTYPE_BYTES[cfg.model.dtype]
    _, longest, _ = planned_micro_batch(cfg, longest_prompt)
    padded = not cfg.model.padding_free
    update = activation_bytes(
        s, budget, longest, b, head_rows=budget, checkpointing=cfg.model.gradient_checkpointing, padded=padded,
        cuda=cfg.device == "cuda",
    )  # fmt: skip
    fits = [k for k in NO_GRAD_MULTIPLES if no_grad_bytes(s, k * budget, longest, b, padded=padded) <= update]
    return max(fits, default=1) * budget


@dataclass(frozen=True)
class Device:
    """What the verdict is measured against."""

    total: int
    name: str
    cuda: bool


def device_for(cfg: Any, world_size: int) -> Device:
    """This rank's device: the GPU (torch.cuda), an 80 GiB A800 for a CUDA preset on a machine without one,
    or on CPU this machine's memory shared by the ranks."""
    if cfg.device == "cuda":
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0")))
            return Device(props.total_memory, f"this GPU ({props.name})", cuda=True)
        return Device(A800_BYTES, "an 80 GiB A800 (no GPU on this machine: planned for the paper's GPU)", cuda=True)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    ranks = max(world_size, 1)
    name = f"this machine's memory / {ranks} ranks" if ranks > 1 else "this machine's memory"
    return Device(ram // ranks, name, cuda=False)


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's memory plan (bytes) and the device it is judged against."""

    shape: ModelShape
    world_size: int
    zero_stage: int
    rows: int  # rows of the planned micro-batch
    longest: int  # its padded length
    budget: str  # how the micro-batch is bounded (the config key and value)
    states: ModelStates
    activations: int  # with the configured gradient checkpointing
    activations_other: int  # with it switched the other way
    checkpointing: bool
    head: HeadBytes
    gathered: int  # ZeRO-3: parameters gathered for the running modules
    no_grad: int
    no_grad_tokens: int  # the no-grad passes' token budget (0: row count)
    token_budget: int  # optim.max_tokens_per_micro_batch (0: row count)
    vllm: int  # vLLM's share during generation (0 without vLLM)
    vllm_weights: int  # vLLM's own copy of the weights, awake during the sync (0 without vLLM)
    sync: int  # ZeRO-3: the parameters gathered at once while the weights go to the engine
    residue: int  # the update's cached blocks that vLLM would find held, had the cache not been emptied
    kv_cache: int  # the HF engine's KV cache during generation (0 with vLLM)
    kv_rows: int  # the rows the HF engine decodes at once
    device: Device

    @property
    def update_peak(self) -> int:
        """The update: states, gathered parameters, one micro-batch's activations (or a no-grad pass's, if more)."""
        return self.states.total + self.gathered + max(self.activations, self.no_grad)

    @property
    def generation_peak(self) -> int:
        """Generation: states and vLLM's share or the HF engine's KV cache (no activations then)."""
        return self.states.total + self.vllm + self.kv_cache

    @property
    def sync_peak(self) -> int:
        """The weight sync: states, vLLM's woken weights (its KV cache still asleep), one gathered bucket."""
        return self.states.total + self.vllm_weights + self.sync

    @property
    def peak(self) -> int:
        return max(self.update_peak, self.generation_peak, self.sync_peak)

    def lines(self) -> list[str]:
        """The plan as the dry-run prints it, one item per line."""
        st = self.states
        on, off = ("on", "off") if self.checkpointing else ("off", "on")
        unit = "GPU" if self.device.cuda else "rank"
        lines = [
            f"per {unit} ({_ranks(self.world_size)}, ZeRO-{self.zero_stage}), a model of "
            f"{_count(param_count(self.shape))} parameters",
            f"policy: parameters {_size(st.params)}, gradients {_size(st.grads)}, AdamW states {_size(st.optimizer)}",
            f"reference: {_size(st.reference)}" + (f"; HF sampler copy: {_size(st.sampler)}" if st.sampler else ""),
            f"micro-batch: {self.rows} x {self.longest} positions ({self.budget})",
            f"activations: {_size(self.activations)} with gradient checkpointing {on}, "
            f"{_size(self.activations_other)} with it {off}",
            f"fused head: chunk {_size(self.head.chunk)}, backward {_size(self.head.backward)} "
            "(chunk + d hidden + weight gradient)",
            f"no-grad passes (pi_old, reference, scoring): {_size(self.no_grad)}{self._no_grad_budget()}",
        ]
        if self.gathered:
            lines.append(f"ZeRO-3 gathered parameters (head + 2 layers): {_size(self.gathered)}")
        if self.vllm:
            lines.append(f"vLLM (gpu_memory_utilization x device, while generating): {_size(self.vllm)}")
        if self.kv_cache:
            lines.append(
                f"HF engine KV cache ({self.kv_rows} x {self.longest}, while generating): {_size(self.kv_cache)}"
            )
        if self.sync:
            lines.append(f"weight sync: {_size(self.sync)} gathered at a time (one bucket of the ZeRO-3 shards)")
        if self.residue:
            lines.append(
                f"residue: PyTorch's cache emptied before vLLM wakes (it would hold up to {_size(self.residue)})"
            )
        lines.append(self.verdict())
        return lines

    def _no_grad_budget(self) -> str:
        if not self.no_grad_tokens:
            return ""
        multiple = self.no_grad_tokens / self.token_budget
        return f" at {self.no_grad_tokens:,} tokens per micro-batch ({multiple:g}x the update's)"

    def verdict(self) -> str:
        """One line: fits or not, the peak and the phase it falls in, against the device."""
        phases = [(self.update_peak, "update"), (self.generation_peak, "generation"), (self.sync_peak, "sync")]
        (_, phase), *others = sorted(phases, reverse=True)
        rest = ", ".join(f"{name} {_size(peak)}" for peak, name in others)
        head = f"peak {_size(self.peak)} ({phase}; {rest}) of {_size(self.device.total)} on {self.device.name}"
        if self.peak <= self.device.total:
            return f"verdict: fits: {head}, {_size(self.device.total - self.peak)} headroom"
        return (
            f"verdict: does NOT fit: {head}; lower optim.max_tokens_per_micro_batch or rollout."
            "gpu_memory_utilization, turn on model.gradient_checkpointing, or raise optim.zero_stage or the ranks"
        )


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 10**8 else f"{n / 1e6:.2f}M"


def _ranks(n: int) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"


def planned_micro_batch(cfg: Any, longest_prompt: int | None = None) -> tuple[int, int, str]:
    """(rows, longest, description) of the largest micro-batch the config allows: rows as long as they can be
    (the attention mask grows with rows x length^2), as many as fit the token budget. A row is at most the
    longest prompt (`longest_prompt`, the dry-run's rendered prompts; else data.max_prompt_len) plus
    rollout.max_tokens."""
    prompt = cfg.data.max_prompt_len if longest_prompt is None else longest_prompt
    what = "data.max_prompt_len" if longest_prompt is None else "longest prompt"
    longest = prompt + cfg.rollout.max_tokens
    rows_of = f"{what} {prompt} + rollout.max_tokens {cfg.rollout.max_tokens}"
    budget = cfg.optim.max_tokens_per_micro_batch
    if budget > 0:
        return max(1, budget // longest), longest, f"optim.max_tokens_per_micro_batch={budget}; {rows_of}"
    return cfg.optim.micro_batch_size, longest, f"optim.micro_batch_size={cfg.optim.micro_batch_size}; {rows_of}"


def hf_generation_bytes(s: ModelShape, rows: int, longest: int, b: int) -> int:
    """The HF engine decoding `rows` rows of up to `longest` positions: keys and values of every layer, and
    the last position's logits of each row."""
    return rows * (longest * s.layers * 2 * s.kv_heads * s.head_dim + s.vocab) * b


def hf_engine_rows(cfg: Any, world_size: int) -> int:
    """Rows the HF engine decodes at once on a rank: its generation batch's rollouts, at most the engine's
    max_batch_size (its constructor's default, which the trainer keeps)."""
    import inspect

    cap = inspect.signature(HFEngine.__init__).parameters["max_batch_size"].default
    prompts = cfg.algorithm.dapo.gen_batch_size or cfg.data.batch_size
    return min(cap, max(1, prompts * cfg.algorithm.m // max(world_size, 1)))


def memory_plan(cfg: Any, model_config: Any, *, world_size: int, longest_prompt: int | None = None) -> MemoryPlan:
    """The plan of `cfg` (a resolved lens Config) for the model of `model_config` on `world_size` ranks; rows
    planned up to `longest_prompt` (None: data.max_prompt_len) + rollout.max_tokens."""
    s = ModelShape.from_hf(model_config)
    b = DTYPE_BYTES[cfg.model.dtype]
    cuda = cfg.device == "cuda"
    rows, longest, budget = planned_micro_batch(cfg, longest_prompt)
    # A token budget bounds padded positions, rows x longest <= budget; under it the linear terms are the budget's.
    tokens = max(cfg.optim.max_tokens_per_micro_batch, rows * longest)
    # Padded rows unless the passes run padding-free (model.padding_free, resolved to a bool by lens.config).
    padded = not cfg.model.padding_free
    head_rows = tokens if cfg.optim.max_tokens_per_micro_batch else rows * cfg.rollout.max_tokens
    ckpt = cfg.model.gradient_checkpointing
    kw = {"head_rows": head_rows, "padded": padded, "cuda": cuda}
    zero3 = cfg.optim.zero_stage == 3
    vllm = cfg.rollout.engine == "vllm"
    device = device_for(cfg, world_size)
    kv_rows = 0 if vllm else hf_engine_rows(cfg, world_size)
    no_grad = no_grad_tokens(cfg, model_config, longest_prompt)
    return MemoryPlan(
        shape=s,
        world_size=world_size,
        zero_stage=cfg.optim.zero_stage,
        rows=rows,
        longest=longest,
        budget=budget,
        states=model_states(
            s, dtype_bytes=b, zero_stage=cfg.optim.zero_stage, world_size=world_size, hf_sampler_copy=zero3 and not vllm
        ),
        activations=activation_bytes(s, tokens, longest, b, checkpointing=ckpt, **kw),
        activations_other=activation_bytes(s, tokens, longest, b, checkpointing=not ckpt, **kw),
        checkpointing=ckpt,
        head=head_bytes(s, head_rows, b, cuda=cuda),
        # ZeRO-3 gathers a module's full parameters for its forward and backward: the head (the embedding, when
        # tied), the running layer and the prefetched next one.
        gathered=b * (s.vocab * s.hidden + 2 * layer_params(s)) if zero3 else 0,
        no_grad=no_grad_bytes(s, max(no_grad, tokens), longest, b, padded=padded),
        no_grad_tokens=no_grad,
        token_budget=cfg.optim.max_tokens_per_micro_batch,
        vllm=int(cfg.rollout.gpu_memory_utilization * device.total) if vllm and cuda else 0,
        vllm_weights=param_count(s) * b if vllm and cuda else 0,
        sync=max(SYNC_BUCKET_BYTES, largest_param(s) * b) if zero3 else 0,
        # vLLM allocates outside PyTorch's cache, which still holds the update's freed blocks until emptied.
        residue=activation_bytes(s, tokens, longest, b, checkpointing=ckpt, **kw) if vllm and cuda else 0,
        kv_cache=hf_generation_bytes(s, kv_rows, longest, b),
        kv_rows=kv_rows,
        device=device,
    )
