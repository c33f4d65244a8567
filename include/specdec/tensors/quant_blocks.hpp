#pragma once
// The GGML block layouts for 8-bit and 4-bit weights (bit-compatible with
// llama.cpp's Q8_0 and Q4_0, so GGUF data is used in place) and their scalar
// quantise / dequantise routines. A block covers 32 consecutive values of a row
// and carries one F16 scale `d`; value = d * q.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "specdec/tensors/half.hpp"

namespace specdec::cpu {

inline constexpr std::size_t kQuantBlock = 32;

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

inline void quantize_block_q8_0(const float* values, BlockQ8_0& block) noexcept {
    float amax = 0.0f;
    for (std::size_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(values[i]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
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
    const float d = extreme / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
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

}  // namespace specdec::cpu
