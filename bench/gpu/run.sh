#!/usr/bin/env bash
# The one prepared GPU check of lens, for a single H200, in under 10 minutes (bench/gpu/README.md):
#   wheels     install the carried wheels (.whl/, from bench/gpu/wheels.sh) the image lacks
#   machine    preflight: a CUDA device torch can use, every tool (nvidia-smi, nvcc, ninja) and import the
#              later stages need, and free disk; each missing piece is named and fails the stage
#   build      the extension with its CUDA part, against the machine's own torch
#   tests      every `gpu` test (Triton kernels and native ops against their torch references)
#   floors     copy bandwidth and bf16 matmul rate, measured in this run (bench/gpu/floors.py)
#   bench      kernel and op benchmarks at the paper's shapes, with their ratio to the floors
#   model      a random-init Qwen2.5-1.5B-shaped checkpoint (bench/gpu/make_model.py)
#   step       training step times, GRPO vs LENS (python -m lens.bench_step, configs/gpu_bench.yaml), one
#              process per algorithm so that at most one run's final checkpoint (~20 GB) is on disk at a time
#   packing    bench/bench_packing.py: one update over 256 long-tailed rollouts at a Qwen2.5-1.5B shape, by
#              row-count, token-budget and padding-free micro-batches (padded/real positions, time, peak memory),
#              padding-free also through per-row SDPA (no flash-attn); rank imbalance and lockstep
#              micro-batches against the bound at the paper preset's batch shape
#   peers      bench/bench_peers.py: lens vs eager, torch.compile, linear_cross_entropy, Liger's fused linear CE,
#              and the GRPO loss vs Liger's (last: compiling the peers must not eat the training benchmark's time)
#   summary    one table (bench/gpu/summary.py), also OUT/summary.md
# Each stage runs under a timeout cut to the time left (LENS_GPU_BUDGET_S, default 540 s); a failed stage
# does not stop the later ones. Every failure is loud: the stage is named in stages.tsv, in the summary and
# on the last line ("FAILED stages: ..."), and the exit status is 1. Output: $OUT (the device tool's folder)
# or bench/results/gpu/: run.log, summary.md, floors.json, results.jsonl, step_time.json/.md and raw.tar.gz
# (logs, JUnit XML, pytest-benchmark JSON, bench_step's folders): 7 files, within the tool's 8.
#   bash bench/gpu/run.sh
#   LENS_GPU_STAGES="wheels build step" bash bench/gpu/run.sh      # a rerun of some stages only
# Other knobs: LENS_GPU_STEPS (3), LENS_GPU_MODEL_DIR (/tmp/lens_gpu_model), LENS_GPU_PYTHON (python3),
# LENS_GPU_MIN_FREE_GB (30: free disk the machine stage and each training run require).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-bench/results/gpu}"
raw="$out/raw"
rm -rf "$raw" && mkdir -p "$raw"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PIP_ROOT_USER_ACTION=ignore
export DS_ACCELERATOR=cuda  # the carried DeepSpeed wheel was built on a CPU machine
unset TRITON_INTERPRET
export py="${LENS_GPU_PYTHON:-python3}" out raw
export model_dir="${LENS_GPU_MODEL_DIR:-/tmp/lens_gpu_model}" steps="${LENS_GPU_STEPS:-3}"
export min_free_gb="${LENS_GPU_MIN_FREE_GB:-30}"
# pip --target puts the carried wheels' executables (ninja for the CUDA build) in /tmp/site/bin.
export PATH="/tmp/site/bin:$PATH"
budget="${LENS_GPU_BUDGET_S:-540}"
selected=" ${LENS_GPU_STAGES-wheels machine build tests floors bench model step packing peers} "  # set but empty: none
reserve=25  # seconds kept for the summary and packing
start=$(date +%s)
status=0
failed=()

