"""lens: LENS (Less Noise Sampling) and GRPO-style RL post-training for LLM reasoning.

The algorithm core lives in `lens.algos` (advantages, ratios, losses) and `lens.purify`
(interference-token purification bookkeeping); native ops in `lens.ops`; Triton kernels in
`lens_kernels`.
"""

__version__ = "0.1.0"
