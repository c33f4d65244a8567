#pragma once
// Weight matrix x activation block, the kernel that decides decode speed.
//
// y[c][r] = sum_k W[r][k] * x[c][k] for the n activation columns c (the tokens
// of one forward pass). Each weight row is streamed from memory once and
// decoded to floats in registers (32 values at a time), then multiplied by all
// columns while it is there: a forward of 8 tokens reads the weights once,
// like a forward of 1. Rows are split across the thread pool. Accumulation is
// float32 whatever the storage type.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "specdec/backends/cpu/quant_matmul.hpp"
#include "specdec/backends/cpu/simd.hpp"
#include "specdec/backends/cpu/thread_pool.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu {

// One product in a group sharing the same input block (e.g. Q, K and V).
struct MatmulTarget {
    const WeightMatrix* weight = nullptr;
    float* y = nullptr;          // column c of the output starts at y + c * y_stride
    std::size_t y_stride = 0;
    bool accumulate = false;     // y += W x (residual connections) instead of y = W x
};

namespace detail {

// Columns processed together per pass over a row tile (see matmul_tile_avx2).
inline constexpr std::size_t kColumnGroup = 4;

inline void matmul_rows_scalar(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                               std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride,
                               bool accumulate) {
    thread_local std::vector<float> row_values;
    row_values.resize(w.cols);
    for (std::size_t r = row_begin; r < row_end; ++r) {
        dequantize_row(w, r, row_values.data());
        for (std::size_t c = 0; c < columns; ++c) {
            const float* xc = x + c * x_stride;
            float sum = 0.0f;
            for (std::size_t k = 0; k < w.cols; ++k) sum += row_values[k] * xc[k];
            float& out = y[c * y_stride + r];
            out = accumulate ? out + sum : sum;
        }
    }
}

#if SPECDEC_HAS_X86_KERNELS

SPECDEC_AVX2_TARGET inline __m256 widen_i8(__m128i q8, __m256 d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}

// The F16 scale of quantised block b of a row, broadcast (unused for dense types).
template <WeightType T>
SPECDEC_AVX2_TARGET inline __m256 block_scale(const std::byte* row, std::size_t b) {
    if constexpr (is_block_quantized(T)) {
        constexpr std::size_t block_bytes = T == WeightType::q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
        Half d_bits;
        std::memcpy(&d_bits, row + b * block_bytes, 2);
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
        const std::byte* qs = row + b * sizeof(BlockQ8_0) + 2;
        return widen_i8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i)), d);
    } else {
        static_assert(T == WeightType::q4_0);
        // Values 0..15 are the low nibbles of bytes 0..15, values 16..31 the high nibbles.
        const std::byte* qs = row + b * sizeof(BlockQ4_0) + 2;
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * (i & 1)));
        if (i >= 2) bytes = _mm_srli_epi16(bytes, 4);
        const __m128i nibbles = _mm_sub_epi8(_mm_and_si128(bytes, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return widen_i8(nibbles, d);
    }
}

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

// A tile of R consecutive rows (from row_begin) x NC columns. Each 8-value
// slice of the R rows is decoded once and multiplied by every column, and
// each column slice is loaded once for all R rows; the R x NC accumulators,
// R weight and one column register stay in the 16 AVX registers.
template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET void matmul_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const float* x,
                                          std::size_t x_stride, float* y, std::size_t y_stride, bool accumulate) {
    const std::size_t chunks = w.cols / 32;
    const std::size_t row_bytes = w.row_bytes();
    const std::byte* rows[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) rows[r] = w.data + (row_begin + r) * row_bytes;
    __m256 acc[R][NC];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    // Software prefetch of the next tile (the R rows after these, contiguous
    // in memory), at the pace this tile is consumed: the hardware prefetcher
    // alone does not run far enough ahead once several columns make the loop
    // compute-heavy, and memory and compute then no longer overlap.
    constexpr std::size_t chunk_bytes = T == WeightType::f32 ? 128 : 64;  // 32 values (this kernel: dense types)
    const char* next_tile = reinterpret_cast<const char*>(rows[0]) + R * row_bytes;
    for (std::size_t b = 0; b < chunks; ++b) {
#pragma GCC unroll 8
        for (std::size_t line = 0; line < R * chunk_bytes / 64; ++line) {
            _mm_prefetch(next_tile + b * R * chunk_bytes + 64 * line, _MM_HINT_T0);
        }
        __m256 d[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) d[r] = block_scale<T>(rows[r], b);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            __m256 wv[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) wv[r] = load8<T>(rows[r], b, i, d[r]);
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                __m256 xv = _mm256_loadu_ps(x + c * x_stride + b * 32 + 8 * i);
                // Keep the column slice in a register: GCC otherwise folds the
                // load into every FMA, doubling the loads per FMA for R = 2.
                if constexpr (R > 1) asm("" : "+x"(xv));
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            float result = horizontal_sum(acc[r][c]);
            if constexpr (!is_block_quantized(T)) {
                for (std::size_t k = chunks * 32; k < w.cols; ++k) result += load_scalar<T>(rows[r], k) * x[c * x_stride + k];
            }
            float& out = y[c * y_stride + row_begin + r];
            out = accumulate ? out + result : result;
        }
    }
}

