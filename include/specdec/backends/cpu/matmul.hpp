#pragma once
// Weight matrix x activation block, the kernel that decides decode speed.
//
// y[c][r] = sum_k W[r][k] * x[c][k] for the n activation columns c (the tokens
// of one forward pass). For narrow passes (decoding, short verifications) each
// weight row is streamed from memory once and decoded to floats in registers
// (32 values at a time), then multiplied by all columns while it is there: a
// forward of 8 tokens reads the weights once, like a forward of 1. Wide passes
// (prefill) are compute-bound instead, and there re-decoding every weight per
// group of columns would dominate: they decode each row once and run a blocked
// matrix product (gemm.hpp). Rows are split across the thread pool. On CPUs
// with AVX-512 the tiles are the same 256-bit code with 32 registers, which
// allows larger tiles; every path computes each (row, column) sum as the same
// chain of operations, so results are bitwise the same on every path.
// Accumulation is float32 whatever the storage type.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/backends/cpu/dequantize.hpp"
#include "specdec/backends/cpu/gemm.hpp"
#include "specdec/backends/cpu/quant_matmul.hpp"
#include "specdec/platform/x86.hpp"
#include "specdec/backends/cpu/thread_pool.hpp"
#include "specdec/backends/cpu/weight_prefetch.hpp"
#include "specdec/core/error.hpp"
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

// Calls f.template operator()<T>() with the dense storage type T of `type`
// (F32, F16 or BF16) and returns true; false for any other type.
template <class F>
bool dispatch_dense(WeightType type, F&& f) {
    switch (type) {
        case WeightType::f32: f.template operator()<WeightType::f32>(); return true;
        case WeightType::f16: f.template operator()<WeightType::f16>(); return true;
        case WeightType::bf16: f.template operator()<WeightType::bf16>(); return true;
        default: return false;
    }
}

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

#if SPECDEC_X86

// A tile of R consecutive rows (from row_begin) x NC columns of a dense
// matrix. Each 8-value slice of the R rows is decoded once and multiplied by
// every column, and each column slice is loaded once for all R rows; the
// R x NC accumulators, R weight and one column register stay in the vector
// registers: 16 with AVX2 (matmul_tile_avx2), 32 where the same code is
// compiled EVEX-encoded (matmul_tile_evex). Inlined into both.
template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET __attribute__((always_inline)) inline void matmul_tile_body(
    const WeightMatrix& w, std::size_t row_begin, const float* x, std::size_t x_stride, float* y, std::size_t y_stride,
    bool accumulate) {
    static_assert(!is_block_quantized(T), "block-quantised weights go through quant_matmul_rows");
    const std::size_t chunks = w.cols / 32;
    const std::size_t row_bytes = w.row_bytes();
    const std::byte* rows[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) rows[r] = w.data + (row_begin + r) * row_bytes;
    __m256 acc[R][NC];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    // The tiles after this one, prefetched at the pace this one is read
    // (weight_prefetch.hpp): the hardware prefetcher alone does not run far
    // enough ahead once several columns make the loop compute-heavy.
    constexpr std::size_t chunk_bytes = T == WeightType::f32 ? 128 : 64;  // 32 values
    const char* next_tile = reinterpret_cast<const char*>(rows[0]) + R * row_bytes;
    const __m256 unused_scale = _mm256_setzero_ps();
    for (std::size_t b = 0; b < chunks; ++b) {
        prefetch_weight_lines<R * chunk_bytes / 64>(next_tile, R * row_bytes, b * R * chunk_bytes);
#pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            __m256 wv[R];
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) wv[r] = load8<T>(rows[r], b, i, unused_scale);
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) {
                __m256 xv = _mm256_loadu_ps(x + c * x_stride + b * 32 + 8 * i);
                // Keep the column slice in a register: GCC otherwise folds the
                // load into every FMA, doubling the loads per FMA for R = 2.
                if constexpr (R > 1) asm("" : "+x"(xv));
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            float result = platform::horizontal_sum(acc[r][c]);
            // An explicit fused multiply-add: with AVX-512 enabled GCC vectorises
            // `result += w * x` as vector products then in-order adds, which
            // rounds twice and would make the two tile builds differ.
            for (std::size_t k = chunks * 32; k < w.cols; ++k)
                result = std::fma(load_scalar<T>(rows[r], k), x[c * x_stride + k], result);
            float& out = y[c * y_stride + row_begin + r];
            out = accumulate ? out + result : result;
        }
    }
}

