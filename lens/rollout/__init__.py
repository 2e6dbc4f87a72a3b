"""Rollout engines behind one narrow interface (see lens/rollout/base.py for the contract).

`make_engine("hf" | "vllm", model_path, **kw)` builds an engine; `HFEngine` (transformers, the default on
CPU) lives in lens/rollout/hf.py, `VLLMEngine` in lens/rollout/vllm_engine.py (imported lazily: vLLM is
an optional dependency).
"""

from lens.rollout.base import Engine, Rollouts, SamplingParams, default_stop_ids
from lens.rollout.hf import HFEngine

__all__ = [
    "Engine",
    "HFEngine",
    "Rollouts",
    "SamplingParams",
    "default_stop_ids",
    "make_engine",
]


def make_engine(kind: str, model_path: str, **kw: object) -> Engine:
    """Build an engine: "hf" (transformers; the default on CPU) or "vllm". `kw` goes to the engine's
    constructor (see HFEngine.from_pretrained and VLLMEngine)."""
    # The factory sits here, above both engines, rather than in base.py: the engines import base.py for
    # the contract, so a factory there would import them back (a loop).
    if kind == "hf":
        return HFEngine.from_pretrained(model_path, **kw)  # type: ignore[arg-type]
    if kind == "vllm":
        # Imported only when asked for: vLLM is an optional dependency and slow to import.
        from lens.rollout.vllm_engine import VLLMEngine  # lazy: optional

        return VLLMEngine(model_path, **kw)  # type: ignore[arg-type]
    raise ValueError(f"rollout engine kind must be 'hf' or 'vllm', got {kind!r}")
