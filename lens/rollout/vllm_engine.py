"""VLLMEngine: rollouts from vLLM's offline `LLM`, colocated with the trainer, with in-memory weight sync.

Generation: token-id prompts (`TokensPrompt`), one vLLM `SamplingParams(n, temperature, top_p, max_tokens,
seed, logprobs=0, prompt_logprobs=0 when asked)` per prompt, and `logprobs_mode="processed_logprobs"` so the
returned log-probs follow the definition in lens/rollout/base.py (temperature-scaled, nucleus-renormalized),
like HFEngine's. A call seed s gives prompt i's j-th sample the vLLM seed s + i*n + j (vLLM adds j itself).

Weight sync (`sync_weights`), never through disk: the trainer's state dict goes to the workers through
`collective_rpc` and is loaded with vLLM's layerwise in-place reload (initialize_layerwise_reload ->
model.load_weights -> finalize_layerwise_reload, the machinery behind `reload_weights`). With
tensor_parallel_size == 1 the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0 is set), so
the tensors are handed over by reference (tested on CPU). With more workers (GPU only, not exercised by
the CPU tests) they travel, in chunks of `sync_chunk_mb`, through vLLM's worker RPC queue, where CPU
tensors pickle as tensors; only the engine-core msgpack boundary, which in-process mode skips, turns
inline tensors into lists. Afterwards the prefix cache is reset: its KV blocks were computed with the
old weights and would otherwise be reused for repeated prompt prefixes.

The CPU-backend bug found and fixed here: at load time vLLM's CPU backend prepacks every linear weight
into a oneDNN (or AMX) handle that holds its own COPY of the weight (`dispatch_cpu_unquantized_gemm`).
The layerwise reload re-runs that packing only for layers that received weights. With tied embeddings
the LM head receives none (its weight is the embedding's, skipped by the loader), so the embedding
table is updated in place but the LM head keeps multiplying by the stale packed copy, so every logit
and log-prob is wrong (vLLM notes "tied parameters will only reflect processing from one of the parent
layers"). A checkpoint saved by transformers omits the tied `lm_head.weight`, hence the failure of a
reload from disk; sync_weights sends each tensor once, so it would hit the same case. Fix: after the
reload, re-pack every CPU layer that keeps its dense weight (embeddings and LM heads: `remove_weight=False`
in the dispatcher) from its current weight. tests/test_rollout.py shows the failure without the re-pack.

One engine per rank: under torchrun (torch.distributed initialized with several ranks) each rank builds its
own engine with `distributed_executor_backend="external_launcher"`, as verl and TRL colocate them. vLLM's
default single-process executor would resolve local rank 0 in every process and put every engine on GPU 0;
the external launcher takes RANK/LOCAL_RANK from torchrun's environment (cuda:LOCAL_RANK), reuses the
trainer's process group and builds one tensor-parallel group of size 1 per rank (vLLM 0.32-0.33,
`ExecutorWithExternalLauncher`). Building the engines is then collective: every rank builds its own at the
same point. Sleep/wake and weight sync act on each rank's own engine.

Colocation on GPU: `gpu_memory_utilization` caps vLLM's share of the device; with `enable_sleep_mode`
(the default on CUDA) `sleep()` offloads the weights and frees the KV cache while the trainer updates
and `generate`/`sync_weights` wake it as needed. On CPU, vLLM has no sleep mode and these are no-ops.

Scripts that build a VLLMEngine need an `if __name__ == "__main__":` guard (vLLM may spawn processes).
Run its tests: `.venv/bin/python -m pytest tests/test_rollout.py -q -m vllm`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed

from lens import packing
from lens.rollout.base import (
    FINISH_REASONS,
    Rollouts,
    SamplingParams,
    SeededEngine,
    default_stop_ids,
    distinct_tensors,
)


def _worker_begin_reload(worker: Any) -> list[str]:
    """(runs in each vLLM worker) Put every layer in layerwise-reload mode; return the parameter names."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    model = worker.model_runner.get_model()
    names = [name for name, _ in model.named_parameters()]  # before the reload unties shared parameters
    with set_current_vllm_config(worker.vllm_config):
        initialize_layerwise_reload(model)
    return names


