#pragma once
// exp() for softmax over a whole vocabulary. std::exp does not vectorise
// without -ffast-math, and a 32000-token softmax per row would then cost as
// much as a small model's forward pass. This branch-free version (range
// reduction to 2^n * e^r, degree-6 polynomial on |r| <= ln2/2, relative error
// about 2e-7) auto-vectorises at -O2/-O3.
#include <bit>
#include <cmath>
#include <cstdint>

namespace specdec::detail {

inline float exp_nonpositive(float x) {
    // Below -87, e^x is under FLT_MIN: report an exact 0 (this also maps -inf,
    // a masked logit, to probability 0).
    const bool underflow = !(x >= -87.0f);
    const float clamped = underflow ? -87.0f : x;
    const float n = std::floor(clamped * 1.44269504088896341f + 0.5f);
    // Cody-Waite split of ln 2 keeps r accurate.
    const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
    float poly = 1.9875691500e-4f;
    poly = poly * r + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    const float e_r = poly * r * r + r + 1.0f;
    const float two_n = std::bit_cast<float>(static_cast<std::int32_t>(n + 127.0f) << 23);
    return underflow ? 0.0f : e_r * two_n;
}

}  // namespace specdec::detail
