#pragma once
// Matrix products for wide passes (prompt prefill, wide verification, the
// attention of many queries): y[c][r] = sum_k w[r][k] * x[c][k] as a blocked
// matrix product. Both operands are packed k-major, one depth slice at a time:
// the rows into panels of 16 (two AVX registers per k, read as one sequential
// stream), the columns into strips of 6 (six broadcasts per k). The register
// tile of 16 rows x 6 columns (12 accumulators, 2 row registers, 1 broadcast:
// 15 of the 16 registers) lies along the rows of y, which are contiguous
// there, so a finished tile is added to y with whole-vector loads and stores.
// Weight rows are decoded to F32 while they are packed, so decoding is paid
// once per product for all the columns, not once per group of columns as in
// the matrix-vector tiles of matmul.hpp.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "specdec/backends/cpu/aligned_vector.hpp"
#include "specdec/backends/cpu/dequantize.hpp"
#include "specdec/platform/x86.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu::detail {

inline constexpr std::size_t kPanelRows = 16;    // rows of a packed row panel: two AVX registers
inline constexpr std::size_t kStripColumns = 6;  // columns of a packed column strip: six broadcasts
inline constexpr std::size_t kDepthSlice = 256;  // a row panel slice (16 KiB) and a strip slice (6 KiB) share L1

// Columns packed into strips of kStripColumns: value (k, j) of strip s at
// s * depth * kStripColumns + k * kStripColumns + j; zeros past the last column.
struct PackedColumns {
    AlignedVector<float> values;
    std::size_t depth = 0;
    std::size_t columns = 0;

    [[nodiscard]] std::size_t strips() const { return (columns + kStripColumns - 1) / kStripColumns; }
    [[nodiscard]] const float* strip(std::size_t s) const { return values.data() + s * depth * kStripColumns; }
    void resize(std::size_t new_columns, std::size_t new_depth) {
        columns = new_columns;
        depth = new_depth;
        if (values.size() < strips() * depth * kStripColumns) values.resize(strips() * depth * kStripColumns);
    }
};