def _worker_load(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> list[str]:
    """(runs in each vLLM worker) Load HF-named full tensors; each worker shards them itself."""
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(worker.vllm_config):
        # Sorted names come back so the trainer can tell which parameters a sync never reached.
        return sorted(worker.model_runner.get_model().load_weights(iter(weights)))


def _worker_finish_reload(worker: Any) -> int:
    """(runs in each vLLM worker) Process layers still pending, then re-pack CPU layers that keep a dense
    weight (the tied LM head, see the module docstring). Returns how many layers were re-packed."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
    from vllm.platforms import current_platform

    model = worker.model_runner.get_model()
    # vLLM warns "Failed to load weights" for every layer with only derived buffers (the RoPE cache),
    # each sync; sync_weights checks every PARAMETER was loaded and raises otherwise, so drop the noise.
    layerwise_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    quiet = _DropMessage("Failed to load weights")
    layerwise_log.addFilter(quiet)
    try:
        with set_current_vllm_config(worker.vllm_config):
            finalize_layerwise_reload(model, worker.model_config)
            return _repack_cpu_dense_layers(model) if current_platform.is_cpu() else 0
    finally:
        layerwise_log.removeFilter(quiet)


class _DropMessage(logging.Filter):
    """Drops log records whose message contains a fixed text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _repack_cpu_dense_layers(model: torch.nn.Module) -> int:
    """Rebuild the CPU GEMM handle (`cpu_linear`) of every layer whose dense 2-D weight is still attached,
    from that weight's current values. Linear layers drop their weight after packing (numel 0) and were
    re-packed by the reload itself; embeddings/LM heads keep theirs and may share it (tied)."""
    repacked = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        dense = isinstance(weight, torch.Tensor) and weight.ndim == 2 and weight.numel() > 0
        if dense and hasattr(module, "cpu_linear") and method is not None:
            method.process_weights_after_loading(module)
            repacked += 1
    return repacked


def _chunks(state: Mapping[str, torch.Tensor], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Split a state dict into lists of (name, tensor) of at most max_bytes each (a larger tensor alone)."""
    items = list(state.items())
    for bucket in packing.consecutive_buckets([t.numel() * t.element_size() for _, t in items], max_bytes):
        yield [items[i] for i in bucket]


class VLLMEngine(SeededEngine):
    """Rollout engine over vLLM's offline `LLM` (see the module docstring for sync and colocation).

    Args:
        model_path: local HF model directory (weights, config and tokenizer) or hub name.
        dtype: vLLM dtype ("float32" on CPU for exact log-probs; "bfloat16" on GPU).
        seed: seeds vLLM and the engine's private stream of call seeds (for SamplingParams.seed=None).
        max_model_len: prompt + response budget in tokens (prompts at or over it are rejected).
        tensor_parallel_size: GPUs per engine.
        gpu_memory_utilization: share of GPU memory vLLM may take when colocated with the trainer.
        enable_sleep_mode: sleep/wake between phases; default True on CUDA, unsupported (False) on CPU.
        enforce_eager: disable CUDA graphs (default True on CPU, where graphs do not exist).
        cpu_kv_cache_gib: KV-cache size on CPU (VLLM_CPU_KVCACHE_SPACE), ignored on GPU.
        sync_chunk_mb: bytes per RPC when weights travel to worker processes (tensor_parallel_size > 1).
        llm_kwargs: extra keyword arguments for `vllm.LLM`.
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int = 4096,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.5,
        enable_sleep_mode: bool | None = None,
        enforce_eager: bool | None = None,
        cpu_kv_cache_gib: int = 1,
        sync_chunk_mb: int = 512,
        **llm_kwargs: Any,
    ) -> None:
        # Checked before vLLM starts: its own errors come after minutes of loading.
        if tensor_parallel_size < 1:
            raise ValueError(f"VLLMEngine: tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"VLLMEngine: gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        # One probe decides every CPU/GPU default below (sleep mode, eager mode, KV-cache size).
        on_cuda = torch.cuda.is_available()
        if _launched_ranks() > 1:
            if tensor_parallel_size != 1:
                raise ValueError(
                    f"VLLMEngine: tensor_parallel_size={tensor_parallel_size} under {_launched_ranks()} ranks: "
                    "each rank runs its own engine on its own device (tensor_parallel_size=1)"
                )
            # Without it every rank's engine resolves local rank 0 (all on GPU 0); see the module docstring.
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        self.in_process = tensor_parallel_size == 1
        if self.in_process:
            # The engine core and its single worker then live in this process: the model object is
            # reachable and sync_weights hands tensors over by reference.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if not on_cuda:
            # vLLM reads the CPU KV-cache size only from the environment, and only when the engine starts.
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kv_cache_gib)
        from vllm import LLM

        # Sleep mode exists only on CUDA: asked for on CPU it is quietly off, so one config runs on both.
        self.sleep_mode = on_cuda if enable_sleep_mode is None else bool(enable_sleep_mode and on_cuda)
        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=self.sleep_mode,
            enforce_eager=(not on_cuda) if enforce_eager is None else enforce_eager,
            # Log-probs of the distribution actually sampled (temperature, top-p), as HFEngine reports them.
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self.max_model_len = max_model_len
        # The same stop rule as HFEngine (tokenizer + config + generation config EOS), so both stop alike.
        self.eos_token_ids = default_stop_ids(model_path)
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.sync_chunk_bytes = sync_chunk_mb * 2**20
        self._sleeping: set[str] = set()
        self._stream = torch.Generator().manual_seed(seed)

    def _generate(
        self, prompts: list[list[int]], n: int, sampling: SamplingParams, seed: int, return_prompt_logprobs: bool
    ) -> Rollouts:
        from vllm.inputs import TokensPrompt

        self.wake_up()
        # Every request gets an explicit seed (from the engine's private stream when the call has none):
        # vLLM then samples from per-request generators, and the global RNG draws its CPU sampler makes
        # anyway are undone by fork_rng, so the trainer's RNG state is untouched in in-process mode.
        params = [self._params(i, n, sampling, seed, return_prompt_logprobs) for i in range(len(prompts))]
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        # fork_rng: vLLM's CPU sampler draws from the global RNG, which belongs to the trainer.
        with torch.random.fork_rng(devices=devices):
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        tokens, logprobs, finish = [], [], []
        for out in outputs:
            # vLLM may return a request's n samples out of order: sort by index to keep rows prompt-major.
            for completion in sorted(out.outputs, key=lambda c: c.index):
                tokens.append(list(completion.token_ids))
                logprobs.append(_sampled_logprobs(completion))
                finish.append(_finish_reason(completion.finish_reason))
        prompt_lp = [_prompt_logprobs(out) for out in outputs] if return_prompt_logprobs else None
        prompt_index = torch.arange(len(prompts), dtype=torch.int64).repeat_interleave(n)
        return Rollouts(prompt_index, tokens, logprobs, finish, prompt_lp)

    def _params(self, index: int, n: int, sampling: SamplingParams, seed: int, prompt_logprobs: bool) -> Any:
        """vLLM SamplingParams for prompt `index` (seeds spread so no two samples of a call share one)."""
        import vllm

        return vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            # top_k=0 disables top-k: a model's generation config must not add a filter HFEngine does not apply.
            top_k=0,
            max_tokens=sampling.max_tokens,
            # vLLM adds the sample index j itself, so sample (i, j) draws from seed + i * n + j, as in HFEngine.
            seed=seed + index * n,
            stop_token_ids=sorted(set(self.eos_token_ids) | set(sampling.stop_token_ids)),
            logprobs=0,
            prompt_logprobs=0 if prompt_logprobs else None,
            # Token ids are all the trainer uses; detokenizing every sample would only cost time.
            detokenize=False,
        )

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load `model`'s weights (HF names, full unsharded tensors) into every vLLM worker, in memory."""
        self.load_weights([distinct_tensors(model)])

    def load_weights(self, buckets: Iterable[Mapping[str, torch.Tensor]]) -> None:
        """Load full HF-named tensors handed over a bucket at a time (see `Engine.load_weights`) into every
        worker, in one layerwise reload; every parameter must arrive in some bucket."""
        self.wake_up(tags=["weights"])
        expected = set(self.llm.collective_rpc(_worker_begin_reload)[0])
        loaded: set[str] = set()
        for bucket in buckets:
            # In process the tensors are handed over by reference; across processes they must pickle, from CPU.
            state = {name: t if self.in_process else t.cpu() for name, t in bucket.items()}
            for chunk in _chunks(state, self.sync_chunk_bytes):
                loaded |= set(self.llm.collective_rpc(_worker_load, args=(chunk,))[0])
        self.llm.collective_rpc(_worker_finish_reload)
        # Cached KV blocks were computed with the old weights: reusing them would mix two policies.
        self.llm.reset_prefix_cache()
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(
                f"sync_weights: the trainer's model did not provide {missing[:5]} ({len(missing)} in all); "
                "the engine kept its old values for them, so its weights are now a mix: rebuild it"
            )

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache and offload (level 1) or drop (level 2) the weights while the trainer runs;
        a no-op without sleep mode (always on CPU). After level 2, call sync_weights before generating."""
        # Idempotent: a second sleep would make vLLM offload already offloaded weights.
        if self.sleep_mode and not self._sleeping:
            self.llm.sleep(level=level)
            self._sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Bring back what is asleep among `tags` ("weights", "kv_cache"; all when None)."""
        waking = self._sleeping & set(tags or ("weights", "kv_cache"))
        if waking:
            # The trainer's freed blocks stay in PyTorch's cache (the update's activations, several GiB) unless
            # handed back: vLLM allocates outside that cache and would find the device that much fuller.
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.llm.wake_up(tags=sorted(waking))
            self._sleeping -= waking

    def close(self) -> None:
        """Shut the vLLM engine down and free its memory."""
        llm, self.llm = self.llm, None
        if llm is not None:
            # Explicit shutdown: dropping the reference alone leaves the engine core's memory and threads alive.
            llm.llm_engine.engine_core.shutdown()
            del llm


