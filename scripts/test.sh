#!/usr/bin/env bash
# The whole check, as CI runs it. Installs what is missing (and the pinned
# openai Python package for the server's client test), builds llama.cpp
# from its pinned source package (for the llama.cpp adapter; SPECDEC_LLAMA_CPP=0
# skips it), builds everything (the CUDA backend too when nvcc is found;
# without a GPU CTest reports its tests as skipped) and runs:
#   1. the whole test suite, its test binaries built with AddressSanitizer +
#      UndefinedBehaviorSanitizer (build/: every finding fails the test), but
#      for the core and text binaries' statistical and randomised exactness
#      cases ([exactness]: thousands of generations each through paths the
#      other cases walk under the sanitizers) and the 100m pair's statistics
#      ([slow] in the model binary), which run in uninstrumented -O3 copies; the examples, tools and benchmarks it also runs are plain
#      builds at -O1;
#   2. the soaks, of generate() calls and of continuous batching (20k
#      generated tokens each under the sanitizers, 100k in a plain build; on
#      their own: ./build/tests/specdec_model_tests "[soak]");
#   3. the model and thread-pool tests under ThreadSanitizer (build-tsan/),
#      but for the [slow] cases on the 100m model and the float64 reference
#      comparisons, the batched sweeps at fewer batch sizes.
# The suite of stage 1 includes the fuzz targets replaying their committed
# corpora; SPECDEC_FUZZ_SECONDS=N also fuzzes each target for N seconds with
# libFuzzer at the end (scripts/fuzz.sh, clang, build-fuzz/).
#
# SPECDEC_QUICK=1: a first green in a few minutes: a plain Release build of
# the library's tests only (in build-quick/, so that the full command's build/
# keeps its own configuration), without sanitizers, llama.cpp, CUDA, the
# examples and the documentation's snippets, the tools (specdec-generate,
# specdec-server) or specdec-bench and its tests, and the test suite only (no
# soak, no ThreadSanitizer). CI runs the full command.
# SPECDEC_SANITIZERS=0 builds the tests without sanitizers and runs stages 1
# and 2 only (for compilers without the sanitizer runtimes).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${SPECDEC_JOBS:-2}"
quick="${SPECDEC_QUICK:-0}"
sanitizers="${SPECDEC_SANITIZERS:-1}"
with_llama_cpp="${SPECDEC_LLAMA_CPP:-1}"
if [ "$quick" != 0 ]; then
  sanitizers=0
  with_llama_cpp="${SPECDEC_LLAMA_CPP:-0}"
fi
./scripts/install-deps.sh

started=$SECONDS
stage_name=""
stage_started=$SECONDS
stage_times=()
end_stage() {
  [ -z "$stage_name" ] || stage_times+=("$(printf '%5ds  %s' $((SECONDS - stage_started)) "$stage_name")")
}
stage() {
  end_stage
  stage_name="$1"
  stage_started=$SECONDS
  printf '\n== test.sh: %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"
}
summary() {
  local status=$?
  end_stage
  stage_name=""
  printf '\n== test.sh: %s after %ds\n' "$([ "$status" = 0 ] && echo passed || echo FAILED)" $((SECONDS - started))
  printf '%s\n' "${stage_times[@]}"
}
trap summary EXIT

build=build
[ "$quick" = 0 ] || build=build-quick
# Ninja schedules the two cores better than Make over targets of very
# different sizes; either works.
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# A build folder keeps its generator: reuse the one it was made with.
[ ! -f "$build/CMakeCache.txt" ] || generator=()

cuda_args=(-DSPECDEC_CUDA=OFF)
[ "$quick" != 0 ] || source scripts/cuda-arch.sh
# The examples, tools and specdec-bench are run once for their output, not
# timed: compiled at -O1 (cmake/programOptimization.cmake); scripts/bench.sh
# rebuilds specdec-bench at -O3.
programs=(-DSPECDEC_PROGRAM_OPTIMIZATION=-O1)
[ "$quick" = 0 ] || programs=(-DSPECDEC_BUILD_TOOLS=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF)
address=OFF
[ "$sanitizers" = 0 ] || address=address
# llama.cpp for the adapter and its tests, from its pinned source package
# (scripts/build-llama-cpp.sh, into build-llama/prefix; reused by later runs).
llama_args=(-DSPECDEC_LLAMA_CPP=OFF)
if [ "$with_llama_cpp" != 0 ]; then
  stage "llama.cpp from its pinned source package"
  ./scripts/build-llama-cpp.sh build-llama/prefix
  llama_args=(-DSPECDEC_LLAMA_CPP=ON -DCMAKE_PREFIX_PATH="$PWD/build-llama/prefix")
fi
# The official openai Python package (pinned, build/openai-venv), for the
# server's client test; without PyPI that test is reported as skipped.
if [ "$quick" = 0 ]; then
  stage "the openai Python package, pinned, for the server's client test"
  ./scripts/install-openai.sh build/openai-venv || echo "test.sh: could not install the openai package: its test will be skipped"
fi
stage "build (tests under sanitizers: $address)"
cmake "${generator[@]}" -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_SANITIZE="$address" \
  "${cuda_args[@]}" "${llama_args[@]}" "${programs[@]}"
cmake --build "$build" -j"$jobs"
stage "test suite"
ctest --test-dir "$build" --no-tests=error --output-on-failure -j"$jobs"
[ "$quick" = 0 ] || exit 0

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
tsan_generator=("${generator[@]}")
[ ! -f build-tsan/CMakeCache.txt ] || tsan_generator=()
cmake "${tsan_generator[@]}" -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=thread \
  -DSPECDEC_CUDA=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_BUILD_TOOLS=OFF
cmake --build build-tsan --target specdec_model_tests -j"$jobs"
# One process, the [slow] 100m-model cases left out (TSan runs them ~10x
# slower), and so are the float64 reference comparisons: they run the same
# passes on the same thread pool as the model cases that stay (the wide ones
# included), with the float64 reference's arithmetic on top. The batched
# greedy sweeps run at 1, 2 and 32 slots here (tests/models/batched_greedy_test.cpp).
TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" ./build-tsan/tests/specdec_model_tests "~[slow]~[soak]~[reference]"

fuzz_seconds="${SPECDEC_FUZZ_SECONDS:-0}"
if [ "$fuzz_seconds" != 0 ]; then
  stage "fuzzing, ${fuzz_seconds}s per target"
  ./scripts/fuzz.sh "$fuzz_seconds"
fi
