#pragma once
// Matrix products for wide passes (prompt prefill, wide verification, the
// attention of many queries): y[c][r] = sum_k w[r][k] * x[c][k] as a blocked
// matrix product. The columns are transposed once into panels of 16; a
// register tile of 6 rows x 16 columns (12 AVX accumulators, two column
// registers and one broadcast weight: 15 of the 16 registers) runs along a
// k-slice whose panel slice stays in L1 while every row tile of the task uses
// it. Each weight row is decoded to F32 once per product (dequantize_rows), so
// the cost of decoding is shared by all columns instead of paid per column
// group as in the matrix-vector tiles of matmul.hpp.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "specdec/backends/cpu/dequantize.hpp"
#include "specdec/backends/cpu/simd.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu::detail {

inline constexpr std::size_t kPanelColumns = 16;  // columns of a packed panel: two AVX registers
inline constexpr std::size_t kTileRows = 6;       // rows of a register tile
inline constexpr std::size_t kDepthSlice = 256;   // k-slice: a panel slice of 16 KiB stays in L1

// Columns transposed into panels of kPanelColumns: value (k, j) of panel p at
// p * depth * kPanelColumns + k * kPanelColumns + j; zeros past the last column.
struct PackedColumns {
    std::vector<float> values;
    std::size_t depth = 0;
    std::size_t columns = 0;

    [[nodiscard]] std::size_t panels() const { return (columns + kPanelColumns - 1) / kPanelColumns; }
    [[nodiscard]] const float* panel(std::size_t p) const { return values.data() + p * depth * kPanelColumns; }
    void resize(std::size_t new_columns, std::size_t new_depth) {
        columns = new_columns;
        depth = new_depth;
        if (values.size() < panels() * depth * kPanelColumns) values.resize(panels() * depth * kPanelColumns);
    }
};

// Packs panel p of the columns (column c at x + c * x_stride, `depth` values).
inline void pack_panel(const float* x, std::size_t x_stride, PackedColumns& packed, std::size_t p) {
    const std::size_t c0 = p * kPanelColumns, count = std::min(kPanelColumns, packed.columns - c0);
    float* out = packed.values.data() + p * packed.depth * kPanelColumns;
    for (std::size_t k = 0; k < packed.depth; ++k) {
        float* slot = out + k * kPanelColumns;
        for (std::size_t j = 0; j < count; ++j) slot[j] = x[(c0 + j) * x_stride + k];
        for (std::size_t j = count; j < kPanelColumns; ++j) slot[j] = 0.0f;
    }
}

inline void pack_columns(const float* x, std::size_t x_stride, std::size_t columns, std::size_t depth, PackedColumns& packed) {
    packed.resize(columns, depth);
    for (std::size_t p = 0; p < packed.panels(); ++p) pack_panel(x, x_stride, packed, p);
}

// Writes (or adds) a rows x columns tile of sums, row r of column c at tile[r * kPanelColumns + c].
inline void store_tile(const float* tile, std::size_t rows, std::size_t columns, float* y, std::size_t y_stride, bool add) {
    for (std::size_t c = 0; c < columns; ++c) {
        float* yc = y + c * y_stride;
        for (std::size_t r = 0; r < rows; ++r) yc[r] = add ? yc[r] + tile[r * kPanelColumns + c] : tile[r * kPanelColumns + c];
    }
}

inline void gemm_tile_scalar(std::size_t rows, std::size_t depth, const float* w, std::size_t w_stride, const float* xp, float* tile) {
    for (std::size_t r = 0; r < rows; ++r) {
        float sums[kPanelColumns] = {};
        for (std::size_t k = 0; k < depth; ++k) {
            const float wv = w[r * w_stride + k];
            for (std::size_t j = 0; j < kPanelColumns; ++j) sums[j] += wv * xp[k * kPanelColumns + j];
        }
        std::copy_n(sums, kPanelColumns, tile + r * kPanelColumns);
    }
}

