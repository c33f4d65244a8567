#pragma once
// How logits become the distribution that tokens are drawn from. The same
// options are applied to draft and target rows, so the exactness guarantee of
// speculative decoding is about this *processed* target distribution.
#include <cmath>
#include <cstddef>
#include <sstream>

#include "specdec/core/error.hpp"

namespace specdec {

struct SamplingOptions {
    double temperature = 1.0;  // 0 means greedy (argmax, ties to the lowest id)
    std::size_t top_k = 0;     // keep the k most probable tokens; 0 = off
    double top_p = 1.0;        // keep the smallest set whose mass reaches top_p; 1 = off
    double min_p = 0.0;        // keep tokens with probability >= min_p * max probability; 0 = off

    [[nodiscard]] bool greedy() const { return temperature == 0.0; }
};

// Throws specdec::Error naming the first nonsensical option.
inline void validate(const SamplingOptions& options) {
    auto fail = [](const char* name, double value, const char* expected) {
        std::ostringstream message;
        message << "invalid sampling option " << name << " = " << value << ": expected " << expected;
        throw Error(message.str());
    };
    if (!std::isfinite(options.temperature) || options.temperature < 0.0)
        fail("temperature", options.temperature, "a finite value >= 0 (0 = greedy)");
    if (!(options.top_p > 0.0 && options.top_p <= 1.0)) fail("top_p", options.top_p, "a value in (0, 1]");
    if (!(options.min_p >= 0.0 && options.min_p <= 1.0)) fail("min_p", options.min_p, "a value in [0, 1]");
}

}  // namespace specdec
