#!/usr/bin/env bash
# Installs what is missing, builds specdec-bench and runs it. With no
# arguments it compares speculative and autoregressive decoding on the
# embedded synthetic model pair; any arguments are passed to specdec-bench
# (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
source scripts/cuda-arch.sh
# build/ is also the test command's folder, which compiles the programs at -O1:
# the benchmark is rebuilt at the build type's full optimisation.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSPECDEC_PROGRAM_OPTIMIZATION= "${cuda_args[@]}" >/dev/null
cmake --build build --target specdec-bench -j"${SPECDEC_JOBS:-2}"
exec ./build/benchmarks/specdec-bench "$@"
