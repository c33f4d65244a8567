#pragma once
// y = x W^T for row-major weights W [out x in] and row-major activations
// x [n x in], through cuBLAS with fp32 accumulation. (Row-major W is
// column-major W^T, so this is the column-major product W^T(op T) * x^T.)
#include <cublas_v2.h>

#include "specdec/backends/cuda/check.cuh"
#include "specdec/backends/cuda/precision.cuh"

namespace specdec::cuda::detail {

// y [n x out] (fp32) = x [n x in] (T) * W^T, W [out x in] (T); accumulate adds to y (beta = 1),
// which fuses the residual connection into the output projections.
template <class T>
void gemm(cublasHandle_t handle, const T* weights, const T* x, float* y, int out_features, int in_features, int n,
          bool accumulate) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    constexpr cudaDataType_t type = ElementTraits<T>::cuda_type;
    SPECDEC_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, n, in_features, &alpha, weights,
                                      type, in_features, x, type, in_features, &beta, y, CUDA_R_32F, out_features,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace specdec::cuda::detail