template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET void matmul_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const float* x,
                                          std::size_t x_stride, float* y, std::size_t y_stride, bool accumulate) {
    matmul_tile_body<T, R, NC>(w, row_begin, x, x_stride, y, y_stride, accumulate);
}

// The same tile with 32 registers: a 4 x 3 tile no longer spills (17 live
// registers), and 4-row tiles up to 6 columns and 3-row ones up to 9 fit.
template <WeightType T, int R, int NC>
SPECDEC_EVEX_TARGET void matmul_tile_evex(const WeightMatrix& w, std::size_t row_begin, const float* x,
                                          std::size_t x_stride, float* y, std::size_t y_stride, bool accumulate) {
    matmul_tile_body<T, R, NC>(w, row_begin, x, x_stride, y, y_stride, accumulate);
}

// Calls f(std::integral_constant<int, n>{}) for a run-time n in [1, Max]:
// one compiled tile per column count.
template <int Max, class F>
void with_column_count(std::size_t n, F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) {
        (void)((n == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
    }(std::make_integer_sequence<int, Max>{});
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
        with_column_count<5>(group, [&](auto nc) {
            matmul_tile_avx2<T, R, decltype(nc)::value>(w, row_begin, xg, x_stride, yg, y_stride, accumulate);
        });
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
        // Row tiles per column count chosen on whole model forwards, where
        // they beat the two-row tiles. Every (row, column) sum is the same
        // chain of FMAs whatever the tile, so results do not depend on the choice.
        for (; r + 4 <= row_end; r += 4) matmul_tile_avx2<T, 4, 2>(w, r, x, x_stride, y, y_stride, accumulate);
    } else if (columns == 3) {
        // 3 x 3 and, for 4 columns, 2 x 4: with the weight stream prefetched
        // these smaller tiles keep up with memory where 4 x 3 (17 live
        // registers, one spilled) and 3 x 4 fall behind it (docs/cpu-kernels.md).
        for (; r + 3 <= row_end; r += 3) matmul_tile_avx2<T, 3, 3>(w, r, x, x_stride, y, y_stride, accumulate);
    } else if (columns == 4) {
        for (; r + 2 <= row_end; r += 2) matmul_tile_avx2<T, 2, 4>(w, r, x, x_stride, y, y_stride, accumulate);
    } else if (columns == 6) {
        // One pass of 12 accumulators instead of a 4- and a 2-column pass
        // over the same rows.
        for (; r + 2 <= row_end; r += 2) matmul_tile_avx2<T, 2, 6>(w, r, x, x_stride, y, y_stride, accumulate);
    } else {
        for (; r + 2 <= row_end; r += 2) matmul_row_tile_avx2<T, 2>(w, r, x, x_stride, columns, y, y_stride, accumulate);
    }
    for (; r < row_end; ++r) matmul_row_tile_avx2<T, 1>(w, r, x, x_stride, columns, y, y_stride, accumulate);
}

// R rows x every column on the 32-register tiles: one tile when the columns
// fit one (up to 9; R = 4 only up to 6), else balanced groups of at most 8.
template <WeightType T, int R>
void matmul_row_tile_evex(const WeightMatrix& w, std::size_t row_begin, const float* x, std::size_t x_stride,
                          std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    static_assert(R == 1 || R == 3 || R == 4);
    constexpr int widest_tile = R == 4 ? 6 : 9;
    const std::size_t groups = columns <= std::size_t{widest_tile} ? 1 : (columns + 7) / 8;
    for (std::size_t c0 = 0, done = 0; c0 < columns; ++done) {
        const std::size_t group = (columns - c0 + (groups - done) - 1) / (groups - done);
        const float* xg = x + c0 * x_stride;
        float* yg = y + c0 * y_stride;
        with_column_count<widest_tile>(group, [&](auto nc) {
            matmul_tile_evex<T, R, decltype(nc)::value>(w, row_begin, xg, x_stride, yg, y_stride, accumulate);
        });
        c0 += group;
    }
}

