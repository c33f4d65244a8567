#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU (sized for one
# H200: well under 8 minutes in all):
#   1. configure and build the CUDA tests and specdec-bench for sm_90;
#   2. run every [cuda] test (logits vs the CPU model, exactness, decoding...);
#      a run where the tests found no device fails: nothing was verified;
#   3. benchmark autoregressive vs speculative decoding on the device with the
#      ~2.8B-parameter synthetic target and its 1-layer early-exit draft, at
#      temperatures 0 and 1, writing JSON (and SVG).
# Results go to $SPECDEC_GPU_CHECK_OUT (else $OUT, else build-gpu-check/results).
# Environment: SPECDEC_BUILD_DIR (default build-gpu-check), SPECDEC_JOBS,
# SPECDEC_CUDA_ARCH (default 90), SPECDEC_FIXTURES (the folder holding
# stories260K*.gguf; without it the fixture comparisons skip with a message).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${SPECDEC_BUILD_DIR:-build-gpu-check}
out_dir=${SPECDEC_GPU_CHECK_OUT:-${OUT:-$build_dir/results}}
jobs=${SPECDEC_JOBS:-$(nproc)}
arch=${SPECDEC_CUDA_ARCH:-90}
mkdir -p "$out_dir"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*"; }

log "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not available')"

log "configure + build (sm_$arch, $jobs jobs)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_BENCHMARKS=ON -DSPECDEC_BUILD_EXAMPLES=OFF >"$out_dir/configure.log"
cmake --build "$build_dir" --target specdec_cuda_tests specdec-bench -j"$jobs" >"$out_dir/build.log" 2>&1 ||
  { tail -50 "$out_dir/build.log"; exit 1; }

log "[cuda] tests"
status=0
"$build_dir/tests/cuda/specdec_cuda_tests" "[cuda]" --durations yes 2>&1 | tee "$out_dir/cuda_tests.log" || status=$?
if grep -q "skipped: no CUDA device" "$out_dir/cuda_tests.log"; then
  log "FAILED: the tests found no CUDA device, so nothing was verified"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  log "FAILED: [cuda] tests (exit status $status); see $out_dir/cuda_tests.log"
  exit "$status"
fi

log "benchmark: synthetic 3b target + early-exit draft on CUDA"
"$build_dir/benchmarks/specdec-bench" --backend cuda --synthetic-size 3b \
  --draft-tokens 1,2,3,4,6,8 --temperatures 0,1 --new-tokens 128 --repetitions 2 --quiet \
  --json "$out_dir/bench_cuda_3b.json" --svg "$out_dir/bench_cuda_3b.svg" | tee "$out_dir/bench_cuda_3b.txt"

log "done: results in $out_dir"
