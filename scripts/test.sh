#!/usr/bin/env bash
# Installs what is missing, builds llama.cpp from its pinned source package
# (for the llama.cpp adapter; SPECDEC_LLAMA_CPP=0 skips it), builds everything
# (the CUDA backend too when nvcc is found; without a GPU CTest reports its
# tests as skipped) and runs:
#   1. the whole test suite, its test binaries built with AddressSanitizer +
#      UndefinedBehaviorSanitizer (build/: every finding fails the test; the
#      examples, tools and benchmarks it also runs are plain Release builds);
#   2. the soaks, of generate() calls and of continuous batching (each 20k
#      generated tokens under the sanitizers, 100k in a plain build; on their
#      own: ./build/tests/specdec_model_tests "[soak]");
#   3. the model and thread-pool tests under ThreadSanitizer (build-tsan/),
#      but for the [slow] cases on the 100m model.
# The suite of stage 1 includes the fuzz targets replaying their committed
# corpora; SPECDEC_FUZZ_SECONDS=N also fuzzes each target for N seconds with
# libFuzzer at the end (scripts/fuzz.sh, clang, build-fuzz/).
# SPECDEC_SANITIZERS=0 builds the tests without sanitizers and runs stages 1
# and 2 only (quicker, and for compilers without the sanitizer runtimes).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${SPECDEC_JOBS:-2}"
sanitizers="${SPECDEC_SANITIZERS:-1}"
./scripts/install-deps.sh

stage() { printf '\n== test.sh: %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

source scripts/cuda-arch.sh
address=OFF
[ "$sanitizers" = 0 ] || address=address
# llama.cpp for the adapter and its tests, from its pinned source package
# (scripts/build-llama-cpp.sh, into build-llama/prefix; reused by later runs).
# SPECDEC_LLAMA_CPP=0 leaves it out: the adapter's tests then report skipped.
llama_args=(-DSPECDEC_LLAMA_CPP=OFF)
if [ "${SPECDEC_LLAMA_CPP:-1}" != 0 ]; then
  stage "llama.cpp from its pinned source package"
  ./scripts/build-llama-cpp.sh build-llama/prefix
  llama_args=(-DSPECDEC_LLAMA_CPP=ON -DCMAKE_PREFIX_PATH="$PWD/build-llama/prefix")
fi
stage "build (tests under sanitizers: $address)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSPECDEC_SANITIZE="$address" "${cuda_args[@]}" "${llama_args[@]}"
cmake --build build -j"$jobs"
stage "test suite"
ctest --test-dir build --no-tests=error --output-on-failure -j"$jobs"
# The soaks (tag [soak], hidden from CTest's list because they run for
# minutes): 100k tokens each in a plain build, where they also check that
# resident memory stays flat; 20k under the sanitizers, which run them
# several times slower.
stage "soak"
soak_tokens=100000
[ "$sanitizers" = 0 ] || soak_tokens=20000
SPECDEC_SOAK_TOKENS="${SPECDEC_SOAK_TOKENS:-$soak_tokens}" ./build/tests/specdec_model_tests "[soak]"
[ "$sanitizers" = 0 ] && exit 0

# Data races: the thread pool and everything that runs on it (the models).
# CUDA, benchmarks and examples are left out: this pass checks host threads.
stage "ThreadSanitizer: model and thread-pool tests"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=thread -DSPECDEC_CUDA=OFF \
  -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF
cmake --build build-tsan --target specdec_model_tests -j"$jobs"
# One process, the [slow] 100m-model cases left out (TSan runs them ~10x slower).
TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" ./build-tsan/tests/specdec_model_tests "~[slow]~[soak]"

fuzz_seconds="${SPECDEC_FUZZ_SECONDS:-0}"
if [ "$fuzz_seconds" != 0 ]; then
  stage "fuzzing, ${fuzz_seconds}s per target"
  ./scripts/fuzz.sh "$fuzz_seconds"
fi
stage "done"
