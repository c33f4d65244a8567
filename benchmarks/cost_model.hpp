#pragma once
// The analytic cost model of speculative decoding (Leviathan, Kalman & Matias,
// "Fast Inference from Transformers via Speculative Decoding", 2022, §3.3-3.4),
// fed with quantities measured in the same run, so that the benchmark can say
// how close the implementation gets to what the model promises.
//
// With per-token acceptance probability alpha (drafts accepted independently),
// one step of k drafts emits on average
//     E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) = 1 + alpha + ... + alpha^k
// tokens. The step costs k draft forwards (c each, relative to one 1-token
// target forward) and one target forward over k+1 tokens (v_k relative to a
// 1-token target forward; Leviathan assume v_k = 1, which holds only while the
// target is memory-bound). The predicted speedup over autoregressive decoding
// is therefore
//     S(k) = E(alpha, k) / (k * c + v_k).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/decoding/acceptance_estimate.hpp"

namespace specdec::bench {

inline constexpr std::string_view kPredictedSpeedupFormula =
    "predicted_speedup = E / (k*c + v_k), E = (1 - alpha^(k+1)) / (1 - alpha); alpha = per-token acceptance, "
    "c = draft forward / target forward (1 token), v_k = target forward of k+1 tokens / target forward of 1 token";

// Expected tokens emitted per target pass: the adaptive policies' chain
// formula (decoding/acceptance_estimate.hpp) with one alpha at every position,
// summed rather than closed so that alpha -> 1 (closed form 0/0) gives k + 1.
[[nodiscard]] inline double expected_tokens_per_pass(double alpha, std::size_t draft_tokens) {
    if (!(alpha >= 0.0 && alpha <= 1.0)) throw std::invalid_argument("acceptance alpha must lie in [0, 1]");
    return chain_expected_tokens(draft_tokens, [alpha](std::size_t) { return alpha; });
}

[[nodiscard]] inline double predicted_speedup(double alpha, std::size_t draft_tokens, double cost_ratio,
                                              double verification_cost_ratio) {
    if (!(cost_ratio >= 0.0) || !std::isfinite(cost_ratio)) throw std::invalid_argument("cost ratio c must be >= 0");
    if (!(verification_cost_ratio > 0.0) || !std::isfinite(verification_cost_ratio))
        throw std::invalid_argument("verification cost ratio v_k must be > 0");
    const double step_cost = static_cast<double>(draft_tokens) * cost_ratio + verification_cost_ratio;
    return expected_tokens_per_pass(alpha, draft_tokens) / step_cost;
}

// The per-token acceptance alpha of the model above: accepted / tested,
// where draft i is *tested* in the steps whose drafts 0..i-1 were all kept
// (the decoder counts them: GenerationStats::tested_at_position). accepted /
// proposed, the decoder's acceptance_rate(), is smaller for k > 1 because
// untested drafts count as rejected.
[[nodiscard]] inline double per_token_acceptance(std::span<const std::size_t> tested_at_position,
                                                 std::span<const std::size_t> accepted_at_position) {
    std::size_t accepted = 0;
    std::size_t tested = 0;
    for (std::size_t i = 0; i < tested_at_position.size() && i < accepted_at_position.size(); ++i) {
        tested += tested_at_position[i];
        accepted += accepted_at_position[i];
    }
    return tested == 0 ? 0.0 : static_cast<double>(accepted) / static_cast<double>(tested);
}

// Acceptance of draft i given that drafts 0..i-1 were accepted: flat if the
// draft is equally good at every depth (the model's assumption).
[[nodiscard]] inline std::vector<double> conditional_acceptance_at_position(
    std::span<const std::size_t> tested_at_position, std::span<const std::size_t> accepted_at_position) {
    std::vector<double> rates;
    for (std::size_t i = 0; i < tested_at_position.size() && i < accepted_at_position.size(); ++i)
        rates.push_back(tested_at_position[i] == 0 ? 0.0
                                                   : static_cast<double>(accepted_at_position[i]) /
                                                         static_cast<double>(tested_at_position[i]));
    return rates;
}

}  // namespace specdec::bench