def _launched_ranks() -> int:
    """The number of ranks of the trainer's process group (1 without one)."""
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def _finish_reason(reason: str | None) -> str:
    """vLLM finish reason -> "stop" | "length"; anything else (abort, error) is a failed request."""
    if reason not in FINISH_REASONS:
        raise RuntimeError(f"vLLM request finished with {reason!r}, expected one of {FINISH_REASONS}")
    return reason


def _sampled_logprobs(completion: Any) -> torch.Tensor:
    """Sampler log-prob of each sampled token of one vLLM CompletionOutput -> [len] fp32."""
    values = [
        position[token].logprob for position, token in zip(completion.logprobs, completion.token_ids, strict=True)
    ]
    return torch.tensor(values, dtype=torch.float32)


def _prompt_logprobs(output: Any) -> torch.Tensor:
    """Prompt-token log-probs of one vLLM RequestOutput -> [P] fp32, entry 0 NaN (vLLM gives None there)."""
    prompt = output.prompt_token_ids
    # NaN, not 0, at entry 0: a log-prob of 0 would read as certainty, NaN cannot be mistaken for a value.
    values = [float("nan")] + [output.prompt_logprobs[p][prompt[p]].logprob for p in range(1, len(prompt))]
    return torch.tensor(values, dtype=torch.float32)
