#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and runs
# each for a time budget, starting from the committed seeds in fuzz/corpus/.
#
#   scripts/fuzz.sh [seconds per target (default 60)] [target ...]
#
# Targets: gguf_model tokenizer acceptance (default: all three). Extra
# libFuzzer flags go in SPECDEC_FUZZ_FLAGS (e.g. "-runs=1000000"). Inputs the
# fuzzer finds new coverage with are kept in build-fuzz/corpus/<target>; a
# crash or sanitizer report is written to build-fuzz/findings/<target>/ and
# makes the script fail. Each run prints libFuzzer's final statistics
# (stat::number_of_executed_units is the execution count).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_model tokenizer acceptance)
jobs="${SPECDEC_JOBS:-2}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; libFuzzer needs clang (Debian: apt-get install clang libclang-rt-dev)" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 with line tables, as OSS-Fuzz builds its targets: sanitizer reports keep
# their lines and the build stays quick (the CI smoke builds all three).
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DSPECDEC_FUZZ=ON \
  -DSPECDEC_CUDA=OFF -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
  -DSPECDEC_BUILD_TOOLS=OFF \
  "${launcher[@]}" >/dev/null
# The build tree holds only the fuzz targets: building all of them lets make
# compile them in parallel (a list of --target goals is built one after another).
cmake --build build-fuzz -j"$jobs"

status=0
for target in "${targets[@]}"; do
  corpus="build-fuzz/corpus/$target"
  findings="build-fuzz/findings/$target"
  mkdir -p "$corpus" "$findings"
  echo "== fuzz $target for ${seconds}s"
  # shellcheck disable=SC2086  # SPECDEC_FUZZ_FLAGS is a list of flags
  if ! "build-fuzz/fuzz/specdec_fuzz_$target" "$corpus" "fuzz/corpus/$target" \
      -max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
      -artifact_prefix="$findings/" ${SPECDEC_FUZZ_FLAGS:-} 2>"build-fuzz/$target.log"; then
    status=1
    tail -n 40 "build-fuzz/$target.log" >&2
    echo "fuzz.sh: $target found a failure; the input is in $findings/" >&2
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "build-fuzz/$target.log" || true
done
exit $status
