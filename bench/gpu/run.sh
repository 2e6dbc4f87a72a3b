#!/usr/bin/env bash
# The one prepared GPU check of lens, for a single H200, in under 10 minutes (bench/gpu/README.md):
#   wheels     install the carried wheels (.whl/, from bench/gpu/wheels.sh) the image lacks
#   machine    nvidia-smi, versions, the imports lens needs
#   build      the extension with its CUDA part, against the machine's own torch
#   tests      every `gpu` test (Triton kernels and native ops against their torch references)
#   floors     copy bandwidth and bf16 matmul rate, measured in this run (bench/gpu/floors.py)
#   bench      kernel and op benchmarks at the paper's shapes, with their ratio to the floors
#   model      a random-init Qwen2.5-1.5B-shaped checkpoint (bench/gpu/make_model.py)
#   step       training step times, GRPO vs LENS (python -m lens.bench_step, configs/gpu_bench.yaml)
#   summary    one table (bench/gpu/summary.py), also OUT/summary.md
# Each stage runs under a timeout cut to the time left (LENS_GPU_BUDGET_S, default 540 s); a failed stage
# does not stop the later ones, it makes the exit status 1. Output: $OUT (the device tool's folder) or
# bench/results/gpu/: run.log, summary.md, floors.json, results.jsonl, step_time.json/.md and raw.tar.gz
# (logs, JUnit XML, pytest-benchmark JSON, bench_step's folder): 7 files, within the tool's 8.
#   bash bench/gpu/run.sh
#   LENS_GPU_STAGES="wheels build step" bash bench/gpu/run.sh      # a rerun of some stages only
# Other knobs: LENS_GPU_STEPS (3), LENS_GPU_MODEL_DIR (/tmp/lens_gpu_model), LENS_GPU_PYTHON (python3).
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
budget="${LENS_GPU_BUDGET_S:-540}"
selected=" ${LENS_GPU_STAGES-wheels machine build tests floors bench model step} "  # set but empty: none
reserve=25  # seconds kept for the summary and packing
start=$(date +%s)
status=0

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
    return 1
  fi
  t0=$(date +%s)
  timeout -k 10 "$limit" bash -c "set -uo pipefail; $fn"
  rc=$?
  what=ok
  if ((rc == 124 || rc == 137)); then what="timeout after ${limit} s"; elif ((rc != 0)); then what="failed rc=$rc"; fi
  printf '%s\t%s\t%s\n' "$name" "$what" "$(($(date +%s) - t0))" >>"$raw/stages.tsv"
  ((rc == 0)) || status=1
  return "$rc"
}

wheels() {
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "no .whl/ in the tree (run bash bench/gpu/wheels.sh here and carry [\".whl\"])"
    return 1
  fi
  $py bench/gpu/install_wheels.py .whl /tmp/site
}

machine() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__, 'transformers', transformers.__version__)"
  $py -c "import deepspeed, math_verify, pydantic, yaml, tqdm; print('deepspeed', deepspeed.__version__, \
'pydantic', pydantic.VERSION, 'imports ok')"
}

build() {
  # Without the editable install `lens_kernels` (kernels/) is not importable: if the CUDA build fails,
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
  $py -m pytest -m gpu tests/kernels tests/csrc -q -p no:cacheprovider --junitxml="$raw/gpu_tests.xml" 2>&1 \
    | tee "$raw/gpu_tests.log" | tail -25
}

floors() { $py bench/gpu/floors.py "$out"; }

benchmarks() {
  # harness.py appends to bench/results/results.jsonl: keep only the rows of this run.
  local before
  before=$(wc -l <bench/results/results.jsonl 2>/dev/null || echo 0)
  $py -m pytest bench/bench_token_logprobs.py bench/bench_interference.py bench/bench_select.py bench/bench_ops.py \
    --benchmark-only -q -p no:cacheprovider --benchmark-json="$raw/benchmarks.json" 2>&1 | tee "$raw/bench.log" \
    | sed -n '/lens benchmark rows/,$p'
  local rc=$?
  tail -n +"$((before + 1))" bench/results/results.jsonl >"$out/results.jsonl"
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
  $py -m lens.bench_step --config configs/gpu_bench.yaml --steps "$steps" --algorithms grpo,lens \
    --out "$raw/step" "model.path=$model_dir" 2>&1 | tee "$raw/step.log"
  local rc=$?
  cat "$raw/step/step_time.md" 2>/dev/null
  return "$rc"
}

main() {
  export -f wheels machine build gpu_tests floors benchmarks model train_step
  stage wheels 60 wheels
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  stage machine 60 machine
  stage build 240 build
  stage tests 150 gpu_tests
  stage floors 40 floors
  stage bench 150 benchmarks
  stage model 90 model
  stage step 300 train_step

  echo
  $py bench/gpu/summary.py "$out" || status=1
  cp "$raw"/step/step_time.json "$raw"/step/step_time.md "$out"/ 2>/dev/null
  tar -C "$out" -czf "$out/raw.tar.gz" raw && rm -rf "$raw"
  echo "=== done in $(($(date +%s) - start)) s (status $status); files in $out: $(ls "$out" | tr '\n' ' ')"
  return "$status"
}

mkdir -p "$out"
main 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
