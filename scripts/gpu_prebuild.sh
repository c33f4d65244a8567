#!/usr/bin/env bash
# Prepares a GPU check on a machine that has nvcc but no GPU, so that the GPU
# machine's time goes to running, not compiling. Writes .gpu-carry/ (ignored by
# git), to be copied beside the checkout on the GPU machine:
#   bin/       specdec_cuda_tests, specdec-bench and initcheck_probe for sm_$SPECDEC_CUDA_ARCH
#              (default 90), with libstdc++ linked in statically so they start
#              on an image with an older C++ runtime (cudart and cuBLAS stay
#              shared: the GPU machine's toolkit provides them);
#   fixtures/  the stories260K GGUF fixtures, when ../shared/fixtures has them;
#   deps/      the Catch2 and nlohmann_json CMake packages, so that
#              benchmarks/gpu_check.sh can still build there when the binaries
#              do not start (a different glibc, say).
# Then, on the GPU machine:
#   SPECDEC_GPU_PREBUILT=.gpu-carry/bin SPECDEC_FIXTURES=.gpu-carry/fixtures \
#   SPECDEC_GPU_DEPS=.gpu-carry/deps benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${SPECDEC_BUILD_DIR:-build-gpu-prebuilt}
arch=${SPECDEC_CUDA_ARCH:-90}
carry=.gpu-carry

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_BENCHMARKS=ON -DSPECDEC_BUILD_EXAMPLES=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build "$build_dir" --target specdec_cuda_tests specdec-bench -j"${SPECDEC_JOBS:-2}"

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/fixtures" "$carry/deps/include" "$carry/deps/lib/cmake" "$carry/deps/share/cmake"
cp "$build_dir/tests/cuda/specdec_cuda_tests" "$build_dir/benchmarks/specdec-bench" "$carry/bin/"
nvcc -O2 -arch=sm_"$arch" benchmarks/initcheck_probe.cu -o "$carry/bin/initcheck_probe" -lcublas -Xcompiler -static-libstdc++
strip "$carry/bin/"*

fixtures=${SPECDEC_FIXTURES:-../shared/fixtures}
if ls "$fixtures"/stories260K*.gguf >/dev/null 2>&1; then
  cp "$fixtures"/stories260K* "$carry/fixtures/"
else
  echo "note: no stories260K fixtures in $fixtures; the GPU run's fixture tests will skip"
fi

# Both packages locate their files relative to their config file, so they
# work from any prefix.
cp -r /usr/include/catch2 /usr/include/nlohmann "$carry/deps/include/"
cp -r /usr/lib/cmake/Catch2 "$carry/deps/lib/cmake/"
cp /usr/lib/libCatch2WithMain.a "$carry/deps/lib/" 2>/dev/null || cp /usr/lib/*/libCatch2WithMain.a "$carry/deps/lib/"
cp -r /usr/share/cmake/nlohmann_json "$carry/deps/share/cmake/"

du -sh "$carry"
