// Context of documentation fragments that use the CUDA backend (compiled as
// CUDA sources, only where specdec::cuda exists).
// snippet-needs: cuda
#include <cstdint>
#include <vector>

#include <specdec/cuda.cuh>
#include <specdec/specdec.hpp>

using specdec::Token;

extern std::vector<Token> prompt;
extern Token eos;