// The tile shapes for 32 registers: 4 rows up to 6 columns, 3 rows beyond,
// chosen on whole model forwards with every shape interleaved in one process
// (the measurements against the AVX2 tiles are in docs/cpu-kernels.md).
template <WeightType T>
void matmul_rows_evex_any(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                          std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    std::size_t r = row_begin;
    if (columns <= 6) {
        for (; r + 4 <= row_end; r += 4) matmul_row_tile_evex<T, 4>(w, r, x, x_stride, columns, y, y_stride, accumulate);
    } else {
        for (; r + 3 <= row_end; r += 3) matmul_row_tile_evex<T, 3>(w, r, x, x_stride, columns, y, y_stride, accumulate);
    }
    for (; r < row_end; ++r) matmul_row_tile_evex<T, 1>(w, r, x, x_stride, columns, y, y_stride, accumulate);
}
#endif  // SPECDEC_X86

inline void matmul_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const float* x,
                        std::size_t x_stride, std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
#if SPECDEC_X86
    // Dense types only: block-quantised ones go through quant_matmul_rows.
    if (platform::evex_available() && dispatch_dense(w.type, [&]<WeightType T>() {
            matmul_rows_evex_any<T>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
        }))
        return;
    if (platform::avx2_available() && dispatch_dense(w.type, [&]<WeightType T>() {
            matmul_rows_avx2_any<T>(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
        }))
        return;
#endif
    matmul_rows_scalar(w, row_begin, row_end, x, x_stride, columns, y, y_stride, accumulate);
}

}  // namespace detail

// Passes wider than this many columns multiply decoded weights as a blocked
// matrix product (gemm.hpp); narrower ones use the matrix-vector tiles, which
// read each weight once and decode it in registers. Measured on whole matrix
// products of the "100m" synthetic shapes for the dense storage types, both paths
// interleaved in one process: `specdec-matmul-bench` (benchmarks/) prints the
// ratio per width and type; the constant is the width from which the blocked
// product is faster for every dense type.
inline constexpr std::size_t kWideColumns = 28;

