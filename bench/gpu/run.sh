#!/usr/bin/env bash
# The one prepared GPU check of lens, for a single H200 (about 10 minutes):
#   1. rebuild the extension with its CUDA part against the machine's own torch,
#   2. run every `gpu` test (Triton kernels and native ops against their torch references),
#   3. run the kernel and op benchmarks at the paper's shapes, with the hardware floors (copy
#      bandwidth, bf16 matmul rate) measured in the same run, and print one ratio-to-floor table.
# Raw results go to $OUT (the device tool's folder) or bench/results/gpu/.
#   bash bench/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-bench/results/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset TRITON_INTERPRET
py=python3
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

# Pure-Python packages missing on the GPU image travel as wheels in .whl/ (see the device README).
if compgen -G ".whl/*.whl" >/dev/null; then
  $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"

step "build the CUDA extension"
LENS_BUILD_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 $py -m pip install -q --no-build-isolation --no-deps -e . \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
$py -c "import lens.ops as o; print('native devices:', o.native_devices())" || status=1

step "GPU tests"
$py -m pytest -m gpu tests/kernels tests/csrc -q -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "benchmarks (paper shapes; floors measured in the same run)"
$py -m pytest bench/bench_token_logprobs.py bench/bench_interference.py bench/bench_select.py bench/bench_ops.py \
  --benchmark-only -q -p no:cacheprovider --benchmark-json="$out/benchmarks.json" 2>&1 | tee "$out/bench.log" \
  | sed -n '/lens benchmark rows/,$p'
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp bench/results/results.jsonl "$out/results.jsonl" 2>/dev/null

step "done (status $status)"
exit $status
