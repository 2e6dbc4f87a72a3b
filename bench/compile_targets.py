"""Compile every Triton kernel of lens_kernels for real GPUs (sm_80, sm_90) on a machine without one.

    python bench/compile_targets.py                        # full matrix -> bench/results/compile_targets.{md,json}
    python bench/compile_targets.py --set ci --json OUT    # the representative set of tests/test_compile_targets.py

Also compiles every csrc/cuda/*.cu for both architectures with nvcc (-cubin -Xptxas -v) and records each
kernel instance's registers and spills; a compile error there fails too.

Each case is one kernel at one configuration its launcher picks for the paper's shapes: the five models'
LM heads (V 151,936 / 152,064 / 128,256, H 2,048-4,096), bf16 (the trainer's dtype) and fp32, with and
without entropy, prompts up to 16,384 tokens. The configurations come from the launchers' own pure
functions (`fwd_launch`, `dz_launch`, `linear_scores_launch`, token_logprobs' `launch_blocks`,
`select_block`) for a sweep of row counts N, deduplicated: the number of distinct variants per kernel is
the number of compiles a training run can trigger, and it is recorded.
`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` runs the whole pipeline down to
ptxas; registers and spills come from ptxas's own log (`-v`), shared memory from Triton's metadata.
Every compile runs from an empty cache, in a pool of worker processes, under a hard timeout.
A case fails on a compile error, a compile over 60 s, or a spill in a bf16 default configuration.
TRITON_INTERPRET must be unset (it turns @triton.jit into the interpreter, which cannot compile).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ARCHS = (80, 90)
COMPILE_LIMIT_S = 60.0
# The paper's models' LM heads: (V, H). Llama-3.2-3B-Instruct has the 128,256-token vocabulary.
MODELS = {
    "qwen2.5-3b": (151936, 2048),
    "qwen2.5-7b": (152064, 3584),
    "qwen3-4b": (151936, 2560),
    "qwen3-8b": (151936, 4096),
    "llama3.2-3b": (128256, 3072),
}
# Row counts the launchers are asked about: 1 row to a 64K-token micro-batch, and prompt lengths for
# the selection kernel up to the paper's 16,384 (+ ragged ones).
ROW_SWEEP = (1, 7, 64, 65, 333, 1024, 4099, 16384, 65536)
PROMPT_SWEEP = (1, 17, 1000, 1025, 4096, 16384, 16387)
# Representative set for CI (2 CPU cores): the bf16 default configuration of every kernel at one model
# (Qwen2.5-7B: H 3584 is not a power of two) on sm_90, the fp32 linear forward and the selection kernel
# on both architectures.
CI_KEYS = (
    "linear_token_logprobs._fwd_kernel|qwen2.5-7b bf16|90",
    "linear_token_logprobs._fwd_kernel|qwen2.5-7b fp32|80",
    "linear_token_logprobs._dz_kernel|H=3584 bf16 entropy|90",
    "interference._linear_scores_kernel|qwen2.5-7b bf16|90",
    "token_logprobs._fwd_kernel|V=152064 bf16 entropy|90",
    "token_logprobs._bwd_kernel|V=152064 bf16 entropy|90",
    "interference._scores_kernel|V=152064 bf16|90",
    "select_tokens._select_kernel|any P|80",
    "select_tokens._select_kernel|any P|90",
)

TORCH_TO_TRITON = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
CUDA_DIR = Path(__file__).resolve().parents[1] / "csrc" / "cuda"
# setup.py's NVCC_FLAGS (-O3 -lineinfo); the .cu files are torch-free, so no torch include dirs are needed.
NVCC_FLAGS = ("-O3", "-lineinfo", "-std=c++17")


@dataclass(frozen=True)
class Case:
    """One kernel variant: runtime argument types (`*bf16`, `i32`, `fp32`, ...), constexprs, options."""

    kernel: str  # module._kernel, module relative to lens_kernels
    config: str  # what the variant is for: model / dtype / flags
    runtime: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, int]
    bf16_default: bool  # a spill here is a failure (bf16 is what training runs)
    # Integer arguments that are multiples of 16 at the paper's shapes (row strides = H or V): the JIT
    # specialises them as divisible by 16, which is what lets the loads vectorise.
    aligned: tuple[str, ...] = ()
    variants_over_sweep: int = 1  # distinct constexpr sets the launcher picked over the N sweep

    def key(self, arch: int) -> str:
        return f"{self.kernel}|{self.config}|{arch}"


@dataclass
class Result:
    """What one compile produced; `error` is empty on success."""

    kernel: str
    config: str
    arch: int
    regs: int = -1
    spill_stores: int = -1
    spill_loads: int = -1
    smem: int = -1
    seconds: float = 0.0
    variants_over_sweep: int = 1
    bf16_default: bool = False
    error: str = ""
    problems: list[str] = field(default_factory=list)


def _module(name: str) -> Any:
    # `lens_kernels.linear_token_logprobs` as an attribute is the public function, not the module.
    return importlib.import_module(f"lens_kernels.{name}")


def _split_meta(meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """A launcher's keyword arguments -> (constexprs, compile options)."""
    options = {k: meta[k] for k in ("num_warps", "num_stages") if k in meta}
    return {k: v for k, v in meta.items() if k not in options}, options


