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

#include "specdec/backends/cpu/simd.hpp"
#include "specdec/backends/cpu/thread_pool.hpp"
#include "specdec/backends/cpu/weight_matrix.hpp"

namespace specdec::cpu {

// One product in a group sharing the same input block (e.g. Q, K and V).
struct MatmulTarget {
    const WeightMatrix* weight = nullptr;
    float* y = nullptr;          // column c of the output starts at y + c * y_stride
    std::size_t y_stride = 0;
    bool accumulate = false;     // y += W x (residual connections) instead of y = W x
};

namespace detail {

// Columns processed together per pass over a row range: the accumulators of
// 8 columns plus one decoded 32-value weight chunk fit the 16 AVX registers.
inline constexpr std::size_t kColumnGroup = 8;

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

// 32 decoded weights in four registers. Returned by value, written out by
// hand: GCC keeps such a struct in registers, whereas a loop filling an array
// parameter was compiled to stores and reloads through the stack.
struct Chunk32 {
    __m256 v0, v1, v2, v3;
};

SPECDEC_AVX2_TARGET inline __m256 widen_q8(const std::byte* p, __m256 d) {
    const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}

SPECDEC_AVX2_TARGET inline __m256 widen_i8(__m128i q8, __m256 d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}

SPECDEC_AVX2_TARGET inline __m256 load_f16x8(const std::byte* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

SPECDEC_AVX2_TARGET inline __m256 load_bf16x8(const std::byte* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

SPECDEC_AVX2_TARGET inline __m256 block_scale(const std::byte* block) {
    Half d_bits;
    std::memcpy(&d_bits, block, 2);
    return _mm256_set1_ps(_cvtsh_ss(d_bits));
}

// Decodes values [32 b, 32 b + 32) of a row.
template <WeightType T>
SPECDEC_AVX2_TARGET inline Chunk32 load_chunk(const std::byte* row, std::size_t b) {
    if constexpr (T == WeightType::f32) {
        const float* p = reinterpret_cast<const float*>(row) + b * 32;
        return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)};
    } else if constexpr (T == WeightType::f16) {
        const std::byte* p = row + b * 64;
        return {load_f16x8(p), load_f16x8(p + 16), load_f16x8(p + 32), load_f16x8(p + 48)};
    } else if constexpr (T == WeightType::bf16) {
        const std::byte* p = row + b * 64;
        return {load_bf16x8(p), load_bf16x8(p + 16), load_bf16x8(p + 32), load_bf16x8(p + 48)};
    } else if constexpr (T == WeightType::q8_0) {
        const std::byte* block = row + b * sizeof(BlockQ8_0);
        const __m256 d = block_scale(block);
        const std::byte* qs = block + 2;
        return {widen_q8(qs, d), widen_q8(qs + 8, d), widen_q8(qs + 16, d), widen_q8(qs + 24, d)};
    } else {
        static_assert(T == WeightType::q4_0);
        const std::byte* block = row + b * sizeof(BlockQ4_0);
        const __m256 d = block_scale(block);
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        const __m128i low = _mm_sub_epi8(_mm_and_si128(packed, mask), eight);                      // values 0..15
        const __m128i high = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), mask), eight);  // values 16..31
        return {widen_i8(low, d), widen_i8(_mm_srli_si128(low, 8), d), widen_i8(high, d), widen_i8(_mm_srli_si128(high, 8), d)};
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

// NC columns against rows [row_begin, row_end). For few columns each column
// gets several accumulators so the FMA latency chain does not bound decode.
template <WeightType T, int NC>
SPECDEC_AVX2_TARGET void matmul_rows_avx2(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end,
                                          const float* x, std::size_t x_stride, float* y, std::size_t y_stride,
                                          bool accumulate) {
    constexpr int A = NC >= 4 ? 1 : (NC >= 2 ? 2 : 4);
    const std::size_t chunks = w.cols / 32;
    const std::size_t row_bytes = w.row_bytes();
    for (std::size_t r = row_begin; r < row_end; ++r) {
        const std::byte* row = w.data + r * row_bytes;
        __m256 sum[NC][A];
        for (int c = 0; c < NC; ++c)
            for (int a = 0; a < A; ++a) sum[c][a] = _mm256_setzero_ps();
        for (std::size_t b = 0; b < chunks; ++b) {
            const Chunk32 w32 = load_chunk<T>(row, b);
            const float* xb = x + b * 32;
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) {
                const float* xc = xb + c * x_stride;
                sum[c][0 % A] = _mm256_fmadd_ps(w32.v0, _mm256_loadu_ps(xc), sum[c][0 % A]);
                sum[c][1 % A] = _mm256_fmadd_ps(w32.v1, _mm256_loadu_ps(xc + 8), sum[c][1 % A]);
                sum[c][2 % A] = _mm256_fmadd_ps(w32.v2, _mm256_loadu_ps(xc + 16), sum[c][2 % A]);
                sum[c][3 % A] = _mm256_fmadd_ps(w32.v3, _mm256_loadu_ps(xc + 24), sum[c][3 % A]);
            }
        }
        for (int c = 0; c < NC; ++c) {
            __m256 total = sum[c][0];
            for (int a = 1; a < A; ++a) total = _mm256_add_ps(total, sum[c][a]);
            float result = horizontal_sum(total);
            if constexpr (!is_block_quantized(T)) {
                for (std::size_t k = chunks * 32; k < w.cols; ++k) result += load_scalar<T>(row, k) * x[c * x_stride + k];
            }
            float& out = y[c * y_stride + r];
            out = accumulate ? out + result : result;
        }
    }
}

template <WeightType T>
void matmul_rows_avx2_any(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                          std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    for (std::size_t c0 = 0; c0 < columns; c0 += kColumnGroup) {
        const std::size_t group = std::min(kColumnGroup, columns - c0);
        const float* xg = x + c0 * x_stride;
        float* yg = y + c0 * y_stride;
        switch (group) {
#define SPECDEC_MATMUL_CASE(N) \
    case N: matmul_rows_avx2<T, N>(w, row_begin, row_end, xg, x_stride, yg, y_stride, accumulate); break;
            SPECDEC_MATMUL_CASE(1)
            SPECDEC_MATMUL_CASE(2)
            SPECDEC_MATMUL_CASE(3)
            SPECDEC_MATMUL_CASE(4)
            SPECDEC_MATMUL_CASE(5)
            SPECDEC_MATMUL_CASE(6)
            SPECDEC_MATMUL_CASE(7)
            SPECDEC_MATMUL_CASE(8)
#undef SPECDEC_MATMUL_CASE
            default: break;
        }
    }
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
        }
    }
#endif
    matmul_rows_scalar(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
}

}  // namespace detail

// Computes every target's product with the same input block x (columns
// vectors of length weight->cols, column c at x + c * x_stride) in one parallel
// section. Input and outputs must not overlap.
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
    const Task* task_list = tasks.data();
    pool.parallel_for(tasks.size(), [&](std::size_t i) {
        const Task& task = task_list[i];
        detail::matmul_rows(*task.target->weight, task.row_begin, task.row_end, x, x_stride, columns, task.target->y,
                            task.target->y_stride, task.target->accumulate);
    });
}

inline void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, std::size_t x_stride, std::size_t columns,
                   float* y, std::size_t y_stride, bool accumulate = false) {
    const MatmulTarget target{&w, y, y_stride, accumulate};
    matmul(pool, std::span<const MatmulTarget>(&target, 1), x, x_stride, columns);
}

}  // namespace specdec::cpu
