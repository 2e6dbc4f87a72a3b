"""Peers side by side: fused LM-head log-probs and the GRPO loss, lens against what else one could use.

Log-probs of the sampled tokens from hidden states and the LM head, logp = log_softmax(h @ W.T / T)[t]:
  torch_ref        eager torch, the plain form (the [N, V] logits and log-softmax exist)
  torch_compile    torch.compile(dynamic=True) of the same plain form (Inductor fuses the log-softmax
                   and gather; the [N, V] logits from the GEMM still exist)
  torch_linear_ce  -torch.nn.functional.linear_cross_entropy(reduction="none") (T = 1)
  lens             lens_kernels.linear_token_logprobs (chunked torch on CPU, Triton on GPU)
  liger_flce       Liger-Kernel's fused linear cross entropy, reduction="none" (GPU only)
and, on GPU, the GRPO clipped-surrogate loss from hidden states: eager torch (torch_ref), lens (its fused
log-probs + the same surrogate) and Liger's LigerFusedLinearGRPOLoss (liger_grpo).
CPU: fp32, one thread, forward (no grad, as for old/reference log-probs) and forward + backward, at a
small head and Qwen2.5-3B's head; also the logits-input ops token_logprobs and interference_scores against
eager and the compiled plain expression. CPU cases run interleaved (every provider once per round, in a
rotating order: the machine is shared) and write bench/results/peers_cpu.{json,md} with wall time,
process CPU time, peak memory and lens/peer ratios, median [IQR]:
`PEERS_ROUNDS=5 pytest bench/bench_peers.py -k cpu` (the Qwen-like forward + backward takes minutes).
GPU: bf16 at the paper's Qwen2.5-7B head, N = 16,384 tokens: `pytest bench/bench_peers.py --benchmark-only`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from harness import (
    RESULTS_FILE,
    git_commit,
    interleaved,
    matmul_rate,
    peak_memory,
    quantiles,
    ratio_quartiles,
    record,
    run_case,
)

from lens_kernels import (
    interference_scores,
    interference_scores_ref,
    linear_token_logprobs,
    linear_token_logprobs_ref,
    token_logprobs,
    token_logprobs_ref,
)

CUDA = torch.cuda.is_available()
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None
gpu_only = pytest.mark.skipif(not CUDA, reason="GPU shapes run only on CUDA")
cpu_only = pytest.mark.skipif(CUDA, reason="CPU shapes")
LogprobFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def plain_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The plain form every peer computes: log_softmax(hidden @ weight.T)[targets] in fp32."""
    logits = (hidden @ weight.T).float()
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)


# One compiled function for every shape of the session (dynamic shapes: no recompile per case).
_COMPILED = torch.compile(plain_logprobs, dynamic=True)


def linear_ce_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return -F.linear_cross_entropy(hidden, weight, targets, reduction="none").float()


def liger_logprobs() -> LogprobFn:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    loss = LigerFusedLinearCrossEntropyLoss(reduction="none")
    return lambda hidden, weight, targets: -loss(weight, hidden, targets).float()


def providers() -> dict[str, Callable[[], LogprobFn]]:
    """Name -> factory of the log-prob function (factories: Liger is imported only when it runs)."""
    out: dict[str, Callable[[], LogprobFn]] = {
        "torch_ref": lambda: lambda h, w, t: linear_token_logprobs_ref(h, w, t),
        "torch_compile": lambda: _COMPILED,
        "torch_linear_ce": lambda: linear_ce_logprobs,
        "lens": lambda: lambda h, w, t: linear_token_logprobs(h, w, t),
    }
    if CUDA:
        out["liger_flce"] = liger_logprobs
    return out


