#!/usr/bin/env bash
# Installs what is missing, builds everything (the CUDA backend too when nvcc is
# found; its tests skip without a GPU) and runs the whole test suite, then the
# GGUF reader's tests and fuzzing again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${SPECDEC_JOBS:-2}"
./scripts/install-deps.sh

cuda_args=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  # With a GPU, build for it; without one the CUDA code is only compiled
  # (for sm_90) so that the compile check stays quick. Override with
  # SPECDEC_CUDA_ARCHITECTURES.
  if nvidia-smi -L >/dev/null 2>&1; then arch=native; else arch=90; fi
  cuda_args=(-DCMAKE_CUDA_ARCHITECTURES="${SPECDEC_CUDA_ARCHITECTURES:-$arch}")
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"
cmake --build build -j"$jobs"
ctest --test-dir build --no-tests=error --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=ON -DSPECDEC_CUDA=OFF \
  -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF
cmake --build build-asan --target specdec_format_tests -j"$jobs"
ctest --test-dir build-asan -R '^formats:' --no-tests=error --output-on-failure -j"$jobs"