# stage NAME CAP_S FUNCTION: run FUNCTION under a timeout of min(CAP_S, time left), record it in stages.tsv.
stage() {
  local name=$1 cap=$2 fn=$3 left limit t0 rc what
  if [[ $selected != *" $name "* ]]; then
    printf '%s\tskipped: not selected\t0\n' "$name" >>"$raw/stages.tsv"
    return 0
  fi
  left=$((budget - ($(date +%s) - start) - reserve))
  limit=$((cap < left ? cap : left))
  echo
  echo "=== $name (limit ${limit} s, $(date +%T))"
  if ((limit < 10)); then
    printf '%s\tskipped: no time left\t0\n' "$name" >>"$raw/stages.tsv"
    status=1
    failed+=("$name")
    return 1
  fi
  t0=$(date +%s)
  timeout -k 10 "$limit" bash -c "set -uo pipefail; $fn"
  rc=$?
  what=ok
  if ((rc == 124 || rc == 137)); then what="timeout after ${limit} s"; elif ((rc != 0)); then what="failed rc=$rc"; fi
  printf '%s\t%s\t%s\n' "$name" "$what" "$(($(date +%s) - t0))" >>"$raw/stages.tsv"
  if ((rc != 0)); then
    status=1
    failed+=("$name")
    echo "=== stage $name FAILED ($what)"
  fi
  return "$rc"
}

wheels() {
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "no .whl/ in the tree (run bash bench/gpu/wheels.sh here and carry [\".whl\"])"
    return 1
  fi
  $py bench/gpu/install_wheels.py .whl /tmp/site
}

# free_gb DIR: whole gigabytes free on DIR's filesystem.
free_gb() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }

