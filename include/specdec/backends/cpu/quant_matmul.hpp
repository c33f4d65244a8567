#pragma once
// Block-quantised weights times activations through integer dot products, the
// scheme of llama.cpp: each activation column is quantised once per product
// to 8-bit blocks of 32 (scale = max|x| / 127), then every 32 weights meet
// the matching activation block as a 32-term integer dot product scaled by
// the weights' scale times the activation scale. Every weight type is read
// as small unsigned integers u with
//   value = s * (u - k) + o
// per 32 values: k an integer offset (Q4_0: 8, Q5_0: 16, Q6_K: 32) taken back
// in integers, s the block's (for the K types the sub-block's) scale and o a
// float offset (Q4_1/Q5_1: m; Q4_K/Q5_K: -dmin * min) that meets the sum of
// the activations. Q8_0 is signed and moves its sign onto the activations.
// Decoding 4-bit weights to floats would make the draft compute-bound; this
// keeps a quantised model close to memory speed. The AVX2 and the scalar
// kernels compute the same integer sums, so they agree to float rounding.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "specdec/backends/cpu/aligned_vector.hpp"
#include "specdec/backends/cpu/weight_prefetch.hpp"
#include "specdec/tensors/quant_blocks.hpp"
#include "specdec/platform/x86.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::cpu {

// `columns` activation vectors of `cols` values (cols a multiple of 32), quantised per block.
struct Q8Activations {
    AlignedVector<std::int8_t> values;  // column c, block b at (c * blocks + b) * 32
    AlignedVector<float> scales;        // column c, block b at c * blocks + b
    // 8 * the sums of each 4 consecutive values, 8 per block (column c, block b
    // at (c * blocks + b) * 8): what a dot product with unsigned weights u
    // must subtract, lane by lane, to become the one with u - 8 (Q4_0);
    // shifted left, with u - 16 (Q5_0) and u - 32 (Q6_K).
    AlignedVector<std::int32_t> offset_sums;
    // The same sums of 4 values times the block's scale, as floats: what a
    // float offset o per weight block (value = s u + o) multiplies.
    AlignedVector<float> lane_sums;
    // The block's sum times its scale (column c, block b at c * blocks + b):
    // what the K types' per-sub-block mins multiply, 8 blocks at a time.
    AlignedVector<float> block_sums;
    std::size_t blocks = 0;

    [[nodiscard]] const std::int8_t* block(std::size_t c, std::size_t b) const { return &values[(c * blocks + b) * kQuantBlock]; }
    [[nodiscard]] float scale(std::size_t c, std::size_t b) const { return scales[c * blocks + b]; }
};

inline void quantize_activations(const float* x, std::size_t x_stride, std::size_t columns, std::size_t cols, Q8Activations& out) {
    out.blocks = cols / kQuantBlock;
    out.values.resize(columns * cols);
    out.scales.resize(columns * out.blocks);
    out.offset_sums.resize(columns * out.blocks * 8);
    out.lane_sums.resize(columns * out.blocks * 8);
    out.block_sums.resize(columns * out.blocks);
    for (std::size_t c = 0; c < columns; ++c) {
        for (std::size_t b = 0; b < out.blocks; ++b) {
            const float* v = x + c * x_stride + b * kQuantBlock;
            float amax = 0.0f;
            bool finite = true;
            for (std::size_t i = 0; i < kQuantBlock; ++i) {
                const float magnitude = std::fabs(v[i]);
                finite &= magnitude <= std::numeric_limits<float>::max();  // false for NaN and inf
                amax = std::max(amax, magnitude);
            }
            std::int8_t* q = &out.values[(c * out.blocks + b) * kQuantBlock];
            // A NaN or inf cannot become an int8 (the conversion is undefined):
            // such a block is stored as zeros with a NaN scale, so the products
            // it enters come out NaN, as a float product would, and the decoder
            // reports the non-finite logits. Tiny blocks are zeros (see kQuantTinyMagnitude).
            float d = amax / 127.0f;
            if (!finite || amax < kQuantTinyMagnitude) {
                std::fill(q, q + kQuantBlock, std::int8_t{0});
                d = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
            } else {
                const float inverse = 1.0f / d;
                for (std::size_t i = 0; i < kQuantBlock; ++i) q[i] = static_cast<std::int8_t>(std::nearbyint(v[i] * inverse));
            }
            out.scales[c * out.blocks + b] = d;
            std::int32_t* sums = &out.offset_sums[(c * out.blocks + b) * 8];
            float* lane_sums = &out.lane_sums[(c * out.blocks + b) * 8];
            int block_sum = 0;
            for (std::size_t lane = 0; lane < 8; ++lane) {
                const int sum = q[4 * lane] + q[4 * lane + 1] + q[4 * lane + 2] + q[4 * lane + 3];
                sums[lane] = 8 * sum;
                lane_sums[lane] = d * static_cast<float>(sum);
                block_sum += sum;
            }
            out.block_sums[c * out.blocks + b] = d * static_cast<float>(block_sum);
        }
    }
}

