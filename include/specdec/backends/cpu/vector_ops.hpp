#pragma once
// Short float vector primitives of the transformer (dot, axpy, RMSNorm,
// SwiGLU gate, RoPE rotation), with AVX2 versions chosen at run time.
#include <cmath>
#include <cstddef>

#include "specdec/backends/cpu/simd.hpp"

namespace specdec::cpu {

namespace detail {
#if SPECDEC_HAS_X86_KERNELS
SPECDEC_AVX2_TARGET inline float dot_avx2(const float* a, const float* b, std::size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = horizontal_sum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

SPECDEC_AVX2_TARGET inline void axpy_avx2(float alpha, const float* x, float* y, std::size_t n) {
    const __m256 a = _mm256_set1_ps(alpha);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif
}  // namespace detail

[[nodiscard]] inline float dot(const float* a, const float* b, std::size_t n) {
#if SPECDEC_HAS_X86_KERNELS
    if (avx2_available()) return detail::dot_avx2(a, b, n);
#endif
    float sum = 0.0f;
    for (std::size_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, std::size_t n) {
#if SPECDEC_HAS_X86_KERNELS
    if (avx2_available()) return detail::axpy_avx2(alpha, x, y, n);
#endif
    for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// out = x / sqrt(mean(x^2) + eps) * weight
inline void rms_norm(const float* x, const float* weight, std::size_t n, float eps, float* out) {
    const float mean_square = dot(x, x, n) / static_cast<float>(n);
    const float scale = 1.0f / std::sqrt(mean_square + eps);
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// gate = silu(gate) * up, the SwiGLU activation.
inline void swiglu(float* gate, const float* up, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

// Rotates the first 2 * pairs values of one head by the angles whose cosines
// and sines are given, pairing adjacent values (x[2i], x[2i+1]): llama.cpp's
// "normal" RoPE layout used by GGUF llama models.
inline void rope_rotate(float* head, const float* cosines, const float* sines, std::size_t pairs) {
    for (std::size_t i = 0; i < pairs; ++i) {
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * cosines[i] - b * sines[i];
        head[2 * i + 1] = a * sines[i] + b * cosines[i];
    }
}

}  // namespace specdec::cpu
