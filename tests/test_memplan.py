"""lens/memplan.py: the parameter count against real models, the model states of each ZeRO stage, the activation
formula against the peak measured during a CPU forward + backward at three token budgets, and the plan of
every paper preset (at its real shape, tests/paper_shapes.py) against the A800 it is planned for.
"""

from __future__ import annotations

import dataclasses
import weakref
from types import SimpleNamespace
from typing import Any

import paper_shapes
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

import lens_kernels
from lens import memplan
from lens.config import CONFIG_DIR, load_config

PAPER_PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("paper_*_*.yaml"))
GIB = memplan.GIB


# ------------------------------------------------------------------------------------------------
# parameters and model states
# ------------------------------------------------------------------------------------------------

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4}


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (Qwen2ForCausalLM, Qwen2Config(vocab_size=100, num_key_value_heads=2, tie_word_embeddings=True, **SMALL)),
        (Qwen2ForCausalLM, Qwen2Config(vocab_size=100, num_key_value_heads=4, tie_word_embeddings=False, **SMALL)),
        (Qwen3ForCausalLM, Qwen3Config(vocab_size=100, num_key_value_heads=2, head_dim=32, **SMALL)),
        (LlamaForCausalLM, LlamaConfig(vocab_size=100, num_key_value_heads=1, tie_word_embeddings=True, **SMALL)),
    ],
    ids=["qwen2-tied", "qwen2-untied", "qwen3", "llama"],
)
def test_param_count_equals_the_models(cls: type, config: Any) -> None:
    model = cls(config)
    assert memplan.param_count(memplan.ModelShape.from_hf(config)) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("hub_id", sorted(paper_shapes.PAPER_MODELS))
def test_param_count_of_the_paper_models_matches_their_model_cards(hub_id: str) -> None:
    count = memplan.param_count(memplan.ModelShape.from_hf(paper_shapes.hf_config(hub_id)))
    assert count / 1e9 == pytest.approx(paper_shapes.PUBLISHED_PARAMS[hub_id], abs=0.03)


@pytest.mark.parametrize(
    ("stage", "want"),
    # (params, grads, optimizer, reference) in units of P bytes over 8 ranks, bf16: 2 + 2 + 12 per parameter
    [(0, (2, 2, 12, 2)), (1, (2, 2, 12 / 8, 2)), (2, (2, 2 / 8, 12 / 8, 2)), (3, (2 / 8, 2 / 8, 12 / 8, 2 / 8))],
)
def test_zero_stages_partition_optimizer_then_grads_then_params_and_reference(stage: int, want: tuple) -> None:
    shape = memplan.ModelShape.from_hf(paper_shapes.hf_config("Qwen/Qwen2.5-3B"))
    p = memplan.param_count(shape)
    states = memplan.model_states(shape, dtype_bytes=2, zero_stage=stage, world_size=8, hf_sampler_copy=False)
    got = (states.params, states.grads, states.optimizer, states.reference)
    assert got == pytest.approx(tuple(w * p for w in want), abs=8)
    fp32 = memplan.model_states(shape, dtype_bytes=4, zero_stage=0, world_size=1, hf_sampler_copy=True)
    # fp32: AdamW steps the parameters in place, no master copy (4 + 4 + 8); the HF sampler's copy is whole.
    assert (fp32.params, fp32.grads, fp32.optimizer, fp32.sampler) == (4 * p, 4 * p, 8 * p, 4 * p)