namespace detail {

// Bytes of a row per 32 values, rounded up (the prefetch distance of a block).
constexpr std::size_t quant_bytes_per_32(WeightType t) {
    return (weight_block_bytes(t) * kQuantBlock + weight_block_elements(t) - 1) / weight_block_elements(t);
}

// The integer offset k of value = s * (u - k) + o.
constexpr int integer_offset(WeightType t) {
    return t == WeightType::q4_0 ? 8 : t == WeightType::q5_0 ? 16 : t == WeightType::q6_k ? 32 : 0;
}

// Whether the type has a float offset o (Q4_1, Q5_1, Q4_K, Q5_K).
constexpr bool has_float_offset(WeightType t) {
    return t == WeightType::q4_1 || t == WeightType::q5_1 || t == WeightType::q4_k || t == WeightType::q5_k;
}

inline float load_half(const std::byte* p) {
    Half h;
    std::memcpy(&h, p, 2);
    return half_to_float(h);
}

template <WeightType T> struct BlockOf;
template <> struct BlockOf<WeightType::q8_0> { using type = BlockQ8_0; };
template <> struct BlockOf<WeightType::q4_0> { using type = BlockQ4_0; };
template <> struct BlockOf<WeightType::q4_1> { using type = BlockQ4_1; };
template <> struct BlockOf<WeightType::q5_0> { using type = BlockQ5_0; };
template <> struct BlockOf<WeightType::q5_1> { using type = BlockQ5_1; };
template <> struct BlockOf<WeightType::q4_k> { using type = BlockQ4_K; };
template <> struct BlockOf<WeightType::q5_k> { using type = BlockQ5_K; };
template <> struct BlockOf<WeightType::q6_k> { using type = BlockQ6_K; };

// Values 32 b .. 32 b + 31 of a row of type T: value i = scale[i / 16] * (u[i] - k) + offset.
struct ScalarBlock {
    std::int8_t q[kQuantBlock];  // u - k (Q8_0: the signed value)
    float scale[2];              // for values 0-15 and 16-31 (different only for Q6_K)
    float offset;
};

template <WeightType T>
inline void decode_weight_block(const std::byte* row, std::size_t b, ScalarBlock& out) {
    constexpr int k = integer_offset(T);
    out.offset = 0.0f;
    if constexpr (T == WeightType::q8_0 || T == WeightType::q4_0 || T == WeightType::q4_1 || T == WeightType::q5_0 ||
                  T == WeightType::q5_1) {
        using Block = typename BlockOf<T>::type;
        const std::byte* block = row + b * sizeof(Block);
        out.scale[0] = out.scale[1] = load_half(block + offsetof(Block, d));
        if constexpr (T == WeightType::q8_0) {
            std::memcpy(out.q, block + offsetof(Block, qs), kQuantBlock);
            return;
        } else {
            if constexpr (has_float_offset(T)) out.offset = load_half(block + offsetof(Block, m));
            const auto* qs = reinterpret_cast<const std::uint8_t*>(block + offsetof(Block, qs));
            std::uint32_t qh = 0;
            if constexpr (T == WeightType::q5_0 || T == WeightType::q5_1) {
                qh = cpu::detail::load_u32_le(reinterpret_cast<const std::uint8_t*>(block + offsetof(Block, qh)));
            }
            for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
                const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
                const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
                out.q[j] = static_cast<std::int8_t>(lo - k);
                out.q[j + kQuantBlock / 2] = static_cast<std::int8_t>(hi - k);
            }
        }
    } else if constexpr (T == WeightType::q4_k || T == WeightType::q5_k) {
        using Block = typename BlockOf<T>::type;
        const std::byte* block = row + (b / 8) * sizeof(Block);
        const std::size_t j = b % 8;
        std::uint8_t scales[12];
        std::memcpy(scales, block + offsetof(Block, scales), 12);
        std::uint8_t sc, mn;
        q4k_scale_min(j, scales, sc, mn);
        out.scale[0] = out.scale[1] = load_half(block + offsetof(Block, d)) * static_cast<float>(sc);
        out.offset = -(load_half(block + offsetof(Block, dmin)) * static_cast<float>(mn));
        const auto* qs = reinterpret_cast<const std::uint8_t*>(block + offsetof(Block, qs)) + 32 * (j / 2);
        const int shift = 4 * static_cast<int>(j % 2);
        for (std::size_t l = 0; l < 32; ++l) {
            int u = (qs[l] >> shift) & 0x0F;
            if constexpr (T == WeightType::q5_k) {
                const auto* qh = reinterpret_cast<const std::uint8_t*>(block + offsetof(BlockQ5_K, qh));
                u |= ((qh[l] >> j) & 1) << 4;
            }
            out.q[l] = static_cast<std::int8_t>(u);
        }
    } else {
        static_assert(T == WeightType::q6_k);
        const std::byte* block = row + (b / 8) * sizeof(BlockQ6_K);
        const std::size_t j = b % 8, half = j / 4, p = j % 4;
        const float d = load_half(block + offsetof(BlockQ6_K, d));
        const auto* scales = reinterpret_cast<const std::int8_t*>(block + offsetof(BlockQ6_K, scales)) + 8 * half + 2 * p;
        out.scale[0] = d * static_cast<float>(scales[0]);
        out.scale[1] = d * static_cast<float>(scales[1]);
        const auto* ql = reinterpret_cast<const std::uint8_t*>(block + offsetof(BlockQ6_K, ql)) + 64 * half + 32 * (p & 1);
        const auto* qh = reinterpret_cast<const std::uint8_t*>(block + offsetof(BlockQ6_K, qh)) + 32 * half;
        for (std::size_t l = 0; l < 32; ++l) {
            const int u = ((ql[l] >> (4 * (p >> 1))) & 0x0F) | (((qh[l] >> (2 * p)) & 3) << 4);
            out.q[l] = static_cast<std::int8_t>(u - k);
        }
    }
}

