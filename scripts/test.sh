#!/usr/bin/env bash
# Installs what is missing, builds everything (the CUDA backend too when nvcc is
# found; without a GPU CTest reports its tests as skipped) and runs the whole
# test suite and the soak test (100k generated tokens; on its own:
# ./build/tests/specdec_model_tests "[soak]"); then the GGUF reader and
# tokenizer tests again under AddressSanitizer + UBSan (build-asan/).
# SPECDEC_SANITIZERS=0 leaves the sanitizer pass out; SPECDEC_SANITIZERS=full
# runs the whole suite under ASan + UBSan, the thread pool and model tests under
# ThreadSanitizer (build-tsan/) and a fuzz smoke run of each target instead.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${SPECDEC_JOBS:-2}"
./scripts/install-deps.sh

source scripts/cuda-arch.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"
cmake --build build -j"$jobs"
ctest --test-dir build --no-tests=error --output-on-failure -j"$jobs"
# The soak (100k tokens; hidden from CTest's list because it runs for half a minute).
./build/tests/specdec_model_tests "[soak]"

# The GGUF reader and tokenizer tests (bytes from outside) under AddressSanitizer + UBSan.
sanitizer_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_CUDA=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF
  -DSPECDEC_BUILD_EXAMPLES=OFF)
if [ "${SPECDEC_SANITIZERS:-formats}" = 0 ]; then exit 0; fi
cmake -S . -B build-asan "${sanitizer_args[@]}" -DSPECDEC_SANITIZE=address
if [ "${SPECDEC_SANITIZERS:-formats}" != full ]; then
  cmake --build build-asan --target specdec_format_tests -j"$jobs"
  ctest --test-dir build-asan -R '^formats:' --no-tests=error --output-on-failure -j"$jobs"
  exit 0
fi

# SPECDEC_SANITIZERS=full: the whole suite under ASan + UBSan, the thread pool
# and the model tests under ThreadSanitizer, and a few seconds of each fuzz
# target when clang is present (scripts/fuzz.sh, build-fuzz/). The sanitizer
# builds leave CUDA, benchmarks and examples out: they check the host code.
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --no-tests=error --output-on-failure -j"$jobs"

cmake -S . -B build-tsan "${sanitizer_args[@]}" -DSPECDEC_SANITIZE=thread
cmake --build build-tsan --target specdec_model_tests -j"$jobs"
ctest --test-dir build-tsan -R '^models:' --no-tests=error --output-on-failure -j"$jobs"

if command -v clang++ >/dev/null; then
  ./scripts/fuzz.sh "${SPECDEC_FUZZ_SECONDS:-5}"
else
  echo "test.sh: clang++ not found, the fuzz smoke run is skipped"
fi
