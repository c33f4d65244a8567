#pragma once
// How logits become the distribution that tokens are drawn from. The same
// options are applied to draft and target rows, so the exactness guarantee of
// speculative decoding is about this *processed* target distribution.
#include <cmath>
#include <cstddef>
#include <sstream>

#include "specdec/core/error.hpp"

namespace specdec {

// The processed distribution, in this order:
//  1. temperature T > 0: p = softmax(logits / T). Any finite T > 0 is valid: as
//     T -> 0 (even when 1 / T overflows, e.g. T = 1e-39) p tends to the uniform
//     distribution over the tokens of maximal logit, which is a point mass on
//     the argmax when it is unique. T = 0 is greedy decoding: a point mass on
//     the argmax, ties to the lowest id.
//  2. Candidates are ranked by decreasing p, ties by increasing token id.
//  3. top_k: only the top_k first-ranked tokens remain candidates.
//  4. top_p: of the remaining candidates, the shortest ranked prefix whose mass
//     reaches top_p (cumulative p >= top_p) is kept. The mass is that of p from
//     step 1, NOT renormalised after top_k: with top_k set, the candidates'
//     mass can stay below top_p, and then all of them are kept.
//  5. min_p: of those, the tokens with p >= min_p * (the largest p) are kept.
//  6. The kept tokens' probabilities are renormalised to sum to 1.
// The same options are applied to the draft's and the target's rows.
struct SamplingOptions {
    double temperature = 1.0;  // 0 means greedy (argmax, ties to the lowest id); see 1. above
    std::size_t top_k = 0;     // keep the k most probable tokens; 0 (or >= vocab) = off
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
