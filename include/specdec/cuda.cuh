#pragma once
// The CUDA backend in one include (compile with nvcc, link specdec::cuda).
// A program that may run without a GPU checks specdec::cuda::available() first;
// every entry point throws specdec::Error ("no CUDA device: ...") otherwise.
#include "specdec/backends/cuda/acceptance.cuh"
#include "specdec/backends/cuda/device.hpp"
#include "specdec/models/llama_weights.cuh"
#include "specdec/models/llama_model.cuh"
#include "specdec/models/synthetic_pair.cuh"