namespace detail {

// One task of a pass: rows [row_begin, row_end) of one target's product.
struct RowTask {
    const MatmulTarget* target;
    std::size_t row_begin, row_end;
};

// Splits every target into tasks of `chunk` rows (reused storage of this thread).
inline const std::vector<RowTask>& row_tasks(std::span<const MatmulTarget> targets, std::size_t chunk) {
    thread_local std::vector<RowTask> tasks;
    tasks.clear();
    for (const auto& t : targets) {
        for (std::size_t r = 0; r < t.weight->rows; r += chunk) tasks.push_back({&t, r, std::min(t.weight->rows, r + chunk)});
    }
    return tasks;
}

// The matrix-vector tile path: every weight row streamed once per pass and
// decoded in registers, times all columns. Block-quantised weights go through the
// integer kernels of quant_matmul.hpp (activations rounded to 8 bits, as
// llama.cpp does); the other types multiply float activations.
inline void matmul_tiles(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, std::size_t x_stride,
                         std::size_t columns) {
    if (columns == 0 || targets.empty()) return;
    // Row chunks: small enough to balance the threads, large enough that a
    // task amortises its scheduling and keeps the row stream sequential.
    std::size_t total_rows = 0;
    for (const auto& t : targets) total_rows += t.weight->rows;
    const std::size_t wanted_tasks = pool.size() * 16;
    const std::size_t chunk = std::max<std::size_t>(8, (total_rows + wanted_tasks - 1) / wanted_tasks);
    const std::vector<RowTask>& tasks = row_tasks(targets, chunk);
    // Block-quantised weights meet the activations quantised once to Q8 blocks.
    thread_local Q8Activations quantized;
    bool any_quantized = false;
    for (const auto& t : targets) any_quantized = any_quantized || is_block_quantized(t.weight->type);
    if (any_quantized) quantize_activations(x, x_stride, columns, targets.front().weight->cols, quantized);
    const RowTask* task_list = tasks.data();
    const Q8Activations* qx = &quantized;
    pool.parallel_for(tasks.size(), [&](std::size_t i) {
        const RowTask& task = task_list[i];
        const WeightMatrix& w = *task.target->weight;
        if (is_block_quantized(w.type)) {
            quant_matmul_rows(w, task.row_begin, task.row_end, *qx, columns, task.target->y, task.target->y_stride,
                              task.target->accumulate);
        } else {
            matmul_rows(w, task.row_begin, task.row_end, x, x_stride, columns, task.target->y, task.target->y_stride,
                        task.target->accumulate);
        }
    });
}

// Rows decoded per task of the blocked path: whole row panels; one depth
// slice of them (128 KiB) stays in L2 while every column strip passes, and
// the more rows a task has, the fewer times the packed columns are read.
inline constexpr std::size_t kWideTaskRows = 8 * kPanelRows;

// The blocked matrix-product path for dense weights (F32, F16, BF16): the
// columns are packed once, then each task decodes its weight rows to F32 once
// and multiplies them into every column.
inline void matmul_wide(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, std::size_t x_stride,
                        std::size_t columns) {
    if (columns == 0 || targets.empty()) return;
    for (const auto& t : targets) {
        if (is_block_quantized(t.weight->type)) {
            throw Error(std::string("matmul_wide: ") + weight_type_name(t.weight->type) +
                        " weights go through the integer kernels; expected F32, F16 or BF16");
        }
    }
    thread_local PackedColumns packed;
    packed.resize(columns, targets.front().weight->cols);
    PackedColumns* packed_ptr = &packed;
    pool.parallel_for(packed.strips(), [&](std::size_t s) { pack_strip(x, x_stride, *packed_ptr, s); });
    const std::vector<RowTask>& tasks = row_tasks(targets, kWideTaskRows);
    const RowTask* task_list = tasks.data();
    pool.parallel_for(tasks.size(), [&](std::size_t i) {
        const RowTask& task = task_list[i];
        gemm_weight_rows(*task.target->weight, task.row_begin, task.row_end, *packed_ptr, task.target->y,
                         task.target->y_stride, task.target->accumulate);
    });
}

}  // namespace detail

// Computes every target's product with the same input block x (columns
// vectors of length weight->cols, column c at x + c * x_stride). Input and
// outputs must not overlap. Passes of up to kWideColumns columns keep every
// column's result independent of the others (bitwise the same whatever the
// batch); wider ones over dense weights are a blocked matrix product, equal up
// to float rounding. Block-quantised weights stay on the integer kernels at
// every width: they round the activations to 8 bits, which turns a float
// rounding difference into a whole quantisation step now and then, so only
// bitwise-equal sums keep a wide pass equal to one-token passes. For the same
// reason a model that mixes dense and block-quantised matrices passes
// allow_blocked = false: its dense products feed quantised ones, so they too
// stay on the tile path at every width.
inline void matmul(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, std::size_t x_stride,
                   std::size_t columns, bool allow_blocked = true) {
    const bool dense = std::none_of(targets.begin(), targets.end(),
                                    [](const MatmulTarget& t) { return is_block_quantized(t.weight->type); });
    if (columns > kWideColumns && dense && allow_blocked) detail::matmul_wide(pool, targets, x, x_stride, columns);
    else detail::matmul_tiles(pool, targets, x, x_stride, columns);
}

inline void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, std::size_t x_stride, std::size_t columns,
                   float* y, std::size_t y_stride, bool accumulate = false, bool allow_blocked = true) {
    const MatmulTarget target{&w, y, y_stride, accumulate};
    matmul(pool, std::span<const MatmulTarget>(&target, 1), x, x_stride, columns, allow_blocked);
}

}  // namespace specdec::cpu