def _case(n: int, h: int, v: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(n, h, generator=g, device=device).to(dtype)
    weight = (torch.randn(v, h, generator=g, device=device) * 3 / h**0.5).to(dtype)
    return hidden, weight, torch.randint(0, v, (n,), generator=g, device=device)


def _forward(fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            fn(hidden, weight, targets)

    return run


def _fwd_bwd(fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()

    def run() -> None:
        h.grad = w.grad = None
        fn(h, w, targets).sum().backward()

    return run


def _checked(name: str, fn: LogprobFn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> None:
    """Every peer must compute the same log-probs before it is timed (bf16: GEMM rounding differs)."""
    with torch.no_grad():
        got = fn(hidden, weight, targets)
        want = plain_logprobs(hidden.float(), weight.float(), targets)
    tol = 1e-3 if hidden.dtype == torch.float32 else 0.25
    assert (got - want).abs().max().item() < tol, name


# (N, H, V): a small head, and Qwen2.5-3B's real head (H 2048, V 151,936) at a CPU-sized token count.
CPU_SHAPES = [(1024, 256, 32000), (256, 2048, 151936)]
CPU_PEERS = ["torch_ref", "torch_compile", "torch_linear_ce", "lens"]
PEERS_FILE = RESULTS_FILE.parent / "peers_cpu.json"
# Interleaved rounds per case (PEERS_ROUNDS): every round runs each provider once, in a rotating order.
ROUNDS = int(os.environ.get("PEERS_ROUNDS", "5"))


def _peer_case(case: str, shape: dict[str, int], closures: dict[str, Callable[[], None]]) -> dict[str, Any]:
    """Warm every provider (compiles), time them interleaved, measure peak memory; store and return the case."""
    for run in closures.values():
        run()
    load0 = os.getloadavg()[0]
    times = interleaved(closures, ROUNDS)
    peaks = {name: peak_memory(run, "cpu") for name, run in closures.items()}
    entry = {
        "case": case, "shape": shape, "rounds": ROUNDS, "threads": torch.get_num_threads(),
        "load": [load0, os.getloadavg()[0]], "commit": git_commit(), "torch": torch.__version__,
        "providers": {
            name: {
                "wall_ms": 1e3 * statistics.median(t["wall"]), "cpu_ms": 1e3 * statistics.median(t["cpu"]),
                "peak_mib": peaks[name] / 2**20,
                "lens_over_wall": ratio_quartiles(times["lens"]["wall"], t["wall"]),
                "lens_over_cpu": ratio_quartiles(times["lens"]["cpu"], t["cpu"]),
            }
            for name, t in times.items()
        },
    }  # fmt: skip
    for name, t in times.items():
        med, p20, p80 = quantiles(t["wall"])
        record(f"peers_{case}", name, shape, med, p20, p80, peaks[name], "cpu", interleaved_rounds=ROUNDS)
    cases = json.loads(PEERS_FILE.read_text()) if PEERS_FILE.exists() else {}
    cases[f"{case} {shape}"] = entry
    PEERS_FILE.write_text(json.dumps(cases, indent=1) + "\n")
    PEERS_FILE.with_suffix(".md").write_text(peers_table(cases))
    return entry


def peers_table(cases: dict[str, dict[str, Any]]) -> str:
    """The markdown table of bench/results/peers_cpu.json: one row per case and provider."""
    lines = [
        "# Peers on CPU, interleaved (bench/bench_peers.py, `pytest bench/bench_peers.py -k cpu`)",
        "",
        "fp32, one thread. Each case: every provider warmed once (torch.compile compiles then), then "
        "rounds in which each provider runs once, in a rotating order; lens / peer ratios are per round, "
        "median [IQR]; < 1 means lens is faster. CPU = process CPU time of the call (one thread: the work "
        "done; less inflated by the machine's load than wall time). Peak = torch allocations live during "
        "one call above what was live before it (torch profiler), including the gradients the call "
        "creates: at the Qwen-like head dweight alone is 1,187 MiB. Load = 1-minute load average before "
        "and after the timed rounds on this shared 2-core machine. Forward + backward cases also time lens with "
        "the forward's logits always kept for the backward (lens_keep) and always recomputed (lens_recompute); "
        "`lens` is the default, which keeps them up to 256 MiB (`keeps_logits`).",
        "",
        "| case | shape | provider | wall ms | CPU ms | peak MiB | lens/peer wall | lens/peer CPU | rounds, load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in cases.values():
        shape = " ".join(f"{k} {v:,}" for k, v in entry["shape"].items())
        for name, p in entry["providers"].items():
            ratio = "-" if name == "lens" else "{:.2f} [{:.2f}-{:.2f}]"
            lines.append(
                f"| {entry['case']} | {shape} | {name} | {p['wall_ms']:,.0f} | {p['cpu_ms']:,.0f} | "
                f"{p['peak_mib']:,.1f} | {ratio.format(*p['lens_over_wall'])} | {ratio.format(*p['lens_over_cpu'])} | "
                f"{entry['rounds']}, {entry['load'][0]:.1f}-{entry['load'][1]:.1f} |"
            )
    lines += ["", f"Commit {next(iter(cases.values()))['commit']} (each case: see peers_cpu.json), torch "
              f"{next(iter(cases.values()))['torch']}.", ""]  # fmt: skip
    return "\n".join(lines)


@cpu_only
@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize(("n", "h", "v"), CPU_SHAPES)
def test_logprobs_cpu(device, pass_: str, n: int, h: int, v: int) -> None:
    hidden, weight, targets = _case(n, h, v, torch.float32, device)
    closures = {}
    for name in CPU_PEERS:
        fn = providers()[name]()
        _checked(name, fn, hidden, weight, targets)
        closures[name] = (_forward if pass_ == "fwd" else _fwd_bwd)(fn, hidden, weight, targets)
    if pass_ == "fwd_bwd":  # both backward modes of lens's CPU path, whichever `keeps_logits` picks
        for mode, budget in (("keep", math.inf), ("recompute", 0.0)):
            # Own tensors: the profiler subtracts a freed gradient only if it saw it allocated, so a
            # closure sharing lens's tensors would get lens's gradients subtracted from its peak.
            run = _fwd_bwd(providers()["lens"](), hidden, weight, targets)
            closures[f"lens_{mode}"] = _with_keep_budget(budget, run)
    entry = _peer_case(f"linear_logprobs_{pass_}", {"N": n, "H": h, "V": v}, closures)
    assert all(math.isfinite(p["wall_ms"]) for p in entry["providers"].values())


def _with_keep_budget(budget: float, run: Callable[[], None]) -> Callable[[], None]:
    """`run` with lens's KEEP_LOGITS_BYTES set to `budget` (inf: always keep the logits, 0: never)."""
    lin = importlib.import_module("lens_kernels.linear_token_logprobs")

    def wrapped() -> None:
        default, lin.KEEP_LOGITS_BYTES = lin.KEEP_LOGITS_BYTES, budget
        try:
            run()
        finally:
            lin.KEEP_LOGITS_BYTES = default

    return wrapped


def _compiled_plain(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """torch.compile(dynamic=True) of a plain reference expression (what a user would write and compile)."""
    return torch.compile(fn, dynamic=True)


def plain_token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The shortest plain form (T = 1): log_softmax(logits)[targets], no max shift of lens's reference."""
    return torch.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)


def plain_interference_scores(policy: torch.Tensor, ref: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """|log pi_theta(t) - log pi_ref(t)| in the shortest plain form (T = 1)."""
    return (plain_token_logprobs(policy, targets) - plain_token_logprobs(ref, targets)).abs()


# torch_compile: lens's reference compiled (max-shifted before / T); torch_compile_plain: the shortest form.
LOGITS_PEERS: dict[str, dict[str, Callable[..., torch.Tensor]]] = {
    "token_logprobs": {
        "torch_ref": token_logprobs_ref,
        "torch_compile": _compiled_plain(token_logprobs_ref),
        "torch_compile_plain": _compiled_plain(plain_token_logprobs),
        "lens": token_logprobs,
    },
    "interference_scores": {
        "torch_ref": interference_scores_ref,
        "torch_compile": _compiled_plain(interference_scores_ref),
        "torch_compile_plain": _compiled_plain(plain_interference_scores),
        "lens": interference_scores,
    },
}


@cpu_only
@pytest.mark.parametrize(
    ("op", "pass_", "n", "v"),
    [("token_logprobs", "fwd", 2048, 32000), ("token_logprobs", "fwd_bwd", 2048, 32000),
     ("interference_scores", "fwd", 1024, 32000)],
)  # fmt: skip
def test_logits_ops_cpu(device, op: str, pass_: str, n: int, v: int) -> None:
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(n, v, generator=g)
    other = logits + 0.1 * torch.randn(n, v, generator=g)
    targets = torch.randint(0, v, (n,), generator=g)
    x = logits.detach().requires_grad_(pass_ == "fwd_bwd")
    args = (x, targets) if op == "token_logprobs" else (logits, other, targets)
    want = LOGITS_PEERS[op]["torch_ref"](*args)
    closures = {}
    for name, fn in LOGITS_PEERS[op].items():
        assert (fn(*args) - want).abs().max().item() < 1e-4, name

        def run(fn: Callable[..., torch.Tensor] = fn) -> None:
            if pass_ == "fwd":
                with torch.no_grad():
                    fn(*args)
            else:
                x.grad = None
                fn(*args).sum().backward()

        closures[name] = run
    entry = _peer_case(f"{op}_{pass_}", {"N": n, "V": v}, closures)
    assert all(math.isfinite(p["wall_ms"]) for p in entry["providers"].values())


GPU_N, GPU_H, GPU_V = 16384, 3584, 152064  # Qwen2.5-7B's head, 16K response tokens


def _need(provider: str) -> None:
    if provider.startswith("liger") and not HAS_LIGER:
        pytest.fail("liger-kernel is not installed: carry its wheel (bench/gpu/wheels.sh)")


@gpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "torch_compile", "torch_linear_ce", "lens", "liger_flce"])
@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
def test_logprobs_gpu(benchmark, device, provider: str, pass_: str) -> None:
    _need(provider)
    hidden, weight, targets = _case(GPU_N, GPU_H, GPU_V, torch.bfloat16, device)
    fn = providers()[provider]()
    _checked(provider, fn, hidden[:1024], weight, targets[:1024])
    closure = (_forward if pass_ == "fwd" else _fwd_bwd)(fn, hidden, weight, targets)
    gemms = 1 if pass_ == "fwd" else 3  # forward logits; + d hidden and d weight
    floor = gemms * 2 * GPU_N * GPU_H * GPU_V / matmul_rate(device)
    run_case(benchmark, f"peers_logprobs_{pass_}", provider, {"N": GPU_N, "H": GPU_H, "V": GPU_V}, closure,
             device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip


def grpo_surrogate(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO's clipped surrogate (eps 0.2), token mean over the batch: logp/old/mask [B, T], adv [B]."""
    ratio = (logp - old).exp()
    surr = torch.minimum(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None])
    return -(surr * mask).sum() / mask.sum()


def grpo_providers(weight: torch.Tensor) -> dict[str, Callable[..., torch.Tensor]]:
    """Name -> loss(hidden [B, T, H], targets [B, T], mask, adv, old): eager, lens, Liger."""

    def eager(hidden, targets, mask, adv, old):
        logp = plain_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view_as(old)
        return grpo_surrogate(logp, old, adv, mask)

    def lens(hidden, targets, mask, adv, old):
        logp = linear_token_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view_as(old)
        return grpo_surrogate(logp, old, adv, mask)

    out = {"torch_ref": eager, "lens": lens}
    if HAS_LIGER:
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        liger = LigerFusedLinearGRPOLoss(beta=0.0, use_ref_model=False, loss_type="grpo", epsilon_low=0.2,
                                         epsilon_high=0.2)  # fmt: skip

        def liger_grpo(hidden, targets, mask, adv, old):
            out = liger(hidden, weight, targets, mask, adv, old_per_token_logps=old)
            return out[0] if isinstance(out, tuple) else out

        out["liger_grpo"] = liger_grpo
    return out


@gpu_only
@pytest.mark.parametrize("provider", ["torch_ref", "lens", "liger_grpo"])
def test_grpo_loss_gpu(benchmark, device, provider: str) -> None:
    _need(provider)
    b, t = 64, GPU_N // 64  # 64 rollouts x 256 tokens
    hidden, weight, targets = _case(b * t, GPU_H, GPU_V, torch.bfloat16, device)
    hidden, targets = hidden.view(b, t, GPU_H), targets.view(b, t)
    g = torch.Generator(device=device).manual_seed(1)
    mask = (torch.rand(b, t, generator=g, device=device) < 0.9).float()
    adv = torch.randn(b, generator=g, device=device)
    with torch.no_grad():
        old = plain_logprobs(hidden.flatten(0, 1), weight, targets.flatten()).view(b, t) + 0.01
    # The LM head is trained too: every provider produces d hidden and d weight.
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    loss = grpo_providers(w)[provider]

    def run() -> None:
        h.grad = w.grad = None
        loss(h, targets, mask, adv, old).backward()

    floor = 3 * 2 * b * t * GPU_H * GPU_V / matmul_rate(device)
    run_case(benchmark, "peers_grpo_loss_fwd_bwd", provider, {"B": b, "T": t, "H": GPU_H, "V": GPU_V}, run,
             device=device, floor_s=floor, dtype="bfloat16")  # fmt: skip
