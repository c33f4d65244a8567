# Sourced by test.sh and bench.sh: sets cuda_args for CMake. With a GPU,
# build the CUDA backend for it; without one it is only compiled (for sm_90),
# which keeps the compile check quick. SPECDEC_CUDA_ARCHITECTURES overrides.
cuda_args=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if nvidia-smi -L >/dev/null 2>&1; then arch=native; else arch=90; fi
  cuda_args=(-DCMAKE_CUDA_ARCHITECTURES="${SPECDEC_CUDA_ARCHITECTURES:-$arch}")
fi
