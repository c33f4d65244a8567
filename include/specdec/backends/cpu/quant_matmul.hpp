#pragma once
// Q8_0 / Q4_0 weights times activations through integer dot products, the
// scheme of llama.cpp: each activation column is quantised once per product
// to 8-bit blocks of 32 (scale = max|x| / 127), then every weight block meets
// every activation block as a 32-term int8 dot product scaled by d_w * d_x.
// Decoding 4-bit weights to floats would make the draft compute-bound; this
// keeps a Q4_0 model close to memory speed. Both the AVX2 and the scalar
// kernels compute the same integer sums, so they agree to float rounding.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/tensors/quant_blocks.hpp"
#include "specdec/backends/cpu/simd.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu {

// `columns` activation vectors of `cols` values (cols a multiple of 32), quantised per block.
struct Q8Activations {
    std::vector<std::int8_t> values;  // column c, block b at (c * blocks + b) * 32
    std::vector<float> scales;        // column c, block b at c * blocks + b
    // 8 * the sums of each 4 consecutive values, 8 per block (column c, block b
    // at (c * blocks + b) * 8): what a dot product with the unsigned Q4_0
    // nibbles (q + 8) must subtract, lane by lane, to become the signed one.
    std::vector<std::int32_t> offset_sums;
    std::size_t blocks = 0;

    [[nodiscard]] const std::int8_t* block(std::size_t c, std::size_t b) const { return &values[(c * blocks + b) * kQuantBlock]; }
    [[nodiscard]] float scale(std::size_t c, std::size_t b) const { return scales[c * blocks + b]; }
};

inline void quantize_activations(const float* x, std::size_t x_stride, std::size_t columns, std::size_t cols, Q8Activations& out) {
    out.blocks = cols / kQuantBlock;
    out.values.resize(columns * cols);
    out.scales.resize(columns * out.blocks);
    out.offset_sums.resize(columns * out.blocks * 8);
    for (std::size_t c = 0; c < columns; ++c) {
        for (std::size_t b = 0; b < out.blocks; ++b) {
            const float* v = x + c * x_stride + b * kQuantBlock;
            float amax = 0.0f;
            for (std::size_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
            const float d = amax / 127.0f;
            const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
            std::int8_t* q = &out.values[(c * out.blocks + b) * kQuantBlock];
            for (std::size_t i = 0; i < kQuantBlock; ++i) q[i] = static_cast<std::int8_t>(std::nearbyint(v[i] * inverse));
            out.scales[c * out.blocks + b] = d;
            std::int32_t* sums = &out.offset_sums[(c * out.blocks + b) * 8];
            for (std::size_t lane = 0; lane < 8; ++lane) sums[lane] = 8 * (q[4 * lane] + q[4 * lane + 1] + q[4 * lane + 2] + q[4 * lane + 3]);
        }
    }
}

namespace detail {

template <WeightType T>
constexpr std::size_t quant_block_bytes() {
    return T == WeightType::q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
}

inline float block_weight_scale(const std::byte* block) {
    Half d;
    std::memcpy(&d, block, 2);
    return half_to_float(d);
}

// The 32 signed values of one weight block.
template <WeightType T>
inline void block_weight_values(const std::byte* block, std::int8_t* out) {
    if constexpr (T == WeightType::q8_0) {
        std::memcpy(out, block + 2, kQuantBlock);
    } else {
        const auto* qs = reinterpret_cast<const std::uint8_t*>(block + 2);
        for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
            out[j] = static_cast<std::int8_t>((qs[j] & 0x0F) - 8);
            out[j + kQuantBlock / 2] = static_cast<std::int8_t>((qs[j] >> 4) - 8);
        }
    }
}

template <WeightType T>
void quant_matmul_rows_scalar(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const Q8Activations& qx,
                              std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    const std::size_t row_bytes = w.row_bytes();
    std::int8_t values[kQuantBlock];
    thread_local std::vector<float> sums;
    sums.assign(columns, 0.0f);
    for (std::size_t r = row_begin; r < row_end; ++r) {
        std::fill(sums.begin(), sums.end(), 0.0f);
        const std::byte* row = w.data + r * row_bytes;
        for (std::size_t b = 0; b < qx.blocks; ++b) {
            const std::byte* block = row + b * quant_block_bytes<T>();
            block_weight_values<T>(block, values);
            const float dw = block_weight_scale(block);
            for (std::size_t c = 0; c < columns; ++c) {
                const std::int8_t* xq = qx.block(c, b);
                std::int32_t dot = 0;
                for (std::size_t i = 0; i < kQuantBlock; ++i) dot += static_cast<std::int32_t>(values[i]) * xq[i];
                sums[c] += static_cast<float>(dot) * (dw * qx.scale(c, b));
            }
        }
        for (std::size_t c = 0; c < columns; ++c) {
            float& out = y[c * y_stride + r];
            out = accumulate ? out + sums[c] : sums[c];
        }
    }
}

#if SPECDEC_HAS_X86_KERNELS

template <WeightType T>
SPECDEC_AVX2_TARGET inline __m256i load_weight_block(const std::byte* block) {
    if constexpr (T == WeightType::q8_0) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    } else {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        const __m256i nibbles = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);  // high half: values 16..31
        return _mm256_sub_epi8(_mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
    }
}

