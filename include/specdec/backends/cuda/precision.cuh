#pragma once
// The storage type of weights and GEMM inputs on the device. Activations that
// feed a GEMM are stored in the same type as the weights (cuBLAS needs A and B
// alike); the residual stream, the KV cache, logits and every reduction stay
// in fp32. f32 is the reference mode (logits agree with the CPU model to
// ~1e-4); f16 and bf16 halve the bytes streamed per token.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstddef>

#include "specdec/core/error.hpp"

namespace specdec::cuda {

enum class Precision { f32, f16, bf16 };

[[nodiscard]] inline const char* precision_name(Precision precision) noexcept {
    switch (precision) {
        case Precision::f32: return "f32";
        case Precision::f16: return "f16";
        case Precision::bf16: return "bf16";
    }
    return "unknown";
}

[[nodiscard]] inline std::size_t precision_bytes(Precision precision) noexcept {
    return precision == Precision::f32 ? 4 : 2;
}

namespace detail {

template <class T>
struct ElementTraits;
template <>
struct ElementTraits<float> {
    static constexpr cudaDataType_t cuda_type = CUDA_R_32F;
    __host__ __device__ static float to_float(float v) { return v; }
    __host__ __device__ static float from_float(float v) { return v; }
};
template <>
struct ElementTraits<__half> {
    static constexpr cudaDataType_t cuda_type = CUDA_R_16F;
    __device__ static float to_float(__half v) { return __half2float(v); }
    __device__ static __half from_float(float v) { return __float2half_rn(v); }
};
template <>
struct ElementTraits<__nv_bfloat16> {
    static constexpr cudaDataType_t cuda_type = CUDA_R_16BF;
    __device__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
    __device__ static __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

template <class T>
__device__ inline float to_float(T v) {
    return ElementTraits<T>::to_float(v);
}
template <class T>
__device__ inline T from_float(float v) {
    return ElementTraits<T>::from_float(v);
}

// Calls fn.template operator()<T>() with the element type of `precision`:
// the one place where the run-time choice becomes a template argument.
template <class Fn>
decltype(auto) dispatch_precision(Precision precision, Fn&& fn) {
    switch (precision) {
        case Precision::f32: return fn.template operator()<float>();
        case Precision::f16: return fn.template operator()<__half>();
        case Precision::bf16: return fn.template operator()<__nv_bfloat16>();
    }
    throw Error("cuda backend: unknown precision");
}

}  // namespace detail
}  // namespace specdec::cuda