#if SPECDEC_HAS_X86_KERNELS
// R rows (w, row r at w + r * w_stride) x the 8 * V first columns of a panel
// slice, over `depth` values of k.
template <int R, int V>
SPECDEC_AVX2_TARGET void gemm_tile_avx2(std::size_t depth, const float* w, std::size_t w_stride, const float* xp, float* tile) {
    __m256 acc[R][V];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
    const float* rows[R];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) rows[r] = w + r * w_stride;
    for (std::size_t k = 0; k < depth; ++k) {
        __m256 xv[V];
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(xp + k * kPanelColumns + 8 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m256 wv = _mm256_broadcast_ss(rows[r] + k);
#pragma GCC unroll 2
            for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(wv, xv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) _mm256_storeu_ps(tile + r * kPanelColumns + 8 * v, acc[r][v]);
}

template <int V>
SPECDEC_AVX2_TARGET void gemm_tile_avx2_rows(std::size_t rows, std::size_t depth, const float* w, std::size_t w_stride,
                                             const float* xp, float* tile) {
    switch (rows) {
        case 1: return gemm_tile_avx2<1, V>(depth, w, w_stride, xp, tile);
        case 2: return gemm_tile_avx2<2, V>(depth, w, w_stride, xp, tile);
        case 3: return gemm_tile_avx2<3, V>(depth, w, w_stride, xp, tile);
        case 4: return gemm_tile_avx2<4, V>(depth, w, w_stride, xp, tile);
        case 5: return gemm_tile_avx2<5, V>(depth, w, w_stride, xp, tile);
        default: return gemm_tile_avx2<6, V>(depth, w, w_stride, xp, tile);
    }
}
#endif

// y[c * y_stride + r] = (y +) sum_k w[r * w_stride + k] * x(c, k) for rows
// [0, rows) and every packed column; single-threaded (one task of a product).
inline void gemm_block(const float* w, std::size_t w_stride, std::size_t rows, const PackedColumns& x, float* y,
                       std::size_t y_stride, bool accumulate) {
    alignas(32) float tile[kTileRows * kPanelColumns];
#if SPECDEC_HAS_X86_KERNELS
    const bool avx2 = avx2_available();
#endif
    for (std::size_t k0 = 0; k0 < x.depth; k0 += kDepthSlice) {
        const std::size_t depth = std::min(kDepthSlice, x.depth - k0);
        const bool add = accumulate || k0 > 0;
        for (std::size_t p = 0; p < x.panels(); ++p) {
            const float* xp = x.panel(p) + k0 * kPanelColumns;
            const std::size_t c0 = p * kPanelColumns, columns = std::min(kPanelColumns, x.columns - c0);
            for (std::size_t r0 = 0; r0 < rows; r0 += kTileRows) {
                const std::size_t tile_rows = std::min(kTileRows, rows - r0);
                const float* wr = w + r0 * w_stride + k0;
#if SPECDEC_HAS_X86_KERNELS
                if (avx2) {
                    if (columns <= 8) gemm_tile_avx2_rows<1>(tile_rows, depth, wr, w_stride, xp, tile);
                    else gemm_tile_avx2_rows<2>(tile_rows, depth, wr, w_stride, xp, tile);
                } else {
                    gemm_tile_scalar(tile_rows, depth, wr, w_stride, xp, tile);
                }
#else
                gemm_tile_scalar(tile_rows, depth, wr, w_stride, xp, tile);
#endif
                store_tile(tile, tile_rows, columns, y + c0 * y_stride + r0, y_stride, add);
            }
        }
    }
}

// Rows [row_begin, row_end) of a weight matrix (any storage type) times every
// packed column: the rows are decoded to F32 once, then multiplied.
inline void gemm_weight_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const PackedColumns& x,
                             float* y, std::size_t y_stride, bool accumulate) {
    thread_local std::vector<float> decoded;
    const std::size_t rows = row_end - row_begin;
    if (decoded.size() < rows * w.cols) decoded.resize(rows * w.cols);
    dequantize_rows(w, row_begin, rows, decoded.data(), w.cols);
    gemm_block(decoded.data(), w.cols, rows, x, y + row_begin, y_stride, accumulate);
}

}  // namespace specdec::cpu::detail