machine() {
  local missing=() tool
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || missing+=("nvidia-smi")
  for tool in nvcc ninja; do command -v "$tool" >/dev/null || missing+=("$tool (not on PATH)"); done
  # One import per line, so that each missing module is named (pytest & co. come from the carried wheels).
  local mod
  for mod in torch triton transformers deepspeed math_verify pydantic yaml tqdm pytest pytest_benchmark \
    hypothesis liger_kernel; do
    $py -c "import $mod" 2>/dev/null || missing+=("python module $mod")
  done
  $py -c "import torch, sys; sys.exit(not torch.cuda.is_available())" || missing+=("a CUDA device torch can use")
  $py -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__, 'transformers', transformers.__version__)"
  local free
  free=$(free_gb "${TMPDIR:-/tmp}")
  echo "free disk on ${TMPDIR:-/tmp}: ${free} GB (need ${min_free_gb})"
  ((free >= min_free_gb)) || missing+=("free disk: ${free} GB < ${min_free_gb} GB")
  if ((${#missing[@]})); then
    printf 'MISSING: %s\n' "${missing[@]}"
    return 1
  fi
  echo "preflight ok"
}

build() {
  # Without the editable install `lens_kernels` (kernels/lens_kernels/) is not importable: if the CUDA build fails,
  # install the pure-Python packages so that the Triton tests, benchmarks and training still run.
  if LENS_BUILD_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 $py -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps -e . >"$raw/build.log" 2>&1; then
    $py -c "import lens.ops as o; print('native devices:', o.native_devices())"
    return
  fi
  tail -30 "$raw/build.log"
  echo "CUDA build failed: installing without the native ops"
  LENS_BUILD_NATIVE=0 $py -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
    >>"$raw/build.log" 2>&1
  return 1
}

gpu_tests() {
  $py -m pytest -m gpu tests/kernels tests/csrc -q -rs -p no:cacheprovider --junitxml="$raw/gpu_tests.xml" 2>&1 \
    | tee "$raw/gpu_tests.log" | tail -25
  local rc=$?
  # Skipped GPU tests would pass silently: without a usable GPU every one of them skips.
  if grep -q "needs a CUDA GPU" "$raw/gpu_tests.log"; then
    echo "GPU tests were skipped for want of a GPU"
    return 1
  fi
  return "$rc"
}

floors() { $py bench/gpu/floors.py "$out"; }

benchmarks() {
  # harness.py appends to bench/results/results.jsonl when asked (LENS_BENCH_RESULTS): keep only this run's rows.
  export LENS_BENCH_RESULTS=bench/results
  local before
  before=$(wc -l <bench/results/results.jsonl 2>/dev/null || echo 0)
  $py -m pytest bench/bench_token_logprobs.py bench/bench_interference.py bench/bench_select.py bench/bench_ops.py \
    --benchmark-only -q -p no:cacheprovider --benchmark-json="$raw/benchmarks.json" 2>&1 | tee "$raw/bench.log" \
    | sed -n '/lens benchmark rows/,$p'
  local rc=$?
  tail -n +"$((before + 1))" bench/results/results.jsonl >"$out/results.jsonl"
  return "$rc"
}

peers() {
  # Last stage: torch.compile and Liger compile their kernels on first use (tens of seconds), so the peers
  # run on the time left after the training benchmark rather than taking it from it.
  local before
  before=$(wc -l <bench/results/results.jsonl 2>/dev/null || echo 0)
  $py -m pytest bench/bench_peers.py --benchmark-only -q -p no:cacheprovider \
    --benchmark-json="$raw/peers.json" 2>&1 | tee "$raw/peers.log" | sed -n '/lens benchmark rows/,$p'
  local rc=$?
  tail -n +"$((before + 1))" bench/results/results.jsonl >>"$out/results.jsonl"
  return "$rc"
}

packing() {
  local before
  before=$(wc -l <bench/results/results.jsonl 2>/dev/null || echo 0)
  PACKING_ROUNDS=1 $py -m pytest bench/bench_packing.py --benchmark-only -q -s -p no:cacheprovider 2>&1 | tee "$raw/packing.log" \
    | grep -E '^(#|\||[0-9]+ (passed|failed))'
  local rc=$?
  tail -n +"$((before + 1))" bench/results/results.jsonl >>"$out/results.jsonl"
  return "$rc"
}

model() {
  $py bench/gpu/make_model.py "$model_dir" && cp "$model_dir/make_model.json" "$raw/model.json"
}

train_step() {
  if ! $py -c "import importlib.util as u, sys; sys.exit(u.find_spec('lens.bench_step') is None)"; then
    echo "lens.bench_step is not in this tree"
    return 1
  fi
  # One process per algorithm: bench_step keeps every run's directory (with its final checkpoint: DeepSpeed
  # weights + optimizer state, ~20 GB at 1.5 B parameters) until it exits, so two in one process would hold
  # ~40 GB. Each process removes its own on exit; the free disk is checked before each run.
  local algo rc=0 free
  for algo in grpo lens; do
    free=$(free_gb "${TMPDIR:-/tmp}")
    if ((free < min_free_gb)); then
      echo "free disk ${free} GB < ${min_free_gb} GB before the $algo run"
      return 1
    fi
    $py -m lens.bench_step --config configs/gpu_bench.yaml --steps "$steps" --algorithms "$algo" \
      --out "$raw/step_$algo" "model.path=$model_dir" 2>&1 | tee "$raw/step_$algo.log" || rc=1
  done
  $py bench/gpu/merge_steps.py "$raw/step" "$raw"/step_grpo "$raw"/step_lens || rc=1
  cat "$raw/step/step_time.md" 2>/dev/null
  return "$rc"
}

main() {
  export -f free_gb wheels machine build gpu_tests floors benchmarks model train_step packing peers
  stage wheels 60 wheels
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  stage machine 60 machine
  stage build 240 build
  stage tests 150 gpu_tests
  stage floors 40 floors
  stage bench 150 benchmarks
  stage model 90 model
  stage step 300 train_step
  stage packing 120 packing
  stage peers 150 peers

  echo
  $py bench/gpu/summary.py "$out" || { status=1; failed+=("summary"); }
  cp "$raw"/step/step_time.json "$raw"/step/step_time.md "$out"/ 2>/dev/null
  tar -C "$out" -czf "$out/raw.tar.gz" raw && rm -rf "$raw"
  echo "=== done in $(($(date +%s) - start)) s (status $status); files in $out: $(ls "$out" | tr '\n' ' ')"
  if ((${#failed[@]})); then
    echo "FAILED stages: ${failed[*]}"
  fi
  return "$status"
}

mkdir -p "$out"
main 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
