#pragma once
// The GGML block layouts of quantised weights, bit-compatible with llama.cpp's
// so that GGUF data is used in place, and their scalar quantise / dequantise
// routines. Two families:
//   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1   blocks of 32 values with an F16 scale `d`
//                                  (and an F16 offset `m` for the _1 types):
//                                  value = d * q (+ m)
//   Q4_K, Q5_K, Q6_K               super-blocks of 256 values whose sub-blocks
//                                  (32 values; 16 for Q6_K) carry small integer
//                                  scales (and mins) relative to F16 super-scales:
//                                  value = (d * sc) * q - (dmin * m)
// The dequantisers evaluate exactly these float expressions, in this order and
// without fused multiply-adds, so they reproduce ggml's values bit for bit.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "specdec/tensors/half.hpp"

namespace specdec::cpu {

// Values per block of the 32-value types, and per super-block of the K types.
inline constexpr std::size_t kQuantBlock = 32;
inline constexpr std::size_t kSuperBlock = 256;

// Blocks whose largest magnitude is below this are quantised to zeros: the
// reciprocal of their scale would overflow to inf, and inf * 0 is NaN.
inline constexpr float kQuantTinyMagnitude = 1e-30f;

namespace detail {

// True when every one of the block's values is finite.
inline bool block_is_finite(const float* values) noexcept {
    bool finite = true;
    for (std::size_t i = 0; i < kQuantBlock; ++i) finite &= std::fabs(values[i]) <= std::numeric_limits<float>::max();
    return finite;
}

}  // namespace detail

struct BlockQ8_0 {
    Half d;
    std::int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0 packs value j (0..15) in the low nibble of qs[j] and value j+16 in its
// high nibble; nibbles are stored with an offset of 8.
struct BlockQ4_0 {
    Half d;
    std::uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: the nibbles of Q4_0 without the offset of 8; value = d * q + m.
struct BlockQ4_1 {
    Half d;
    Half m;
    std::uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: Q4_0's nibbles plus a fifth bit per value (bit i of the little-endian
// 32-bit qh belongs to value i); value = d * (q - 16).
struct BlockQ5_0 {
    Half d;
    std::uint8_t qh[4];
    std::uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: the 5-bit values of Q5_0 without the offset; value = d * q + m.
struct BlockQ5_1 {
    Half d;
    Half m;
    std::uint8_t qh[4];
    std::uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (see
// q4k_scale_min). Sub-blocks 2k and 2k+1 share the 32 bytes qs[32k..32k+32):
// value l of sub-block 2k is the low nibble of qs[32k + l], of 2k+1 the high one.
struct BlockQ4_K {
    Half d;
    Half dmin;
    std::uint8_t scales[12];
    std::uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a fifth bit: bit j of qh[l] belongs to value l of sub-block j.
struct BlockQ5_K {
    Half d;
    Half dmin;
    std::uint8_t scales[12];
    std::uint8_t qh[kSuperBlock / 8];
    std::uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; value = (d * sc) * (q - 32)
// with 6-bit q. Each half of 128 values has 64 bytes of low nibbles and 32 of
// high bit pairs: value 32 p + l (p in 0..3, l < 32) of the half is the
// nibble (p >> 1) of ql[l + 32 (p & 1)] with the bits 2p, 2p+1 of qh[l] on top.
struct BlockQ6_K {
    std::uint8_t ql[kSuperBlock / 2];
    std::uint8_t qh[kSuperBlock / 4];
    std::int8_t scales[kSuperBlock / 16];
    Half d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// A block holding NaN or inf is stored as zeros with a NaN scale, so that it
// dequantises to NaN (a float -> int conversion of NaN would be undefined).
inline void quantize_block_q8_0(const float* values, BlockQ8_0& block) noexcept {
    float amax = 0.0f;
    for (std::size_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(values[i]));
    if (!detail::block_is_finite(values) || amax < kQuantTinyMagnitude) {
        block.d = float_to_half(detail::block_is_finite(values) ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        std::fill(std::begin(block.qs), std::end(block.qs), std::int8_t{0});
        return;
    }
    const float d = amax / 127.0f;
    const float inverse = 1.0f / d;
    block.d = float_to_half(d);
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
        block.qs[i] = static_cast<std::int8_t>(std::lround(values[i] * inverse));
    }
}

// Like ggml: the scale takes the sign of the largest-magnitude value so that
// this value maps exactly to -8, using the full asymmetric range [-8, 7].
inline void quantize_block_q4_0(const float* values, BlockQ4_0& block) noexcept {
    float amax = 0.0f, extreme = 0.0f;
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
        if (std::fabs(values[i]) > amax) {
            amax = std::fabs(values[i]);
            extreme = values[i];
        }
    }
    if (!detail::block_is_finite(values) || amax < kQuantTinyMagnitude) {
        block.d = float_to_half(detail::block_is_finite(values) ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        std::fill(std::begin(block.qs), std::end(block.qs), std::uint8_t{0x88});  // every nibble 8, the code of 0
        return;
    }
    const float d = extreme / -8.0f;
    const float inverse = 1.0f / d;
    block.d = float_to_half(d);
    auto code = [&](float v) {
        const int q = static_cast<int>(v * inverse + 8.5f);
        return static_cast<std::uint8_t>(std::clamp(q, 0, 15));
    };
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        block.qs[j] = static_cast<std::uint8_t>(code(values[j]) | (code(values[j + kQuantBlock / 2]) << 4));
    }
}

inline void dequantize_block_q8_0(const BlockQ8_0& block, float* out) noexcept {
    const float d = half_to_float(block.d);
    for (std::size_t i = 0; i < kQuantBlock; ++i) out[i] = d * static_cast<float>(block.qs[i]);
}

inline void dequantize_block_q4_0(const BlockQ4_0& block, float* out) noexcept {
    const float d = half_to_float(block.d);
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        out[j] = d * static_cast<float>((block.qs[j] & 0x0F) - 8);
        out[j + kQuantBlock / 2] = d * static_cast<float>((block.qs[j] >> 4) - 8);
    }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block:
// sub-blocks 0-3 keep theirs in the low 6 bits of bytes j and j + 4; 4-7 in
// the nibbles of byte j + 4 with their top two bits in the spare high bits of
// bytes j - 4 and j.
inline void q4k_scale_min(std::size_t j, const std::uint8_t* scales, std::uint8_t& scale, std::uint8_t& min) noexcept {
    if (j < 4) {
        scale = scales[j] & 63;
        min = scales[j + 4] & 63;
    } else {
        scale = static_cast<std::uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
        min = static_cast<std::uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

inline void pack_q4k_scales(const std::uint8_t* scale, const std::uint8_t* min, std::uint8_t* scales) noexcept {
    for (std::size_t j = 0; j < 4; ++j) {
        scales[j] = static_cast<std::uint8_t>(scale[j] | ((scale[j + 4] >> 4) << 6));
        scales[j + 4] = static_cast<std::uint8_t>(min[j] | ((min[j + 4] >> 4) << 6));
        scales[j + 8] = static_cast<std::uint8_t>((scale[j + 4] & 0x0F) | ((min[j + 4] & 0x0F) << 4));
    }
}

inline void dequantize_block_q4_1(const BlockQ4_1& block, float* out) noexcept {
    const float d = half_to_float(block.d), m = half_to_float(block.m);
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        out[j] = d * static_cast<float>(block.qs[j] & 0x0F) + m;
        out[j + kQuantBlock / 2] = d * static_cast<float>(block.qs[j] >> 4) + m;
    }
}

namespace detail {
inline std::uint32_t load_u32_le(const std::uint8_t* bytes) noexcept {
    return static_cast<std::uint32_t>(bytes[0]) | static_cast<std::uint32_t>(bytes[1]) << 8 |
           static_cast<std::uint32_t>(bytes[2]) << 16 | static_cast<std::uint32_t>(bytes[3]) << 24;
}
// The 32 unsigned 5-bit values of a Q5_0 / Q5_1 block.
inline void q5_values(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int* out) noexcept {
    const std::uint32_t qh = load_u32_le(qh_bytes);
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        out[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        out[j + kQuantBlock / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    }
}
}  // namespace detail

inline void dequantize_block_q5_0(const BlockQ5_0& block, float* out) noexcept {
    const float d = half_to_float(block.d);
    int q[kQuantBlock];
    detail::q5_values(block.qh, block.qs, q);
    for (std::size_t i = 0; i < kQuantBlock; ++i) out[i] = d * static_cast<float>(q[i] - 16);
}

inline void dequantize_block_q5_1(const BlockQ5_1& block, float* out) noexcept {
    const float d = half_to_float(block.d), m = half_to_float(block.m);
    int q[kQuantBlock];
    detail::q5_values(block.qh, block.qs, q);
    for (std::size_t i = 0; i < kQuantBlock; ++i) out[i] = d * static_cast<float>(q[i]) + m;
}

inline void dequantize_block_q4_k(const BlockQ4_K& block, float* out) noexcept {
    const float d = half_to_float(block.d), dmin = half_to_float(block.dmin);
    for (std::size_t j = 0; j < 8; ++j) {
        std::uint8_t sc, mn;
        q4k_scale_min(j, block.scales, sc, mn);
        const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(mn);
        const std::uint8_t* qs = block.qs + 32 * (j / 2);
        const int shift = 4 * static_cast<int>(j % 2);
        for (std::size_t l = 0; l < 32; ++l) out[32 * j + l] = scale * static_cast<float>((qs[l] >> shift) & 0x0F) - min;
    }
}

inline void dequantize_block_q5_k(const BlockQ5_K& block, float* out) noexcept {
    const float d = half_to_float(block.d), dmin = half_to_float(block.dmin);
    for (std::size_t j = 0; j < 8; ++j) {
        std::uint8_t sc, mn;
        q4k_scale_min(j, block.scales, sc, mn);
        const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(mn);
        const std::uint8_t* qs = block.qs + 32 * (j / 2);
        const int shift = 4 * static_cast<int>(j % 2);
        for (std::size_t l = 0; l < 32; ++l) {
            const int q = ((qs[l] >> shift) & 0x0F) | (((block.qh[l] >> j) & 1) << 4);
            out[32 * j + l] = scale * static_cast<float>(q) - min;
        }
    }
}

// The unsigned 6-bit value i (0..255) of a Q6_K super-block.
inline int q6k_value(const BlockQ6_K& block, std::size_t i) noexcept {
    const std::size_t half = i / 128, p = (i % 128) / 32, l = i % 32;
    const int low = (block.ql[64 * half + l + 32 * (p & 1)] >> (4 * (p >> 1))) & 0x0F;
    const int high = (block.qh[32 * half + l] >> (2 * p)) & 3;
    return low | (high << 4);
}

inline void dequantize_block_q6_k(const BlockQ6_K& block, float* out) noexcept {
    const float d = half_to_float(block.d);
    for (std::size_t i = 0; i < kSuperBlock; ++i) {
        const float scale = d * static_cast<float>(block.scales[i / 16]);
        out[i] = scale * static_cast<float>(q6k_value(block, i) - 32);
    }
}

// Quantisers for the synthetic models and tests: round to nearest on the
// block's range (llama.cpp's quantiser additionally searches scales that
// minimise the weighted error; its files are read, never re-quantised here).
namespace detail {
inline int round_clamp(float v, int lo, int hi) noexcept {
    return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}
// d and m of a "value = d * q + m" block over [lo, hi] with `levels` codes.
inline void affine_range(const float* values, std::size_t count, float& lo, float& hi) noexcept {
    lo = values[0];
    hi = values[0];
    for (std::size_t i = 1; i < count; ++i) {
        lo = std::min(lo, values[i]);
        hi = std::max(hi, values[i]);
    }
}
inline void pack_q5_high_bits(const int* q, std::uint8_t* qh, std::uint8_t* qs) noexcept {
    std::uint32_t bits = 0;
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + kQuantBlock / 2] & 0x0F) << 4));
        bits |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
        bits |= static_cast<std::uint32_t>((q[j + kQuantBlock / 2] >> 4) & 1) << (j + 16);
    }
    for (std::size_t b = 0; b < 4; ++b) qh[b] = static_cast<std::uint8_t>(bits >> (8 * b));
}
// Codes 0..levels-1 of a "value = d * q + m" block, with d and m as stored (F16).
inline void affine_codes(const float* values, std::size_t count, int levels, Half& d_bits, Half& m_bits, int* q) noexcept {
    float lo, hi;
    affine_range(values, count, lo, hi);
    d_bits = float_to_half((hi - lo) / static_cast<float>(levels - 1));
    m_bits = float_to_half(lo);
    const float d = half_to_float(d_bits), m = half_to_float(m_bits);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (std::size_t i = 0; i < count; ++i) q[i] = round_clamp((values[i] - m) * inverse, 0, levels - 1);
}
}  // namespace detail

inline void quantize_block_q4_1(const float* values, BlockQ4_1& block) noexcept {
    int q[kQuantBlock];
    detail::affine_codes(values, kQuantBlock, 16, block.d, block.m, q);
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) block.qs[j] = static_cast<std::uint8_t>(q[j] | (q[j + kQuantBlock / 2] << 4));
}

inline void quantize_block_q5_1(const float* values, BlockQ5_1& block) noexcept {
    int q[kQuantBlock];
    detail::affine_codes(values, kQuantBlock, 32, block.d, block.m, q);
    detail::pack_q5_high_bits(q, block.qh, block.qs);
}

// Like Q4_0: the largest-magnitude value maps exactly to -16.
inline void quantize_block_q5_0(const float* values, BlockQ5_0& block) noexcept {
    float amax = 0.0f, extreme = 0.0f;
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
        if (std::fabs(values[i]) > amax) {
            amax = std::fabs(values[i]);
            extreme = values[i];
        }
    }
    block.d = float_to_half(extreme / -16.0f);
    const float d = half_to_float(block.d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    int q[kQuantBlock];
    for (std::size_t i = 0; i < kQuantBlock; ++i) q[i] = detail::round_clamp(values[i] * inverse, -16, 15) + 16;
    detail::pack_q5_high_bits(q, block.qh, block.qs);
}

namespace detail {
// Q4_K / Q5_K: per sub-block of 32 an affine range with min <= 0, the scales
// and mins rounded to 6 bits relative to the super-block's d and dmin, then
// each value coded against its sub-block's decoded scale and min.
template <int Levels>
inline void quantize_k_affine(const float* values, Half& d_bits, Half& dmin_bits, std::uint8_t* packed_scales, int* q) noexcept {
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
    for (std::size_t j = 0; j < 8; ++j) {
        float lo, hi;
        affine_range(values + 32 * j, 32, lo, hi);
        lo = std::min(lo, 0.0f);
        scale[j] = (hi - lo) / static_cast<float>(Levels - 1);
        min[j] = -lo;
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, min[j]);
    }
    d_bits = float_to_half(max_scale / 63.0f);
    dmin_bits = float_to_half(max_min / 63.0f);
    const float d = half_to_float(d_bits), dmin = half_to_float(dmin_bits);
    std::uint8_t sc[8], mn[8];
    for (std::size_t j = 0; j < 8; ++j) {
        sc[j] = static_cast<std::uint8_t>(d != 0.0f ? round_clamp(scale[j] / d, 0, 63) : 0);
        mn[j] = static_cast<std::uint8_t>(dmin != 0.0f ? round_clamp(min[j] / dmin, 0, 63) : 0);
        const float step = d * static_cast<float>(sc[j]), offset = dmin * static_cast<float>(mn[j]);
        const float inverse = step != 0.0f ? 1.0f / step : 0.0f;
        for (std::size_t l = 0; l < 32; ++l) q[32 * j + l] = round_clamp((values[32 * j + l] + offset) * inverse, 0, Levels - 1);
    }
    pack_q4k_scales(sc, mn, packed_scales);
}
}  // namespace detail

inline void quantize_block_q4_k(const float* values, BlockQ4_K& block) noexcept {
    int q[kSuperBlock];
    detail::quantize_k_affine<16>(values, block.d, block.dmin, block.scales, q);
    for (std::size_t k = 0; k < 4; ++k) {
        for (std::size_t l = 0; l < 32; ++l) block.qs[32 * k + l] = static_cast<std::uint8_t>(q[64 * k + l] | (q[64 * k + 32 + l] << 4));
    }
}

inline void quantize_block_q5_k(const float* values, BlockQ5_K& block) noexcept {
    int q[kSuperBlock];
    detail::quantize_k_affine<32>(values, block.d, block.dmin, block.scales, q);
    for (std::size_t k = 0; k < 4; ++k) {
        for (std::size_t l = 0; l < 32; ++l) {
            block.qs[32 * k + l] = static_cast<std::uint8_t>((q[64 * k + l] & 0x0F) | ((q[64 * k + 32 + l] & 0x0F) << 4));
        }
    }
    for (std::size_t l = 0; l < 32; ++l) {
        std::uint8_t bits = 0;
        for (std::size_t j = 0; j < 8; ++j) bits |= static_cast<std::uint8_t>(((q[32 * j + l] >> 4) & 1) << j);
        block.qh[l] = bits;
    }
}

// Q6_K: per sub-block of 16 a signed scale that maps its largest-magnitude
// value to -32, rounded to 8 bits relative to the super-block's d.
inline void quantize_block_q6_k(const float* values, BlockQ6_K& block) noexcept {
    float scale[16], max_scale = 0.0f;
    for (std::size_t g = 0; g < 16; ++g) {
        float amax = 0.0f, extreme = 0.0f;
        for (std::size_t i = 0; i < 16; ++i) {
            if (std::fabs(values[16 * g + i]) > amax) {
                amax = std::fabs(values[16 * g + i]);
                extreme = values[16 * g + i];
            }
        }
        scale[g] = extreme / -32.0f;
        max_scale = std::max(max_scale, std::fabs(scale[g]));
    }
    block.d = float_to_half(max_scale / 127.0f);
    const float d = half_to_float(block.d);
    int q[kSuperBlock];
    for (std::size_t g = 0; g < 16; ++g) {
        block.scales[g] = static_cast<std::int8_t>(d != 0.0f ? detail::round_clamp(scale[g] / d, -127, 127) : 0);
        const float step = d * static_cast<float>(block.scales[g]);
        const float inverse = step != 0.0f ? 1.0f / step : 0.0f;
        for (std::size_t i = 0; i < 16; ++i) q[16 * g + i] = detail::round_clamp(values[16 * g + i] * inverse, -32, 31) + 32;
    }
    for (std::size_t half = 0; half < 2; ++half) {
        for (std::size_t l = 0; l < 32; ++l) {
            const int* v = q + 128 * half + l;  // v[32 p] is value 32 p + l of this half
            block.ql[64 * half + l] = static_cast<std::uint8_t>((v[0] & 0x0F) | ((v[64] & 0x0F) << 4));
            block.ql[64 * half + l + 32] = static_cast<std::uint8_t>((v[32] & 0x0F) | ((v[96] & 0x0F) << 4));
            block.qh[32 * half + l] =
                static_cast<std::uint8_t>((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
        }
    }
}

}  // namespace specdec::cpu