#if SPECDEC_X86
// Transposes the 8 x 8 block held by rows[0..8) in place.
SPECDEC_AVX2_TARGET inline void transpose_8x8(__m256 rows[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
        rows[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        rows[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

// The first values of a whole strip (columns c0.. at x + c * x_stride) into
// out, eight values of each column at a time, transposed in registers (two
// zero rows complete the 8 x 8 block). The eight-wide store of value k spills
// two lanes into value k + 1's slot, which the next store overwrites; the
// strip's last values are left to the caller, so nothing spills past it.
// Returns how many values it packed.
SPECDEC_AVX2_TARGET inline std::size_t pack_strip_avx2(const float* x, std::size_t x_stride, std::size_t c0, std::size_t depth,
                                                       float* out) {
    const float* columns[kStripColumns];
    for (std::size_t j = 0; j < kStripColumns; ++j) columns[j] = x + (c0 + j) * x_stride;
    std::size_t k = 0;
    for (; k + 8 < depth; k += 8) {
        __m256 block[8];
#pragma GCC unroll 6
        for (std::size_t j = 0; j < kStripColumns; ++j) block[j] = _mm256_loadu_ps(columns[j] + k);
        block[6] = block[7] = _mm256_setzero_ps();
        transpose_8x8(block);
#pragma GCC unroll 8
        for (std::size_t t = 0; t < 8; ++t) _mm256_storeu_ps(out + (k + t) * kStripColumns, block[t]);
    }
    return k;
}
#endif

// Packs strip s of the columns (column c at x + c * x_stride, `depth` values).
inline void pack_strip(const float* x, std::size_t x_stride, PackedColumns& packed, std::size_t s) {
    const std::size_t c0 = s * kStripColumns, count = std::min(kStripColumns, packed.columns - c0);
    float* out = packed.values.data() + s * packed.depth * kStripColumns;
    std::size_t k = 0;
#if SPECDEC_X86
    if (count == kStripColumns && platform::avx2_available()) k = pack_strip_avx2(x, x_stride, c0, packed.depth, out);
#endif
    for (; k < packed.depth; ++k) {
        for (std::size_t j = 0; j < kStripColumns; ++j) out[k * kStripColumns + j] = j < count ? x[(c0 + j) * x_stride + k] : 0.0f;
    }
}

inline void pack_columns(const float* x, std::size_t x_stride, std::size_t columns, std::size_t depth, PackedColumns& packed) {
    packed.resize(columns, depth);
    for (std::size_t s = 0; s < packed.strips(); ++s) pack_strip(x, x_stride, packed, s);
}

// One depth slice of a block of rows, packed into panels of kPanelRows:
// value (r, k) at (r / 16) * depth * 16 + k * 16 + r % 16; zero rows pad the
// last panel.
struct PackedRows {
    AlignedVector<float> values;
    std::size_t rows = 0;
    std::size_t depth = 0;

    [[nodiscard]] std::size_t panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
    [[nodiscard]] const float* panel(std::size_t i) const { return values.data() + i * depth * kPanelRows; }
    [[nodiscard]] float* panel(std::size_t i) { return values.data() + i * depth * kPanelRows; }
    void resize(std::size_t new_rows, std::size_t new_depth) {
        rows = new_rows;
        depth = new_depth;
        if (values.size() < panels() * depth * kPanelRows) values.resize(panels() * depth * kPanelRows);
    }
};

// Packs values [k0, k0 + depth) of rows [0, rows), value (r, k) read as value(r, k).
template <class Value>
void pack_rows_scalar(std::size_t rows, std::size_t k0, std::size_t depth, PackedRows& packed, Value value) {
    packed.resize(rows, depth);
    for (std::size_t i = 0; i < packed.panels(); ++i) {
        float* out = packed.panel(i);
        for (std::size_t k = 0; k < depth; ++k) {
            for (std::size_t j = 0; j < kPanelRows; ++j) {
                const std::size_t r = i * kPanelRows + j;
                out[k * kPanelRows + j] = r < rows ? value(r, k0 + k) : 0.0f;
            }
        }
    }
}

#if SPECDEC_X86
// Row sources for pack_rows_avx2: row(r) locates row r, load8(row, k) reads
// values k..k+7 of it as floats, value(row, k) one value. Structs rather than
// lambdas: nvcc's front end drops the target attribute from a lambda, and
// the AVX intrinsics then fail to inline in .cu files.
template <WeightType T>
struct DenseWeightRows {
    const WeightMatrix* w;
    std::size_t row_begin;
    [[nodiscard]] const std::byte* row(std::size_t r) const { return w->row(row_begin + r); }
    SPECDEC_AVX2_TARGET __m256 load8(const std::byte* row, std::size_t k) const {
        return detail::load8<T>(row, k / 32, static_cast<int>(k % 32 / 8), _mm256_setzero_ps());  // dense: no block scale
    }
    [[nodiscard]] float value(const std::byte* row, std::size_t k) const { return load_scalar<T>(row, k); }
};

struct FloatRows {
    const float* w;
    std::size_t stride;
    [[nodiscard]] const float* row(std::size_t r) const { return w + r * stride; }
    SPECDEC_AVX2_TARGET __m256 load8(const float* row, std::size_t k) const { return _mm256_loadu_ps(row + k); }
    [[nodiscard]] float value(const float* row, std::size_t k) const { return row[k]; }
};

// Packs values [k0, k0 + depth) of rows [0, rows) of a row source (above),
// eight rows by eight values at a time, transposed in registers.
template <class Source>
SPECDEC_AVX2_TARGET void pack_rows_avx2(std::size_t rows, std::size_t k0, std::size_t depth, PackedRows& packed,
                                        const Source& source) {
    packed.resize(rows, depth);
    const std::size_t whole = depth / 8 * 8;
    for (std::size_t g = 0; g < 2 * packed.panels(); ++g) {  // groups of 8 rows, two per panel
        const std::size_t r0 = g * 8;
        float* out = packed.panel(g / 2) + (g % 2) * 8;
        const std::size_t present = std::min<std::size_t>(8, rows > r0 ? rows - r0 : 0);
        if (present == 0) {  // the padding half of the last panel
            for (std::size_t k = 0; k < depth; ++k) _mm256_storeu_ps(out + k * kPanelRows, _mm256_setzero_ps());
            continue;
        }
        // Missing rows of a partial group repeat the last present row; their packed values are zeroed after.
        decltype(source.row(0)) group[8];
        for (std::size_t j = 0; j < 8; ++j) group[j] = source.row(r0 + std::min(j, present - 1));
        for (std::size_t k = 0; k < whole; k += 8) {
            __m256 block[8];
#pragma GCC unroll 8
            for (std::size_t j = 0; j < 8; ++j) block[j] = source.load8(group[j], k0 + k);
            transpose_8x8(block);
#pragma GCC unroll 8
            for (std::size_t j = 0; j < 8; ++j) _mm256_storeu_ps(out + (k + j) * kPanelRows, block[j]);
        }
        for (std::size_t k = whole; k < depth; ++k) {
            for (std::size_t j = 0; j < 8; ++j) out[k * kPanelRows + j] = source.value(group[j], k0 + k);
        }
        if (present < 8) {
            for (std::size_t k = 0; k < depth; ++k) std::fill(out + k * kPanelRows + present, out + k * kPanelRows + 8, 0.0f);
        }
    }
}
#endif

// Packs values [k0, k0 + depth) of rows [0, rows) of a float matrix, row r at w + r * w_stride.
inline void pack_rows(const float* w, std::size_t w_stride, std::size_t rows, std::size_t k0, std::size_t depth,
                      PackedRows& packed) {
#if SPECDEC_X86
    if (platform::avx2_available()) return pack_rows_avx2(rows, k0, depth, packed, FloatRows{w, w_stride});
#endif
    pack_rows_scalar(rows, k0, depth, packed, [&](std::size_t r, std::size_t k) { return w[r * w_stride + k]; });
}

// Packs values [k0, k0 + depth) of rows [0, rows) of a matrix stored
// transposed (value (r, k) at wt + k * wt_stride + r): each k is already a
// run of consecutive rows, so packing is a copy.
inline void pack_rows_transposed(const float* wt, std::size_t wt_stride, std::size_t rows, std::size_t k0, std::size_t depth,
                                 PackedRows& packed) {
    packed.resize(rows, depth);
    for (std::size_t k = 0; k < depth; ++k) {  // each source run read once, into every panel
        const float* source = wt + (k0 + k) * wt_stride;
        for (std::size_t i = 0; i < packed.panels(); ++i) {
            const std::size_t r0 = i * kPanelRows, count = std::min(kPanelRows, rows - r0);
            float* slot = packed.panel(i) + k * kPanelRows;
            if (count == kPanelRows) {
                // A fixed-length loop the compiler turns into vector moves (a
                // variable-length copy would be a library call per 64 bytes).
                for (std::size_t j = 0; j < kPanelRows; ++j) slot[j] = source[r0 + j];
            } else {
                for (std::size_t j = 0; j < kPanelRows; ++j) slot[j] = j < count ? source[r0 + j] : 0.0f;
            }
        }
    }
}

// Packs values [k0, k0 + depth) of weight rows [row_begin, row_begin + rows), decoding them to F32.
inline void pack_weight_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t rows, std::size_t k0, std::size_t depth,
                             PackedRows& packed) {
#if SPECDEC_X86
    if (platform::avx2_available()) {
        switch (w.type) {
            case WeightType::f32: return pack_rows_avx2(rows, k0, depth, packed, DenseWeightRows<WeightType::f32>{&w, row_begin});
            case WeightType::f16: return pack_rows_avx2(rows, k0, depth, packed, DenseWeightRows<WeightType::f16>{&w, row_begin});
            case WeightType::bf16: return pack_rows_avx2(rows, k0, depth, packed, DenseWeightRows<WeightType::bf16>{&w, row_begin});
            default: break;
        }
    }
#endif
    // Any other type (or no AVX2): whole rows through the scalar decoder, then packed.
    thread_local std::vector<float> decoded;
    if (decoded.size() < rows * w.cols) decoded.resize(rows * w.cols);
    dequantize_rows(w, row_begin, rows, decoded.data(), w.cols);
    pack_rows_scalar(rows, k0, depth, packed, [&](std::size_t r, std::size_t k) { return decoded[r * w.cols + k]; });
}

// Adds (or writes) a 16-row x `columns` tile, column j at tile + j * kPanelRows,
// to the first `rows` rows of y's columns (column j at y + j * y_stride).
inline void store_tile(const float* tile, std::size_t rows, std::size_t columns, float* y, std::size_t y_stride, bool add) {
    for (std::size_t j = 0; j < columns; ++j) {
        float* yj = y + j * y_stride;
        for (std::size_t r = 0; r < rows; ++r) yj[r] = add ? yj[r] + tile[j * kPanelRows + r] : tile[j * kPanelRows + r];
    }
}

inline void gemm_tile_scalar(std::size_t depth, const float* panel, const float* strip, std::size_t rows, std::size_t columns,
                             float* y, std::size_t y_stride, bool add) {
    float tile[kStripColumns * kPanelRows] = {};
    for (std::size_t k = 0; k < depth; ++k) {
        for (std::size_t j = 0; j < kStripColumns; ++j) {
            const float xv = strip[k * kStripColumns + j];
            for (std::size_t r = 0; r < kPanelRows; ++r) tile[j * kPanelRows + r] += panel[k * kPanelRows + r] * xv;
        }
    }
    store_tile(tile, rows, columns, y, y_stride, add);
}

#if SPECDEC_X86
// The 16 rows of a panel slice x the first N columns of a strip slice, over
// `depth` values of k, added to (or written into) y.
template <int N>
SPECDEC_AVX2_TARGET void gemm_tile_avx2(std::size_t depth, const float* panel, const float* strip, std::size_t rows, float* y,
                                        std::size_t y_stride, bool add) {
    __m256 acc[N][2];
#pragma GCC unroll 6
    for (int j = 0; j < N; ++j) {
        acc[j][0] = _mm256_setzero_ps();
        acc[j][1] = _mm256_setzero_ps();
    }
    for (std::size_t k = 0; k < depth; ++k) {
        const __m256 low = _mm256_loadu_ps(panel + k * kPanelRows), high = _mm256_loadu_ps(panel + k * kPanelRows + 8);
#pragma GCC unroll 6
        for (int j = 0; j < N; ++j) {
            const __m256 xv = _mm256_broadcast_ss(strip + k * kStripColumns + j);
            acc[j][0] = _mm256_fmadd_ps(low, xv, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(high, xv, acc[j][1]);
        }
    }
    if (rows == kPanelRows) {
#pragma GCC unroll 6
        for (int j = 0; j < N; ++j) {
            float* yj = y + j * y_stride;
            if (add) {
                acc[j][0] = _mm256_add_ps(acc[j][0], _mm256_loadu_ps(yj));
                acc[j][1] = _mm256_add_ps(acc[j][1], _mm256_loadu_ps(yj + 8));
            }
            _mm256_storeu_ps(yj, acc[j][0]);
            _mm256_storeu_ps(yj + 8, acc[j][1]);
        }
        return;
    }
    alignas(32) float tile[N * kPanelRows];
#pragma GCC unroll 6
    for (int j = 0; j < N; ++j) {
        _mm256_store_ps(tile + j * kPanelRows, acc[j][0]);
        _mm256_store_ps(tile + j * kPanelRows + 8, acc[j][1]);
    }
    store_tile(tile, rows, N, y, y_stride, add);
}

SPECDEC_AVX2_TARGET inline void gemm_tile_avx2_columns(std::size_t columns, std::size_t depth, const float* panel,
                                                       const float* strip, std::size_t rows, float* y, std::size_t y_stride,
                                                       bool add) {
    switch (columns) {
        case 1: return gemm_tile_avx2<1>(depth, panel, strip, rows, y, y_stride, add);
        case 2: return gemm_tile_avx2<2>(depth, panel, strip, rows, y, y_stride, add);
        case 3: return gemm_tile_avx2<3>(depth, panel, strip, rows, y, y_stride, add);
        case 4: return gemm_tile_avx2<4>(depth, panel, strip, rows, y, y_stride, add);
        case 5: return gemm_tile_avx2<5>(depth, panel, strip, rows, y, y_stride, add);
        default: return gemm_tile_avx2<6>(depth, panel, strip, rows, y, y_stride, add);
    }
}
#endif

#if SPECDEC_X86
// Two whole panels (32 rows) x two strips (6 + N columns) in 512-bit
// registers: up to 24 accumulators of the 32 registers, and per k two panel
// loads and 6 + N broadcasts for 12 + 2N fused multiply-adds, twice the work
// per panel byte read from L2 of the 16 x 6 tile. Each lane runs the same
// chain of FMAs in the same order as the AVX2 tile (a 512-bit FMA is sixteen
// scalar ones), so the results are bitwise those of the AVX2 tiles.
template <int N>
SPECDEC_EVEX_TARGET void gemm_tile_pair_evex(std::size_t depth, const float* panel0, const float* panel1, const float* strip0,
                                             const float* strip1, float* y, std::size_t y_stride, bool add) {
    constexpr int kColumns = static_cast<int>(kStripColumns) + N;
    __m512 acc[kColumns][2];
#pragma GCC unroll 12
    for (int j = 0; j < kColumns; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    for (std::size_t k = 0; k < depth; ++k) {
        const __m512 top = _mm512_loadu_ps(panel0 + k * kPanelRows), bottom = _mm512_loadu_ps(panel1 + k * kPanelRows);
#pragma GCC unroll 12
        for (int j = 0; j < kColumns; ++j) {
            const float* source = j < static_cast<int>(kStripColumns) ? strip0 + k * kStripColumns + j
                                                                      : strip1 + k * kStripColumns + (j - kStripColumns);
            const __m512 xv = _mm512_set1_ps(*source);
            acc[j][0] = _mm512_fmadd_ps(top, xv, acc[j][0]);
            acc[j][1] = _mm512_fmadd_ps(bottom, xv, acc[j][1]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < kColumns; ++j) {
        float* yj = y + static_cast<std::size_t>(j) * y_stride;
        if (add) {
            acc[j][0] = _mm512_add_ps(acc[j][0], _mm512_loadu_ps(yj));
            acc[j][1] = _mm512_add_ps(acc[j][1], _mm512_loadu_ps(yj + kPanelRows));
        }
        _mm512_storeu_ps(yj, acc[j][0]);
        _mm512_storeu_ps(yj + kPanelRows, acc[j][1]);
    }
}

SPECDEC_EVEX_TARGET inline void gemm_tile_pair_evex_columns(std::size_t second_columns, std::size_t depth, const float* panel0,
                                                            const float* panel1, const float* strip0, const float* strip1,
                                                            float* y, std::size_t y_stride, bool add) {
    switch (second_columns) {
        case 0: return gemm_tile_pair_evex<0>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        case 1: return gemm_tile_pair_evex<1>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        case 2: return gemm_tile_pair_evex<2>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        case 3: return gemm_tile_pair_evex<3>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        case 4: return gemm_tile_pair_evex<4>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        case 5: return gemm_tile_pair_evex<5>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
        default: return gemm_tile_pair_evex<6>(depth, panel0, panel1, strip0, strip1, y, y_stride, add);
    }
}
#endif

// Which register tiles a blocked product runs on: the best the CPU has, or a
// named one (tests compare them bitwise).
enum class GemmTiles { best, scalar, avx2, evex };

inline GemmTiles resolve_gemm_tiles(GemmTiles tiles) {
    if (tiles != GemmTiles::best) return tiles;
#if SPECDEC_X86
    if (platform::evex_available()) return GemmTiles::evex;
    if (platform::avx2_available()) return GemmTiles::avx2;
#endif
    return GemmTiles::scalar;
}

// The AVX2 (or scalar) tiles of panels [first_panel, panels) times strip s.
inline void gemm_strip_tiles(const PackedRows& a, const PackedColumns& x, std::size_t s, std::size_t first_panel,
                             std::size_t k0, float* y, std::size_t y_stride, bool add, GemmTiles tiles) {
    const float* strip = x.strip(s) + k0 * kStripColumns;
    const std::size_t c0 = s * kStripColumns, columns = std::min(kStripColumns, x.columns - c0);
    for (std::size_t i = first_panel; i < a.panels(); ++i) {
        const std::size_t r0 = i * kPanelRows, rows = std::min(kPanelRows, a.rows - r0);
        float* yt = y + c0 * y_stride + r0;
#if SPECDEC_X86
        if (tiles != GemmTiles::scalar) {
            gemm_tile_avx2_columns(columns, a.depth, a.panel(i), strip, rows, yt, y_stride, add);
            continue;
        }
#endif
        gemm_tile_scalar(a.depth, a.panel(i), strip, rows, columns, yt, y_stride, add);
    }
}

// y[c * y_stride + r] (+)= sum over the slice of a(r, k) x(c, k0 + k), for
// the packed rows of one depth slice and every packed column; single-threaded
// (one task of a product). Strips outside, panels inside: a strip slice stays
// in L1 while the block's panels stream past it from L2. With AVX-512, pairs
// of strips meet pairs of whole panels; the strips and panels left over take
// the AVX2 tiles, which give the same bits.
inline void gemm_packed(const PackedRows& a, const PackedColumns& x, std::size_t k0, float* y, std::size_t y_stride, bool add,
                        GemmTiles tiles = GemmTiles::best) {
    tiles = resolve_gemm_tiles(tiles);
    std::size_t s = 0;
#if SPECDEC_X86
    if (tiles == GemmTiles::evex) {
        const std::size_t whole_panels = a.rows / kPanelRows, paired_panels = whole_panels / 2 * 2;
        for (; s < x.strips(); s += 2) {
            const std::size_t c0 = s * kStripColumns;
            if (x.columns - c0 < kStripColumns) break;  // a partial last strip
            const std::size_t second_columns = std::min(kStripColumns, x.columns - c0 - kStripColumns);
            const float* strip0 = x.strip(s) + k0 * kStripColumns;
            const float* strip1 = second_columns > 0 ? x.strip(s + 1) + k0 * kStripColumns : strip0;
            for (std::size_t i = 0; i < paired_panels; i += 2) {
                gemm_tile_pair_evex_columns(second_columns, a.depth, a.panel(i), a.panel(i + 1), strip0, strip1,
                                            y + c0 * y_stride + i * kPanelRows, y_stride, add);
            }
            gemm_strip_tiles(a, x, s, paired_panels, k0, y, y_stride, add, tiles);
            if (second_columns > 0) gemm_strip_tiles(a, x, s + 1, paired_panels, k0, y, y_stride, add, tiles);
        }
    }
#endif
    for (; s < x.strips(); ++s) gemm_strip_tiles(a, x, s, 0, k0, y, y_stride, add, tiles);
}

// y (+)= a x over the whole depth of x, one packed depth slice of the rows at
// a time: pack(k0, depth, packed) packs values [k0, k0 + depth) of every row.
template <class PackSlice>
void gemm_sliced(const PackedColumns& x, float* y, std::size_t y_stride, bool accumulate, PackSlice pack) {
    thread_local PackedRows packed;
    for (std::size_t k0 = 0; k0 < x.depth; k0 += kDepthSlice) {
        const std::size_t depth = std::min(kDepthSlice, x.depth - k0);
        pack(k0, depth, packed);
        gemm_packed(packed, x, k0, y, y_stride, accumulate || k0 > 0);
    }
}

// Rows [row_begin, row_end) of a weight matrix (any storage type) times every
// packed column, into y's rows [row_begin, row_end).
inline void gemm_weight_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const PackedColumns& x,
                             float* y, std::size_t y_stride, bool accumulate) {
    gemm_sliced(x, y + row_begin, y_stride, accumulate, [&](std::size_t k0, std::size_t depth, PackedRows& packed) {
        pack_weight_rows(w, row_begin, row_end - row_begin, k0, depth, packed);
    });
}

}  // namespace specdec::cpu::detail