template <WeightType T>
void quant_matmul_rows_scalar(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const Q8Activations& qx,
                              std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
    const std::size_t row_bytes = w.row_bytes();
    ScalarBlock block;
    thread_local std::vector<float> sums;
    sums.assign(columns, 0.0f);
    for (std::size_t r = row_begin; r < row_end; ++r) {
        std::fill(sums.begin(), sums.end(), 0.0f);
        const std::byte* row = w.data + r * row_bytes;
        for (std::size_t b = 0; b < qx.blocks; ++b) {
            decode_weight_block<T>(row, b, block);
            for (std::size_t c = 0; c < columns; ++c) {
                const std::int8_t* xq = qx.block(c, b);
                std::int32_t dot[2] = {0, 0}, x_sum = 0;
                for (std::size_t i = 0; i < kQuantBlock; ++i) {
                    dot[i / 16] += static_cast<std::int32_t>(block.q[i]) * xq[i];
                    x_sum += xq[i];
                }
                const float dx = qx.scale(c, b);
                if constexpr (T == WeightType::q6_k) {
                    sums[c] += static_cast<float>(dot[0]) * (block.scale[0] * dx) + static_cast<float>(dot[1]) * (block.scale[1] * dx);
                } else {
                    sums[c] += static_cast<float>(dot[0] + dot[1]) * (block.scale[0] * dx);
                }
                if constexpr (has_float_offset(T)) sums[c] += block.offset * (dx * static_cast<float>(x_sum));
            }
        }
        for (std::size_t c = 0; c < columns; ++c) {
            float& out = y[c * y_stride + r];
            out = accumulate ? out + sums[c] : sums[c];
        }
    }
}

#if SPECDEC_X86

// One 32-value weight block in registers: value = s * (u - k) + o (see the top).
struct Avx2Block {
    __m256i u;  // unsigned weights (Q8_0: |w|)
    __m256i w;  // Q8_0 only: the signed weights, whose signs move onto x
    __m256 s;   // scale, broadcast
    __m256 o;   // float offset (types with has_float_offset only)
};

// 0x10 in byte i where bit i of the little-endian 32-bit `bits` is set.
SPECDEC_AVX2_TARGET inline __m256i fifth_bits(const std::byte* qh) {
    std::uint32_t bits;
    std::memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(0x10));
}

// Values 0-15 from the low nibbles of 16 bytes, 16-31 from their high nibbles (Q4_0, Q4_1, Q5_0, Q5_1).
SPECDEC_AVX2_TARGET inline __m256i split_nibbles(const std::byte* qs) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
}

