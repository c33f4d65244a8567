#pragma once
// IEEE binary16 (F16) and bfloat16 (BF16) storage conversions, bit-exact with
// round-to-nearest-even, so weights written by the synthetic generator and by
// llama.cpp decode to the same floats on every CPU.
#include <bit>
#include <cstdint>
#include <cstring>

namespace specdec::cpu {

using Half = std::uint16_t;      // IEEE binary16 bits
using BFloat16 = std::uint16_t;  // upper 16 bits of an IEEE binary32

[[nodiscard]] inline float half_to_float(Half h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1Fu;
    std::uint32_t mantissa = h & 0x3FFu;
    std::uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);  // inf / nan
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        // Subnormal half: normalise into a binary32 normal number.
        int shift = 0;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            ++shift;
        }
        mantissa &= 0x3FFu;
        bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13);
    }
    return std::bit_cast<float>(bits);
}

[[nodiscard]] inline Half float_to_half(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
    if (abs_bits >= 0x7F800000u) {  // inf or nan
        return static_cast<Half>(sign | 0x7C00u | (abs_bits > 0x7F800000u ? 0x200u : 0u));
    }
    if (abs_bits >= 0x477FF000u) return static_cast<Half>(sign | 0x7C00u);  // rounds to >= 65520: overflow
    if (abs_bits < 0x38800000u) {
        // Result is subnormal or zero: add the magic 0.5 so the FPU rounds for us.
        const float magic = std::bit_cast<float>(0x3F000000u);  // 0.5
        const float shifted = std::bit_cast<float>(abs_bits) + magic;
        return static_cast<Half>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3F000000u));
    }
    const std::uint32_t mantissa_odd = (abs_bits >> 13) & 1u;
    std::uint32_t rounded = abs_bits + 0xC8000FFFu + mantissa_odd;  // rebias exponent (-112 << 23) and round
    return static_cast<Half>(sign | (rounded >> 13));
}

[[nodiscard]] inline float bf16_to_float(BFloat16 b) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

[[nodiscard]] inline BFloat16 float_to_bf16(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<BFloat16>((bits >> 16) | 0x40u);  // quiet nan
    const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<BFloat16>((bits + rounding) >> 16);
}

}  // namespace specdec::cpu