template <WeightType T, int R>
SPECDEC_AVX2_TARGET void matmul_row_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const float* x,
                                              std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride,
                                              bool accumulate) {
    // Column groups of 4 reuse the tile's rows while they are in L1.
    for (std::size_t c0 = 0, group = 0; c0 < columns; c0 += group) {
        // Groups of 4; a remainder of exactly 5 (a 4-token draft plus its bonus
        // position, the common verify) fits one pass of 10 accumulators.
        group = columns - c0 == 5 ? 5 : std::min(kColumnGroup, columns - c0);
        const float* xg = x + c0 * x_stride;
        float* yg = y + c0 * y_stride;
        switch (group) {
            case 1: matmul_tile_avx2<T, R, 1>(w, row_begin, xg, x_stride, yg, y_stride, accumulate); break;
            case 2: matmul_tile_avx2<T, R, 2>(w, row_begin, xg, x_stride, yg, y_stride, accumulate); break;
            case 3: matmul_tile_avx2<T, R, 3>(w, row_begin, xg, x_stride, yg, y_stride, accumulate); break;
            case 4: matmul_tile_avx2<T, R, 4>(w, row_begin, xg, x_stride, yg, y_stride, accumulate); break;
            default: matmul_tile_avx2<T, R, 5>(w, row_begin, xg, x_stride, yg, y_stride, accumulate); break;
        }
    }
}

template <WeightType T>
void matmul_rows_avx2_any(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                          std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    std::size_t r = row_begin;
    if (columns == 1) {
        // One column: four rows at once give four independent FMA chains.
        for (; r + 4 <= row_end; r += 4) matmul_tile_avx2<T, 4, 1>(w, r, x, x_stride, y, y_stride, accumulate);
    } else if (columns == 2) {
        // Row tiles chosen by measurement (whole 100m forwards on 2 Zen3
        // cores, variants interleaved in one process): 4 rows x 2 columns
        // makes a 2-token forward ~6-9% faster than 2 x 2, and 3 rows x 4
        // columns a 4-token forward ~13% faster than 2 x 4; for 3 columns
        // 2 x 3 beats 3 x 3. Every (row, column) sum is the same chain of
        // FMAs whatever the tile, so results do not depend on the choice.
        for (; r + 4 <= row_end; r += 4) matmul_tile_avx2<T, 4, 2>(w, r, x, x_stride, y, y_stride, accumulate);
    } else if (columns == 4) {
        for (; r + 3 <= row_end; r += 3) matmul_tile_avx2<T, 3, 4>(w, r, x, x_stride, y, y_stride, accumulate);
    } else {
        for (; r + 2 <= row_end; r += 2) matmul_row_tile_avx2<T, 2>(w, r, x, x_stride, columns, y, y_stride, accumulate);
    }
    for (; r < row_end; ++r) matmul_row_tile_avx2<T, 1>(w, r, x, x_stride, columns, y, y_stride, accumulate);
}
#endif  // SPECDEC_HAS_X86_KERNELS

inline void matmul_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                        std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
#if SPECDEC_HAS_X86_KERNELS
    if (avx2_available()) {
        switch (w.type) {
            case WeightType::f32: return matmul_rows_avx2_any<WeightType::f32>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
            case WeightType::f16: return matmul_rows_avx2_any<WeightType::f16>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
            case WeightType::bf16: return matmul_rows_avx2_any<WeightType::bf16>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
            case WeightType::q8_0: return matmul_rows_avx2_any<WeightType::q8_0>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
            case WeightType::q4_0: return matmul_rows_avx2_any<WeightType::q4_0>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
            default: break;  // the other block types decode through dequantize_row below
        }
    }
#endif
    matmul_rows_scalar(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
}

}  // namespace detail

// Computes every target's product with the same input block x (columns
// vectors of length weight->cols, column c at x + c * x_stride) in one parallel
// section. Input and outputs must not overlap. Block-quantised weights go through
// the integer kernels of quant_matmul.hpp (activations rounded to 8 bits, as
// llama.cpp does); the other types multiply float activations.
inline void matmul(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, std::size_t x_stride,
                   std::size_t columns) {
    if (columns == 0 || targets.empty()) return;
    // Row chunks: small enough to balance the threads, large enough that a
    // task amortises its scheduling and keeps the row stream sequential.
    std::size_t total_rows = 0;
    for (const auto& t : targets) total_rows += t.weight->rows;
    const std::size_t wanted_tasks = pool.size() * 16;
    const std::size_t chunk = std::max<std::size_t>(8, (total_rows + wanted_tasks - 1) / wanted_tasks);
    struct Task {
        const MatmulTarget* target;
        std::size_t row_begin, row_end;
    };
    thread_local std::vector<Task> tasks;
    tasks.clear();
    for (const auto& t : targets) {
        for (std::size_t r = 0; r < t.weight->rows; r += chunk) tasks.push_back({&t, r, std::min(t.weight->rows, r + chunk)});
    }
    // Block-quantised weights meet the activations quantised once to Q8 blocks.
    thread_local Q8Activations quantized;
    bool any_quantized = false;
    for (const auto& t : targets) any_quantized = any_quantized || is_block_quantized(t.weight->type);
    if (any_quantized) quantize_activations(x, x_stride, columns, targets.front().weight->cols, quantized);
    const Task* task_list = tasks.data();
    const Q8Activations* qx = &quantized;
    pool.parallel_for(tasks.size(), [&](std::size_t i) {
        const Task& task = task_list[i];
        const WeightMatrix& w = *task.target->weight;
        if (is_block_quantized(w.type)) {
            detail::quant_matmul_rows(w, task.row_begin, task.row_end, *qx, columns, task.target->y, task.target->y_stride,
                                      task.target->accumulate);
        } else {
            detail::matmul_rows(w, task.row_begin, task.row_end, x, x_stride, columns, task.target->y, task.target->y_stride,
                                task.target->accumulate);
        }
    });
}

inline void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, std::size_t x_stride, std::size_t columns,
                   float* y, std::size_t y_stride, bool accumulate = false) {
    const MatmulTarget target{&w, y, y_stride, accumulate};
    matmul(pool, std::span<const MatmulTarget>(&target, 1), x, x_stride, columns);
}

}  // namespace specdec::cpu
