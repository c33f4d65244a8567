#!/usr/bin/env bash
# Installs what is missing, builds everything (the CUDA backend too when nvcc is
# found; its tests skip without a GPU) and runs the whole test suite, then the
# GGUF reader's tests and fuzzing again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${SPECDEC_JOBS:-2}"
./scripts/install-deps.sh

source scripts/cuda-arch.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"
cmake --build build -j"$jobs"
ctest --test-dir build --no-tests=error --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=ON -DSPECDEC_CUDA=OFF \
  -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF
cmake --build build-asan --target specdec_format_tests -j"$jobs"
ctest --test-dir build-asan -R '^formats:' --no-tests=error --output-on-failure -j"$jobs"