// R rows x NC columns; per block: |w| once per row, then for each column the
// int8 products (sign moved onto x so maddubs sees an unsigned operand).
// Column c's block b is at x_values + (c * blocks + b) * 32 with scale x_scales[c * blocks + b].
template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET void quant_matmul_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const std::int8_t* x_values,
                                                const float* x_scales, const std::int32_t* x_offset_sums, std::size_t blocks,
                                                float* y, std::size_t y_stride, bool accumulate) {
    const std::size_t row_bytes = w.row_bytes();
    const __m256i ones = _mm256_set1_epi16(1);
    const std::byte* rows[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) rows[r] = w.data + (row_begin + r) * row_bytes;
    __m256 acc[R][NC];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    // Prefetch the next tile at the pace this one is consumed (see matmul_tile_avx2).
    const char* next_tile = reinterpret_cast<const char*>(rows[0]) + R * row_bytes;
    constexpr std::size_t tile_block_bytes = R * quant_block_bytes<T>();
    for (std::size_t b = 0; b < blocks; ++b) {
        // A constant number of prefetches per block (a loop of variable
        // length here made GCC keep the accumulators on the stack).
#pragma GCC unroll 4
        for (std::size_t line = 0; line < (tile_block_bytes + 63) / 64; ++line) {
            _mm_prefetch(next_tile + b * tile_block_bytes + 64 * line, _MM_HINT_T0);
        }
        // Q8_0: |w| and sign moved onto x (maddubs needs one unsigned operand).
        // Q4_0: the nibbles q + 8 are already unsigned; the +8 is taken back
        // per column with the precomputed offset sums.
        __m256i wq[R], wunsigned[R];
        __m256 dw[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const std::byte* block = rows[r] + b * quant_block_bytes<T>();
            if constexpr (T == WeightType::q8_0) {
                wq[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
                wunsigned[r] = _mm256_sign_epi8(wq[r], wq[r]);
            } else {
                const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
                wunsigned[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
            }
            Half d_bits;
            std::memcpy(&d_bits, block, 2);
            dw[r] = _mm256_set1_ps(_cvtsh_ss(d_bits));
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
            const std::size_t cb = c * blocks + b;
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_values + cb * kQuantBlock));
            const __m256 dx = _mm256_broadcast_ss(x_scales + cb);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                __m256i dot32;
                if constexpr (T == WeightType::q8_0) {
                    dot32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wunsigned[r], _mm256_sign_epi8(xq, wq[r])), ones);
                } else {
                    const __m256i offsets = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_offset_sums + cb * 8));
                    dot32 = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wunsigned[r], xq), ones), offsets);
                }
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32), _mm256_mul_ps(dw[r], dx), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            const float result = horizontal_sum(acc[r][c]);
            float& out = y[c * y_stride + row_begin + r];
            out = accumulate ? out + result : result;
        }
    }
}

template <WeightType T, int R>
SPECDEC_AVX2_TARGET void quant_matmul_row_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const Q8Activations& qx,
                                                    std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    const std::size_t blocks = qx.blocks;
    for (std::size_t c0 = 0; c0 < columns; c0 += 4) {
        const std::int8_t* xv = qx.values.data() + c0 * blocks * kQuantBlock;
        const float* xs = qx.scales.data() + c0 * blocks;
        const std::int32_t* xo = qx.offset_sums.data() + c0 * blocks * 8;
        float* yg = y + c0 * y_stride;
        switch (std::min<std::size_t>(4, columns - c0)) {
            case 1: quant_matmul_tile_avx2<T, R, 1>(w, row_begin, xv, xs, xo, blocks, yg, y_stride, accumulate); break;
            case 2: quant_matmul_tile_avx2<T, R, 2>(w, row_begin, xv, xs, xo, blocks, yg, y_stride, accumulate); break;
            case 3: quant_matmul_tile_avx2<T, R, 3>(w, row_begin, xv, xs, xo, blocks, yg, y_stride, accumulate); break;
            default: quant_matmul_tile_avx2<T, R, 4>(w, row_begin, xv, xs, xo, blocks, yg, y_stride, accumulate); break;
        }
    }
}

template <WeightType T>
void quant_matmul_rows_avx2(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const Q8Activations& qx,
                            std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    std::size_t r = row_begin;
    const std::size_t step = columns == 1 ? 4 : 2;  // one column: four rows give four independent FMA chains
    if (step == 4) {
        for (; r + 4 <= row_end; r += 4) quant_matmul_row_tile_avx2<T, 4>(w, r, qx, columns, y, y_stride, accumulate);
    } else {
        for (; r + 2 <= row_end; r += 2) quant_matmul_row_tile_avx2<T, 2>(w, r, qx, columns, y, y_stride, accumulate);
    }
    for (; r < row_end; ++r) quant_matmul_row_tile_avx2<T, 1>(w, r, qx, columns, y, y_stride, accumulate);
}
#endif

// Rows [row_begin, row_end) of a Q8_0 / Q4_0 matrix times the quantised columns.
inline void quant_matmul_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const Q8Activations& qx,
                              std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
#if SPECDEC_HAS_X86_KERNELS
    if (avx2_available()) {
        if (w.type == WeightType::q8_0) return quant_matmul_rows_avx2<WeightType::q8_0>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
        return quant_matmul_rows_avx2<WeightType::q4_0>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
    }
#endif
    if (w.type == WeightType::q8_0) return quant_matmul_rows_scalar<WeightType::q8_0>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
    quant_matmul_rows_scalar<WeightType::q4_0>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
}

}  // namespace detail
}  // namespace specdec::cpu