// A block of the 32-value types (the K types: see quant_matmul_tile_k_avx2).
template <WeightType T>
SPECDEC_AVX2_TARGET inline Avx2Block load_weight_block(const std::byte* row, std::size_t b) {
    Avx2Block out{};  // members a type does not use are never read; the zeroing is dead code to the compiler
    if constexpr (T == WeightType::q8_0 || T == WeightType::q4_0 || T == WeightType::q4_1 || T == WeightType::q5_0 ||
                  T == WeightType::q5_1) {
        using Block = typename BlockOf<T>::type;
        const std::byte* block = row + b * sizeof(Block);
        Half d_bits;
        std::memcpy(&d_bits, block + offsetof(Block, d), 2);
        out.s = _mm256_set1_ps(_cvtsh_ss(d_bits));
        if constexpr (T == WeightType::q8_0) {
            out.w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + offsetof(Block, qs)));
            out.u = _mm256_sign_epi8(out.w, out.w);
        } else {
            out.u = split_nibbles(block + offsetof(Block, qs));
            if constexpr (T == WeightType::q5_0 || T == WeightType::q5_1) {
                out.u = _mm256_or_si256(out.u, fifth_bits(block + offsetof(Block, qh)));
            }
            if constexpr (has_float_offset(T)) {
                Half m_bits;
                std::memcpy(&m_bits, block + offsetof(Block, m), 2);
                out.o = _mm256_set1_ps(_cvtsh_ss(m_bits));
            }
        }
    } else {
        static_assert(T != T, "the K types go through quant_matmul_tile_k_avx2");
    }
    return out;
}

// R rows x NC columns; per 32-value block: each row's weights decoded once,
// then for each column the integer dot products (maddubs needs one unsigned
// operand: the weights u, or for Q8_0 |w| with the sign moved onto x).
// Column c's block b is at x_values + (c * blocks + b) * 32 with scale x_scales[c * blocks + b].
template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET void quant_matmul_tile_avx2(const WeightMatrix& w, std::size_t row_begin, const std::int8_t* x_values,
                                                const float* x_scales, const std::int32_t* x_offset_sums,
                                                const float* x_lane_sums, std::size_t blocks, float* y, std::size_t y_stride,
                                                bool accumulate) {
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
    // The tiles after this one, prefetched at the pace this one is read (weight_prefetch.hpp).
    const char* next_tile = reinterpret_cast<const char*>(rows[0]) + R * row_bytes;
    constexpr std::size_t tile_block_bytes = R * quant_bytes_per_32(T);
    constexpr int k = integer_offset(T);
    for (std::size_t b = 0; b < blocks; ++b) {
        // A constant number of prefetches per block (a loop of variable
        // length here made GCC keep the accumulators on the stack).
        prefetch_weight_lines<(tile_block_bytes + 63) / 64>(next_tile, R * row_bytes, b * tile_block_bytes);
        Avx2Block wb[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) wb[r] = load_weight_block<T>(rows[r], b);
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
            const std::size_t cb = c * blocks + b;
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_values + cb * kQuantBlock));
            const __m256 dx = _mm256_broadcast_ss(x_scales + cb);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                __m256i dot32;
                if constexpr (T == WeightType::q8_0) {
                    dot32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wb[r].u, _mm256_sign_epi8(xq, wb[r].w)), ones);
                } else {
                    // u <= 63 and |x| <= 127: the pair sums of maddubs cannot saturate.
                    dot32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wb[r].u, xq), ones);
                    if constexpr (k != 0) {
                        const __m256i offsets = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_offset_sums + cb * 8));
                        // offset_sums hold 8 * the lane sums: k = 8, 16, 32 is a shift of 0, 1, 2.
                        dot32 = _mm256_sub_epi32(dot32, k == 8 ? offsets : _mm256_slli_epi32(offsets, k == 16 ? 1 : 2));
                    }
                }
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32), _mm256_mul_ps(wb[r].s, dx), acc[r][c]);
                if constexpr (has_float_offset(T)) {
                    acc[r][c] = _mm256_fmadd_ps(wb[r].o, _mm256_loadu_ps(x_lane_sums + cb * 8), acc[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            const float result = platform::horizontal_sum(acc[r][c]);
            float& out = y[c * y_stride + row_begin + r];
            out = accumulate ? out + result : result;
        }
    }
}

