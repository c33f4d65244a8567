#pragma once
// Decoding weights to floats with AVX2: 8 values of a row at a time for the
// matrix-vector tiles (load8), and whole rows for the blocked matrix product
// (dequantize_rows). Types without an AVX2 decoder here go through the scalar
// cpu::dequantize_row of weight_matrix.hpp, so a new storage type only needs
// that one function to work in every kernel that decodes whole rows.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "specdec/platform/x86.hpp"
#include "specdec/tensors/quant_blocks.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu::detail {

#if SPECDEC_X86

SPECDEC_AVX2_TARGET inline __m256 widen_i8(__m128i q8, __m256 d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}

// The F16 scale of quantised block b of a row, broadcast (unused for dense types).
template <WeightType T>
SPECDEC_AVX2_TARGET inline __m256 block_scale(const std::byte* row, std::size_t b) {
    if constexpr (is_block_quantized(T)) {
        Half d_bits;
        std::memcpy(&d_bits, row + b * weight_block_bytes(T), 2);
        return _mm256_set1_ps(_cvtsh_ss(d_bits));
    } else {
        return _mm256_setzero_ps();
    }
}

// Values [32 b + 8 i, 32 b + 8 i + 8) of a row as floats (i in 0..3); `d` is
// the block's scale from block_scale.
template <WeightType T>
SPECDEC_AVX2_TARGET inline __m256 load8(const std::byte* row, std::size_t b, int i, __m256 d) {
    if constexpr (T == WeightType::f32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + b * 32 + 8 * i);
    } else if constexpr (T == WeightType::f16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 64 + 16 * i)));
    } else if constexpr (T == WeightType::bf16) {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 64 + 16 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    } else if constexpr (T == WeightType::q8_0) {
        const std::byte* qs = row + b * weight_block_bytes(T) + 2;
        return widen_i8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i)), d);
    } else {
        static_assert(T == WeightType::q4_0);
        // Values 0..15 are the low nibbles of bytes 0..15, values 16..31 the high nibbles.
        const std::byte* qs = row + b * weight_block_bytes(T) + 2;
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * (i & 1)));
        if (i >= 2) bytes = _mm_srli_epi16(bytes, 4);
        const __m128i nibbles = _mm_sub_epi8(_mm_and_si128(bytes, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return widen_i8(nibbles, d);
    }
}

// Value k of a dense row (the tail beyond the last whole 32-value chunk).
template <WeightType T>
inline float load_scalar(const std::byte* row, std::size_t k) {
    if constexpr (T == WeightType::f32) {
        float v;
        std::memcpy(&v, row + 4 * k, 4);
        return v;
    } else {
        std::uint16_t bits;
        std::memcpy(&bits, row + 2 * k, 2);
        if constexpr (T == WeightType::f16) return half_to_float(bits);
        else return bf16_to_float(bits);
    }
}

template <WeightType T>
SPECDEC_AVX2_TARGET void dequantize_row_avx2(const WeightMatrix& w, std::size_t r, float* out) {
    const std::byte* row = w.row(r);
    const std::size_t chunks = w.cols / 32;
    for (std::size_t b = 0; b < chunks; ++b) {
        const __m256 d = block_scale<T>(row, b);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + b * 32 + 8 * i, load8<T>(row, b, i, d));
    }
    if constexpr (!is_block_quantized(T)) {
        for (std::size_t k = chunks * 32; k < w.cols; ++k) out[k] = load_scalar<T>(row, k);
    }
}

#endif  // SPECDEC_X86

// Rows [row_begin, row_begin + count) of w as floats, row i at out + i * out_stride.
inline void dequantize_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t count, float* out, std::size_t out_stride) {
#if SPECDEC_X86
    if (platform::avx2_available()) {
        void (*decode)(const WeightMatrix&, std::size_t, float*) = nullptr;
        switch (w.type) {
            case WeightType::f32: decode = dequantize_row_avx2<WeightType::f32>; break;
            case WeightType::f16: decode = dequantize_row_avx2<WeightType::f16>; break;
            case WeightType::bf16: decode = dequantize_row_avx2<WeightType::bf16>; break;
            case WeightType::q8_0: decode = dequantize_row_avx2<WeightType::q8_0>; break;
            case WeightType::q4_0: decode = dequantize_row_avx2<WeightType::q4_0>; break;
            default: break;
        }
        if (decode != nullptr) {
            for (std::size_t i = 0; i < count; ++i) decode(w, row_begin + i, out + i * out_stride);
            return;
        }
    }
#endif
    for (std::size_t i = 0; i < count; ++i) dequantize_row(w, row_begin + i, out + i * out_stride);
}

}  // namespace specdec::cpu::detail
