// specdec-bench built by nvcc, with --backend cuda wired to specdec::cuda's
// CudaLlamaModel (the CMake build compiles this file instead of
// specdec_bench.cpp when the CUDA backend is enabled).
#ifndef SPECDEC_BENCH_WITH_CUDA
#define SPECDEC_BENCH_WITH_CUDA 1
#endif
#include "specdec_bench.cpp"