// 8 bytes as 8 floats.
SPECDEC_AVX2_TARGET inline __m256 widen_u8x8(const std::uint32_t* bytes) {
    std::int64_t eight;
    std::memcpy(&eight, bytes, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(eight)));
}

constexpr bool is_k_quant(WeightType t) { return t == WeightType::q4_k || t == WeightType::q5_k || t == WeightType::q6_k; }

// The K types a super-block (8 activation blocks) at a time: the sub-block
// scales (and mins) of each row decoded once per super-block into floats,
// the 8 sub-blocks unrolled so that every bit position is a constant, and
// the mins met once per super-block by the 8 block sums of each column.
template <WeightType T, int R, int NC>
SPECDEC_AVX2_TARGET void quant_matmul_tile_k_avx2(const WeightMatrix& w, std::size_t row_begin, const std::int8_t* x_values,
                                                  const float* x_scales, const std::int32_t* x_offset_sums,
                                                  const float* x_block_sums, std::size_t blocks, float* y, std::size_t y_stride,
                                                  bool accumulate) {
    using Block = typename BlockOf<T>::type;
    constexpr int kScales = T == WeightType::q6_k ? 16 : 8;
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
    const char* next_tile = reinterpret_cast<const char*>(rows[0]) + R * row_bytes;
    alignas(32) float scale[R][kScales];
    alignas(32) float mins[R][8];
    for (std::size_t sb = 0; sb < blocks / 8; ++sb) {
        prefetch_weight_lines<(R * sizeof(Block) + 63) / 64>(next_tile, R * row_bytes, sb * R * sizeof(Block));
        const std::byte* block[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            block[r] = rows[r] + sb * sizeof(Block);
            Half d_bits;
            std::memcpy(&d_bits, block[r] + offsetof(Block, d), 2);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(d_bits));
            if constexpr (T == WeightType::q6_k) {
                const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block[r] + offsetof(Block, scales)));
                _mm256_store_ps(scale[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
                _mm256_store_ps(scale[r] + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
            } else {
                // q4k_scale_min for all 8 sub-blocks at once, 4 bytes per 32-bit word.
                std::uint32_t packed[3], sc[2], mn[2];
                std::memcpy(packed, block[r] + offsetof(Block, scales), 12);
                sc[0] = packed[0] & 0x3F3F3F3Fu;
                mn[0] = packed[1] & 0x3F3F3F3Fu;
                sc[1] = (packed[2] & 0x0F0F0F0Fu) | (((packed[0] >> 6) & 0x03030303u) << 4);
                mn[1] = ((packed[2] >> 4) & 0x0F0F0F0Fu) | (((packed[1] >> 6) & 0x03030303u) << 4);
                Half dmin_bits;
                std::memcpy(&dmin_bits, block[r] + offsetof(Block, dmin), 2);
                const __m256 dmin = _mm256_set1_ps(_cvtsh_ss(dmin_bits));
                _mm256_store_ps(scale[r], _mm256_mul_ps(d, widen_u8x8(sc)));
                // -(dmin * m): the same rounding as the dequantiser's dmin * m, negated.
                _mm256_store_ps(mins[r], _mm256_xor_ps(_mm256_mul_ps(dmin, widen_u8x8(mn)), _mm256_set1_ps(-0.0f)));
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const std::size_t b = 8 * sb + j;
            __m256i u[R];
            __m256 s[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                if constexpr (T == WeightType::q6_k) {
                    const int half = j / 4, p = j % 4;
                    const __m256i ql = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(block[r] + offsetof(Block, ql) + 64 * half + 32 * (p & 1)));
                    const __m256i qh =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block[r] + offsetof(Block, qh) + 32 * half));
                    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (p >> 1)), _mm256_set1_epi8(0x0F));
                    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), _mm256_set1_epi8(0x03));
                    u[r] = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                    s[r] = _mm256_set_m128(_mm_broadcast_ss(&scale[r][2 * j + 1]), _mm_broadcast_ss(&scale[r][2 * j]));
                } else {
                    const __m256i qs =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block[r] + offsetof(Block, qs) + 32 * (j / 2)));
                    u[r] = _mm256_and_si256(_mm256_srli_epi16(qs, 4 * (j % 2)), _mm256_set1_epi8(0x0F));
                    if constexpr (T == WeightType::q5_k) {
                        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block[r] + offsetof(BlockQ5_K, qh)));
                        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(0x01));
                        u[r] = _mm256_or_si256(u[r], _mm256_slli_epi16(bit, 4));
                    }
                    s[r] = _mm256_broadcast_ss(&scale[r][j]);
                }
            }
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                const std::size_t cb = c * blocks + b;
                const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_values + cb * kQuantBlock));
                const __m256 dx = _mm256_broadcast_ss(x_scales + cb);
                __m256i offsets = _mm256_setzero_si256();
                if constexpr (T == WeightType::q6_k) {
                    offsets = _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_offset_sums + cb * 8)), 2);
                }
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    __m256i dot32 = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xq), ones);
                    if constexpr (T == WeightType::q6_k) dot32 = _mm256_sub_epi32(dot32, offsets);
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32), _mm256_mul_ps(s[r], dx), acc[r][c]);
                }
            }
        }
        if constexpr (T != WeightType::q6_k) {
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                const __m256 sums = _mm256_loadu_ps(x_block_sums + c * blocks + 8 * sb);
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(_mm256_load_ps(mins[r]), sums, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            const float result = platform::horizontal_sum(acc[r][c]);
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
        const float* xl = qx.lane_sums.data() + c0 * blocks * 8;
        float* yg = y + c0 * y_stride;
        if constexpr (is_k_quant(T)) {
            const float* xb = qx.block_sums.data() + c0 * blocks;
            switch (std::min<std::size_t>(4, columns - c0)) {
                case 1: quant_matmul_tile_k_avx2<T, R, 1>(w, row_begin, xv, xs, xo, xb, blocks, yg, y_stride, accumulate); break;
                case 2: quant_matmul_tile_k_avx2<T, R, 2>(w, row_begin, xv, xs, xo, xb, blocks, yg, y_stride, accumulate); break;
                case 3: quant_matmul_tile_k_avx2<T, R, 3>(w, row_begin, xv, xs, xo, xb, blocks, yg, y_stride, accumulate); break;
                default: quant_matmul_tile_k_avx2<T, R, 4>(w, row_begin, xv, xs, xo, xb, blocks, yg, y_stride, accumulate); break;
            }
        } else {
            switch (std::min<std::size_t>(4, columns - c0)) {
                case 1: quant_matmul_tile_avx2<T, R, 1>(w, row_begin, xv, xs, xo, xl, blocks, yg, y_stride, accumulate); break;
                case 2: quant_matmul_tile_avx2<T, R, 2>(w, row_begin, xv, xs, xo, xl, blocks, yg, y_stride, accumulate); break;
                case 3: quant_matmul_tile_avx2<T, R, 3>(w, row_begin, xv, xs, xo, xl, blocks, yg, y_stride, accumulate); break;
                default: quant_matmul_tile_avx2<T, R, 4>(w, row_begin, xv, xs, xo, xl, blocks, yg, y_stride, accumulate); break;
            }
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

// Calls f.template operator()<T>() with the block-quantised type of w as a template argument.
template <class F>
decltype(auto) dispatch_quantized(WeightType type, F&& f) {
    switch (type) {
        case WeightType::q8_0: return f.template operator()<WeightType::q8_0>();
        case WeightType::q4_0: return f.template operator()<WeightType::q4_0>();
        case WeightType::q4_1: return f.template operator()<WeightType::q4_1>();
        case WeightType::q5_0: return f.template operator()<WeightType::q5_0>();
        case WeightType::q5_1: return f.template operator()<WeightType::q5_1>();
        case WeightType::q4_k: return f.template operator()<WeightType::q4_k>();
        case WeightType::q5_k: return f.template operator()<WeightType::q5_k>();
        case WeightType::q6_k: return f.template operator()<WeightType::q6_k>();
        default: break;
    }
    throw Error(std::string("weight type ") + weight_type_name(type) + " is not block-quantised; expected one of Q8_0, Q4_0, "
                "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
}

// Rows [row_begin, row_end) of a block-quantised matrix times the quantised columns.
inline void quant_matmul_rows(const WeightMatrix& w, std::size_t row_begin, std::size_t row_end, const Q8Activations& qx,
                              std::size_t columns, float* y, std::size_t y_stride, bool accumulate) {
#if SPECDEC_X86
    if (platform::avx2_available()) {
        return dispatch_quantized(w.type, [&]<WeightType T>() {
            quant_matmul_rows_avx2<T>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
        });
    }
#endif
    dispatch_quantized(w.type, [&]<WeightType T>() {
        quant_matmul_rows_scalar<T>(w, row_begin, row_end, qx, columns, y, y_stride, accumulate);
    });
}

}  // namespace detail
}  // namespace specdec::cpu