# ------------------------------------------------------------------------------------------------
# activations: the formula against the measured peak
# ------------------------------------------------------------------------------------------------


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensor storages created under the mode and still alive, and their peak.

    torch keeps no allocator statistics on CPU; every op's outputs pass through here, and a storage's Python
    object lives exactly as long as the storage (torch preserves it), so a finalizer sees each free. Storages that
    existed before (`known`: parameters, their gradients, the inputs) are not counted.
    """

    def __init__(self, known: list[torch.Tensor]) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen = {id(t.untyped_storage()) for t in known}

    def _free(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and id(t.untyped_storage()) not in self.seen:
                storage = t.untyped_storage()
                self.seen.add(id(storage))
                self.live += storage.nbytes()
                weakref.finalize(storage, self._free, id(storage), storage.nbytes())
        self.peak = max(self.peak, self.live)
        return out


def measured_peak(model: torch.nn.Module, rows: int, length: int) -> tuple[int, int]:
    """(peak bytes beyond what existed before, predicted positions) of one micro-batch's forward + backward
    through lens's path: the decoder, the predicted positions' hidden states, the fused head. The last row is
    half padding, so the micro-batch carries an attention mask as a padded one does."""
    device = next(model.parameters()).device
    ids = torch.randint(2, model.config.vocab_size, (rows, length), generator=torch.Generator().manual_seed(0))
    attn = torch.ones(rows, length, dtype=torch.long)
    attn[-1, length // 2 :] = 0
    r, p = torch.nonzero(attn[:, 1:]).T
    ids, attn, r, p = (t.to(device) for t in (ids, attn, r, p))
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    with LiveBytes([*model.parameters(), *grads, *model.buffers(), ids, attn, r, p]) as live:
        hidden = model.model(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state[r, p]
        logp = lens_kernels.linear_token_logprobs(hidden, model.lm_head.weight, ids[r, p + 1])
        logp.sum().backward()
    return live.peak, len(r)


WIDE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4}
FAMILIES = {
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(vocab_size=512, num_key_value_heads=2, **WIDE)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(vocab_size=512, num_key_value_heads=2, head_dim=64, **WIDE)),
}
# Three token budgets, filled: rows x longest = 256, 512 and 1,024 positions.
BUDGETS = [(1, 256), (4, 128), (2, 512)]


@pytest.mark.parametrize(
    ("family", "dtype", "checkpointing", "device"),
    [
        ("qwen2", "float32", False, "cpu"),
        ("qwen2", "float32", True, "cpu"),
        ("qwen2", "bfloat16", True, "cpu"),
        ("qwen3", "float32", False, "cpu"),
        # The GPU's own paths: SDPA's CUDA kernels and the Triton head (the storages are counted the same way).
        pytest.param("qwen2", "bfloat16", True, "cuda", marks=pytest.mark.gpu),
        pytest.param("qwen3", "bfloat16", False, "cuda", marks=pytest.mark.gpu),
    ],
)
def test_activation_estimate_is_within_25_percent_of_the_measured_peak(
    family: str, dtype: str, checkpointing: bool, device: str
) -> None:
    torch.manual_seed(0)
    model = FAMILIES[family]().to(device=device, dtype=getattr(torch, dtype)).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    measured_peak(model, 2, 64)  # allocates every .grad: later backwards accumulate into them in place
    model.zero_grad(set_to_none=False)
    shape = memplan.ModelShape.from_hf(model.config)
    for rows, length in BUDGETS:
        peak, predicted = measured_peak(model, rows, length)
        estimate = memplan.activation_bytes(
            shape, rows * length, length, memplan.DTYPE_BYTES[dtype],
            head_rows=predicted, checkpointing=checkpointing, padded=True, cuda=device == "cuda",
        )  # fmt: skip
        print(f"{family} {dtype} {device} ckpt={checkpointing} {rows}x{length}: measured {peak / 2**20:.2f} MiB, "
              f"estimated {estimate / 2**20:.2f} MiB ({estimate / peak:.3f})")  # fmt: skip
        assert estimate == pytest.approx(peak, rel=0.25), (rows, length)


def test_checkpointing_keeps_one_layer_and_the_layer_inputs() -> None:
    shape = memplan.ModelShape.from_hf(paper_shapes.hf_config("Qwen/Qwen3-4B-Base"))
    kw = {"head_rows": 4096, "padded": True, "cuda": True}
    full = memplan.activation_bytes(shape, 16384, 4096, 2, checkpointing=False, **kw)
    ckpt = memplan.activation_bytes(shape, 16384, 4096, 2, checkpointing=True, **kw)
    layer = memplan.layer_saved_bytes(shape, 16384, 4096, 2, padded=True)
    assert full > shape.layers * layer > ckpt > layer + shape.layers * 2 * shape.hidden * 16384
    # A padding-free micro-batch has no mask and keeps the kv heads unrepeated: less per layer.
    assert memplan.layer_saved_bytes(shape, 16384, 4096, 2, padded=False) < layer


# ------------------------------------------------------------------------------------------------
# the plan of the paper presets
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans checked as on a machine without a GPU (against the A800), wherever the suite runs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _paper_plan(preset: str, world_size: int = 8, *overrides: str) -> memplan.MemoryPlan:
    cfg = load_config(preset, list(overrides), world_size=world_size, cuda_available=True)
    return memplan.memory_plan(cfg, paper_shapes.hf_config(cfg.model.path), world_size=world_size)


@pytest.mark.usefixtures("no_gpu")
@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_every_paper_preset_fits_an_a800_on_8_gpus(preset: str) -> None:
    plan = _paper_plan(preset)
    text = "\n".join(plan.lines())
    for item in ("ZeRO-3", "policy: parameters", "AdamW states", "reference:", "activations:", "fused head: chunk",
                 "vLLM", "80 GiB A800 (no GPU on this machine", "weight sync:", "residue:"):  # fmt: skip
        assert item in text, item
    # ZeRO-3's sync gathers a bucket (or the embedding, when larger) beside vLLM's woken weights, never the model
    s = plan.shape
    assert plan.sync == max(memplan.SYNC_BUCKET_BYTES, s.vocab * s.hidden * 2) < memplan.param_count(s) * 2 // 4
    assert plan.sync_peak == plan.states.total + memplan.param_count(s) * 2 + plan.sync <= plan.peak
    assert plan.residue == plan.activations  # emptied before vLLM wakes: said, not counted
    assert plan.device.total == 80 * GIB and plan.vllm == 40 * GIB and plan.kv_cache == 0  # utilization 0.5
    assert plan.peak <= plan.device.total and plan.lines()[-1].startswith("verdict: fits:")


@pytest.mark.usefixtures("no_gpu")
def test_a_plan_that_does_not_fit_says_what_to_change() -> None:
    # ZeRO-3 on one GPU partitions nothing: a 7.6B model's 16 bytes per parameter alone exceed 80 GiB.
    plan = _paper_plan("paper_qwen2.5-7b_lens", 1, "data.batch_size=8")
    assert plan.states.total > 80 * GIB
    verdict = plan.lines()[-1]
    assert verdict.startswith("verdict: does NOT fit: peak") and "optim.max_tokens_per_micro_batch" in verdict


@pytest.mark.usefixtures("no_gpu")
def test_the_token_budget_bounds_the_micro_batch() -> None:
    rows = _paper_plan("paper_qwen3-4b_lens", 8, "optim.max_tokens_per_micro_batch=0", "optim.micro_batch_size=8")
    budget = _paper_plan("paper_qwen3-4b_lens", 8, "optim.max_tokens_per_micro_batch=16384")
    assert (rows.rows, rows.longest) == (8, 1024 + 4096) and (budget.rows, budget.longest) == (3, 5120)
    assert "optim.max_tokens_per_micro_batch=16384" in "\n".join(budget.lines())
    assert budget.activations < rows.activations


def test_a_gpu_is_planned_against_its_own_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    props = SimpleNamespace(total_memory=140 * GIB, name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    plan = _paper_plan("paper_qwen3-4b_lens")
    assert plan.device == memplan.Device(140 * GIB, "this GPU (NVIDIA H200)", cuda=True) and plan.vllm == 70 * GIB
    assert plan.verdict().endswith(f"of 140.0 GiB on this GPU (NVIDIA H200), {140 - plan.peak / GIB:.1f} GiB headroom")


def test_a_cpu_run_is_planned_against_this_machine_per_rank() -> None:
    cfg = load_config(None, ["device=cpu"], world_size=2, cuda_available=False)
    plan = memplan.memory_plan(cfg, Qwen2Config(num_key_value_heads=2, **SMALL), world_size=2)
    assert plan.lines()[0].startswith("per rank (2 ranks, ZeRO-0)") and plan.vllm == 0
    # The HF engine decodes a rank's 16 x 8 / 2 rollouts at once: keys and values of 3 layers x 2 kv heads x 16,
    # and one row of logits each.
    assert plan.kv_rows == 64 and plan.kv_cache == 64 * (plan.longest * 3 * 2 * 2 * 16 + 151936) * 4
    assert plan.generation_peak == plan.states.total + plan.kv_cache
    assert "this machine's memory / 2 ranks" in plan.verdict()
    one = dataclasses.replace(plan, device=memplan.device_for(cfg, 1))
    assert one.device.total == 2 * plan.device.total or one.device.total - 1 == 2 * plan.device.total


@pytest.mark.usefixtures("no_gpu")
def test_no_grad_passes_take_the_largest_multiple_the_update_bounds() -> None:
    cfg = load_config("paper_qwen3-8b_lens", world_size=8, cuda_available=True)
    hf = paper_shapes.hf_config(cfg.model.path)
    budget = cfg.optim.max_tokens_per_micro_batch
    plan = memplan.memory_plan(cfg, hf, world_size=8)
    tokens = memplan.no_grad_tokens(cfg, hf)
    s, b, longest = plan.shape, 2, plan.longest
    # auto: the largest multiple whose pass fits in the update's activations, and the next one would not
    assert tokens % budget == 0 and tokens // budget in memplan.NO_GRAD_MULTIPLES
    assert memplan.no_grad_bytes(s, tokens, longest, b, padded=True) <= plan.activations
    if tokens // budget < max(memplan.NO_GRAD_MULTIPLES):
        assert memplan.no_grad_bytes(s, tokens + budget, longest, b, padded=True) > plan.activations
    assert plan.no_grad == memplan.no_grad_bytes(s, tokens, longest, b, padded=True)
    assert f"at {tokens:,} tokens per micro-batch ({tokens // budget}x the update's)" in "\n".join(plan.lines())
    for setting, want in (("0", budget), (str(3 * budget), 3 * budget)):
        explicit = load_config("paper_qwen3-8b_lens", [f"optim.no_grad_tokens_per_micro_batch={setting}"],
                               world_size=8, cuda_available=True)  # fmt: skip
        assert memplan.no_grad_tokens(explicit, hf) == want
    rows = load_config("paper_qwen3-8b_lens", ["optim.max_tokens_per_micro_batch=0"], world_size=8,
                       cuda_available=True)  # fmt: skip
    assert memplan.no_grad_tokens(rows, hf) == 0  # row count: the update's micro_batch_size rows


def test_a_no_grad_budget_below_the_update_budget_is_refused() -> None:
    assert (
        load_config("cpu_default", ["optim.no_grad_tokens_per_micro_batch=auto"]).optim.no_grad_tokens_per_micro_batch
        is None
    )
    with pytest.raises(ValueError, match=r"optim.no_grad_tokens_per_micro_batch=300: must be auto, 0"):
        load_config("cpu_default", ["optim.max_tokens_per_micro_batch=600", "optim.no_grad_tokens_per_micro_batch=300"])
