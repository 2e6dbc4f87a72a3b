"""Rollout engines behind one narrow interface (see lens/rollout/base.py for the contract).

`make_engine("hf" | "vllm", model_path, **kw)` builds an engine; `HFEngine` (transformers, the default on
CPU) lives in lens/rollout/hf.py, `VLLMEngine` in lens/rollout/vllm_engine.py (imported lazily: vLLM is
an optional dependency).
"""

from lens.rollout.base import Engine, Rollouts, SamplingParams, default_stop_ids, make_engine
from lens.rollout.hf import HFEngine

__all__ = [
    "Engine",
    "HFEngine",
    "Rollouts",
    "SamplingParams",
    "default_stop_ids",
    "make_engine",
]