def _distinct(metas: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for m in metas:
        seen.setdefault(json.dumps(m, sort_keys=True), m)
    return list(seen.values())


def _cases_from_sweep(
    kernel: str, config: str, runtime: dict[str, str], metas: list[dict[str, Any]], bf16_default: bool
) -> list[Case]:
    """One Case per distinct launcher choice over the sweep (normally exactly one)."""
    distinct = _distinct(metas)
    aligned = tuple(k for k in runtime if k.startswith("stride_"))
    out = []
    for i, meta in enumerate(distinct):
        constexprs, options = _split_meta(meta)
        label = config if len(distinct) == 1 else f"{config} #{i + 1}"
        out.append(Case(kernel, label, runtime, constexprs, options, bf16_default, aligned, len(distinct)))
    return out


def unpinned_ints(case: Case) -> list[str]:
    """Integer arguments the JIT would specialise by value (== 1, % 16) that the case does not pin down.

    Each is a potential extra compiled variant per value class, so every integer argument must be
    either `do_not_specialize` in the kernel (N-like sizes) or a 16-aligned stride (`aligned`).
    """
    fn = kernel_fn(case.kernel)
    # A JITFunction keeps the decorator's list; under TRITON_INTERPRET it is an InterpretedFunction's kwarg.
    listed = getattr(fn, "do_not_specialize", None)
    listed = fn.kwargs.get("do_not_specialize") if listed is None else listed
    pinned = {fn.arg_names[i] if isinstance(i, int) else i for i in listed or ()}
    return [k for k, t in case.runtime.items() if t == "i32" and k not in pinned and k not in case.aligned]


def kernel_fn(kernel: str) -> Any:
    """The @triton.jit function named `module._kernel`."""
    module, name = kernel.split(".")
    return getattr(_module(module), name)


def cases() -> list[Case]:
    """The full matrix, built from the launchers' own configuration functions (interpreter off)."""
    import torch

    lin, inter = _module("linear_token_logprobs"), _module("interference")
    tok, sel = _module("token_logprobs"), _module("select_tokens")
    out: list[Case] = []
    for dtype in (torch.bfloat16, torch.float32):
        dt = TORCH_TO_TRITON[str(dtype).removeprefix("torch.")]
        for model, (v, h) in MODELS.items():
            for ent in (False, True):
                metas = [lin.fwd_launch(n, h, v, dtype, ent, sms, False).meta for n in ROW_SWEEP for sms in (108, 132)]
                runtime = {"h_ptr": f"*{dt}", "w_ptr": f"*{dt}", "targets_ptr": "*i64", "m_ptr": "*fp32",
                           "s_ptr": "*fp32", "t_ptr": "*fp32", "zt_ptr": "*fp32", "N": "i32", "stride_h": "i32",
                           "stride_w": "i32", "inv_t": "fp32", "tiles_per_split": "i32"}  # fmt: skip
                name = f"{model} {dt}" + (" entropy" if ent else "")
                out += _cases_from_sweep("linear_token_logprobs._fwd_kernel", name, runtime, metas, dt == "bf16")
            metas = [
                inter.linear_scores_launch(n, h, h, v, dtype, sms, False).meta for n in ROW_SWEEP for sms in (108, 132)
            ]
            runtime = {"hp_ptr": f"*{dt}", "wp_ptr": f"*{dt}", "hr_ptr": f"*{dt}", "wr_ptr": f"*{dt}",
                       "targets_ptr": "*i64", "part_ptr": "*fp32", "N": "i32", "stride_hp": "i32", "stride_wp": "i32",
                       "stride_hr": "i32", "stride_wr": "i32", "inv_t": "fp32", "tiles_per_split": "i32"}  # fmt: skip
            out += _cases_from_sweep(
                "interference._linear_scores_kernel", f"{model} {dt}", runtime, metas, dt == "bf16"
            )
        for h in sorted({h for _, h in MODELS.values()}):
            for ent in (False, True):
                # The backward's row chunk is at most N; dz tiles do not depend on the vocabulary.
                metas = [lin.dz_launch(n, 4096, h, dtype, ent, False).meta for n in ROW_SWEEP]
                runtime = {"h_ptr": f"*{dt}", "w_ptr": f"*{dt}", "targets_ptr": "*i64", "m_ptr": "*fp32",
                           "rel_lse_ptr": "*fp32", "ent_ptr": "*fp32", "gl_ptr": "*fp32", "ge_ptr": "*fp32",
                           "dz_ptr": f"*{dt}", "N": "i32", "C": "i32", "col0": "i32", "stride_h": "i32",
                           "stride_w": "i32", "stride_dz": "i32", "inv_t": "fp32"}  # fmt: skip
                name = f"H={h} {dt}" + (" entropy" if ent else "")
                out += _cases_from_sweep("linear_token_logprobs._dz_kernel", name, runtime, metas, dt == "bf16")
        for v in sorted({v for v, _ in MODELS.values()}):
            for ent in (False, True):
                blocks = {tok.launch_blocks(n, v, False) for n in ROW_SWEEP}
                metas = [dict(V=v, BLOCK_N=bn, BLOCK_V=bv, WITH_ENTROPY=ent, num_warps=w) for bn, bv, w in blocks]
                name = f"V={v} {dt}" + (" entropy" if ent else "")
                runtime = {"logits_ptr": f"*{dt}", "targets_ptr": "*i64", "logp_ptr": "*fp32", "m_ptr": "*fp32",
                           "rel_lse_ptr": "*fp32", "ent_ptr": "*fp32", "N": "i32", "stride_n": "i32",
                           "inv_t": "fp32"}  # fmt: skip
                out += _cases_from_sweep("token_logprobs._fwd_kernel", name, runtime, metas, dt == "bf16")
                bwd_metas = [{**m, "FIX_BF16": False} for m in metas]
                runtime = {"logits_ptr": f"*{dt}", "targets_ptr": "*i64", "m_ptr": "*fp32", "rel_lse_ptr": "*fp32",
                           "ent_ptr": "*fp32", "gl_ptr": "*fp32", "ge_ptr": "*fp32", "grad_ptr": f"*{dt}", "N": "i32",
                           "stride_n": "i32", "stride_gn": "i32", "inv_t": "fp32"}  # fmt: skip
                out += _cases_from_sweep("token_logprobs._bwd_kernel", name, runtime, bwd_metas, dt == "bf16")
            blocks = {tok.launch_blocks(n, v, False) for n in ROW_SWEEP}
            metas = [dict(V=v, BLOCK_N=bn, BLOCK_V=bv, num_warps=w) for bn, bv, w in blocks]
            runtime = {"p_ptr": f"*{dt}", "r_ptr": f"*{dt}", "targets_ptr": "*i64", "out_ptr": "*fp32", "N": "i32",
                       "stride_p": "i32", "stride_r": "i32", "inv_t": "fp32"}  # fmt: skip
            out += _cases_from_sweep("interference._scores_kernel", f"V={v} {dt}", runtime, metas, dt == "bf16")
    # Scores are canonicalised to fp32 before selection: one dtype.
    metas = [dict(BLOCK_P=sel.select_block(p, False), num_warps=4) for p in PROMPT_SWEEP]
    runtime = {"scores_ptr": "*fp32", "mask_ptr": "*i8", "rank_ptr": "*i64", "k_ptr": "*i64", "out_ptr": "*i8",
               "P": "i32", "rank_bits": "i32", "stride_s": "i32", "stride_m": "i32", "stride_r": "i32",
               "stride_o": "i32"}  # fmt: skip
    out += _cases_from_sweep("select_tokens._select_kernel", "any P", runtime, metas, True)
    return out


def _ptxas_number(log: str, pattern: str) -> int:
    match = re.search(pattern, log)
    if match is None:
        raise RuntimeError(f"ptxas log lacks {pattern!r}:\n{log[-2000:]}")
    return int(match.group(1))


def compile_case(case: Case, arch: int) -> Result:
    """Compile one case for sm_<arch> from an empty cache; never raises (errors land in the result)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    result = Result(case.kernel, case.config, arch, variants_over_sweep=case.variants_over_sweep,
                    bf16_default=case.bf16_default)  # fmt: skip
    fn = kernel_fn(case.kernel)
    signature = {**case.runtime, **dict.fromkeys(case.constexprs, "constexpr")}
    # Pointers from torch allocations are 16-byte aligned, and so are the paper's row strides: the JIT
    # specialises on both, so the compile check does too.
    divisible = [k for k, t in case.runtime.items() if t[0] == "*" or k in case.aligned]
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in divisible}
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v output is printed to stdout: captured below
    log = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(
                ASTSource(fn, signature, case.constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                options=case.options,
            )  # fmt: skip
    except Exception as err:  # any compiler failure is a result, not a crash of the whole matrix
        result.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        result.seconds = time.perf_counter() - t0
        return result
    result.seconds = time.perf_counter() - t0
    text = log.getvalue()
    result.regs = _ptxas_number(text, r"Used (\d+) registers")
    result.spill_stores = _ptxas_number(text, r"(\d+) bytes spill stores")
    result.spill_loads = _ptxas_number(text, r"(\d+) bytes spill loads")
    result.smem = int(kernel.metadata.shared)
    return result


def check(result: Result, limit_s: float = COMPILE_LIMIT_S) -> list[str]:
    """The failures of one result: compile error, compile over the limit, spill in a bf16 default config."""
    problems = []
    if result.error:
        problems.append(f"compile error: {result.error}")
    if result.seconds > limit_s:
        problems.append(f"compile took {result.seconds:.1f} s > {limit_s:.0f} s")
    if result.bf16_default and max(result.spill_stores, result.spill_loads) > 0:
        problems.append(f"bf16 default config spills {result.spill_stores} B")
    return problems


def _worker_init(cache_root: str) -> None:
    # A private, empty cache per worker: every compile is measured cold, and nothing leaks into ~/.triton.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(dir=cache_root)
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 is its default


def _run_one(job: tuple[Case, int]) -> Result:
    return compile_case(*job)


def run(jobs: list[tuple[Case, int]], workers: int, timeout_s: float) -> list[Result]:
    """Compile all jobs in `workers` processes, results in job order. Jobs start in order, so each result
    is due at most one compile after the previous one: waiting longer than `timeout_s` for it means a hung
    compile (ptxas once ran 15 minutes without finishing). It and the jobs after it are then failures and
    the pool, hung worker included, is terminated."""
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as cache_root:
        pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_worker_init, initargs=(cache_root,))
        try:
            done = pool.imap(_run_one, jobs)
            for case, arch in jobs:
                try:
                    results.append(done.next(timeout=timeout_s))
                except multiprocessing.TimeoutError:
                    results.append(Result(case.kernel, case.config, arch, seconds=timeout_s, error="timed out",
                                          bf16_default=case.bf16_default))  # fmt: skip
                    break
        finally:
            pool.terminate()
            pool.join()
    for case, arch in jobs[len(results) :]:
        results.append(Result(case.kernel, case.config, arch, error="not run: an earlier compile hung",
                              bf16_default=case.bf16_default))  # fmt: skip
    for r in results:
        r.problems = check(r)
    return results


@dataclass
class CuResult:
    """One kernel (template instance) of a csrc/cuda/*.cu file compiled by nvcc for one architecture."""

    file: str
    arch: int
    function: str  # demangled, namespaces and parameter list dropped
    regs: int
    spill_stores: int
    spill_loads: int
    smem: int
    file_seconds: float  # nvcc time of the whole file (all its instances)


def short_name(demangled: str) -> str:
    """A demangled kernel name without namespaces and parameters.

    `void lens::cuda::(anonymous namespace)::k<(lens::KlKind)0, float>(Args, float const*)` -> `k<KlKind 0, float>`.
    """
    name = demangled.removeprefix("void ")
    depth = 0
    for i, ch in enumerate(name):  # cut the parameter list: the first '(' outside template brackets
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0 and name[i - 1] not in ":(":
            name = name[:i]
            break
    name = re.sub(r"\(anonymous namespace\)::|\b\w+::", "", name)
    return re.sub(r"\((\w+)\)(\d+)", r"\1 \2", name)


def parse_ptxas(log: str) -> list[tuple[str, int, int, int, int]]:
    """(mangled name, registers, spill stores, spill loads, smem bytes) per entry function of a ptxas -v log."""
    out = []
    for block in re.split(r"Compiling entry function '", log)[1:]:
        name = block.split("'", 1)[0]
        stores, loads = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block).groups()
        regs = int(re.search(r"Used (\d+) registers", block).group(1))
        smem = re.search(r"(\d+) bytes smem", block)
        out.append((name, regs, int(stores), int(loads), int(smem.group(1)) if smem else 0))
    return out


def compile_cu(path: Path, arch: int) -> list[CuResult]:
    """nvcc -cubin -Xptxas -v for sm_<arch>: one CuResult per kernel instance; raises on a compile error."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v", *NVCC_FLAGS, "-o", f"{tmp}/out.cubin", str(path)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    entries = parse_ptxas(proc.stdout + proc.stderr)
    mangled = "\n".join(e[0] for e in entries)
    demangled = subprocess.run(["c++filt"], input=mangled, capture_output=True, text=True).stdout.splitlines()
    return [
        CuResult(path.name, arch, short_name(d), regs, st, ld, smem, seconds)
        for d, (_, regs, st, ld, smem) in zip(demangled, entries, strict=True)
    ]


def toolchain() -> dict[str, str]:
    """Triton version and the ptxas builds it uses (sm_80 and sm_90 may use different ones)."""
    import subprocess

    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    info = {"triton": triton.__version__}
    for arch in ARCHS:
        path = get_ptxas(arch).path
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        info[f"ptxas sm_{arch}"] = f"{Path(path).name} {version[-1] if version else '?'}"
    return info


def cuda_matrix(archs: Iterable[int] = ARCHS) -> tuple[list[CuResult], list[str]]:
    """Every csrc/cuda/*.cu for each arch: (results, problems). A compile error is a problem; spills are
    recorded in the table only (csrc/ has its own owners; its kernels are not bf16 Triton configurations)."""
    results: list[CuResult] = []
    problems: list[str] = []
    for path in sorted(CUDA_DIR.glob("*.cu")):
        for arch in archs:
            try:
                results += compile_cu(path, arch)
            except RuntimeError as err:
                problems.append(f"{path.name} sm_{arch}: compile error: {str(err)[:300]}")
    return results, problems


def render(
    results: list[Result], cu: list[CuResult], cu_problems: list[str], tools: dict[str, str], seconds: float
) -> str:
    """The markdown tables of bench/results/compile_targets.md."""
    lines = [
        "# Triton kernels and csrc/cuda compiled for sm_80 and sm_90 without a GPU",
        "",
        "Written by `python bench/compile_targets.py` (do not edit by hand). Toolchain: "
        + ", ".join(f"{k} {v}" for k, v in tools.items())
        + f". {len(results)} Triton compiles and {len({(r.file, r.arch) for r in cu})} nvcc runs in {seconds:.0f} s"
        " wall on this machine.",
        "",
        "Columns: registers per thread, spill stores/loads in bytes (ptxas -v), Triton's shared memory in bytes,",
        "compile seconds (cold cache, whole pipeline, two compiles at a time on 2 shared CPU cores),",
        "variants = distinct constexpr sets the launcher picks over N in "
        f"{list(ROW_SWEEP)} (prompt lengths {list(PROMPT_SWEEP)} for the selection kernel). bf16 default",
        "configurations must not spill; fp32 ones may (recorded). Failures are listed under the table.",
        "",
        "| kernel | config | arch | regs | spill st/ld B | smem B | compile s | variants |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        spill = f"{r.spill_stores}/{r.spill_loads}" if not r.error else "-"
        lines.append(
            f"| {r.kernel} | {r.config} | sm_{r.arch} | {r.regs if not r.error else '-'} | {spill} | "
            f"{r.smem if not r.error else '-'} | {r.seconds:.1f} | {r.variants_over_sweep} |"
        )
    failed = [r for r in results if r.problems]
    lines += ["", f"Triton failures: {len(failed)}" + ("" if failed else " (none)")]
    lines += [f"- {r.kernel} {r.config} sm_{r.arch}: {'; '.join(r.problems)}" for r in failed]
    lines += [
        "",
        f"## csrc/cuda (nvcc {' '.join(NVCC_FLAGS)} -cubin -Xptxas -v; the .cu files include no torch headers)",
        "",
        "| file | kernel | arch | regs | spill st/ld B | smem B | file compile s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.file} | {r.function} | sm_{r.arch} | {r.regs} | {r.spill_stores}/{r.spill_loads} | {r.smem} | "
        f"{r.file_seconds:.1f} |"
        for r in cu
    ]
    lines += ["", f"csrc/cuda failures: {len(cu_problems)}" + ("" if cu_problems else " (none)")]
    lines += [f"- {p}" for p in cu_problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("full", "ci"), default="full")
    parser.add_argument("--json", type=Path, help="write the results here (default: bench/results/ for full)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2 * COMPILE_LIMIT_S, help="kill a compile after this")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("compile_targets: unset TRITON_INTERPRET (the interpreter cannot compile for a GPU)", file=sys.stderr)
        return 2
    every = cases()
    jobs = [(c, arch) for c in every for arch in ARCHS]
    if args.set == "ci":
        by_key = {c.key(arch): (c, arch) for c, arch in jobs}
        missing = [k for k in CI_KEYS if k not in by_key]
        if missing:
            raise SystemExit(f"compile_targets: CI cases no longer in the matrix: {missing}")
        jobs = [by_key[k] for k in CI_KEYS]
    t0 = time.perf_counter()
    results = run(jobs, args.workers, args.timeout)
    cu, cu_problems = cuda_matrix() if shutil.which("nvcc") else ([], ["nvcc not found: csrc/cuda not compiled"])
    wall = time.perf_counter() - t0
    tools = toolchain()
    payload = {
        "toolchain": tools,
        "wall_s": wall,
        "results": [asdict(r) for r in results],
        "cuda": [asdict(r) for r in cu],
        "cuda_problems": cu_problems,
    }
    out_json = args.json or (RESULTS / "compile_targets.json" if args.set == "full" else None)
    if out_json is not None:
        out_json.write_text(json.dumps(payload, indent=1) + "\n")
    table = render(results, cu, cu_problems, tools, wall)
    if args.set == "full" and args.json is None:
        (RESULTS / "compile_targets.md").write_text(table)
    print(table)
    return 1 if cu_problems or any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
