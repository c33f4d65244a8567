#pragma once
// From one logits row to a sampling distribution, and drawing from it. Every
// decoder and drafter goes through these functions, so draft and target rows
// are processed identically.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/fast_exp.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

namespace detail {

// "<who> logits" or "<who> logits at position <n>": which model's row, and the
// sequence position of the token that row predicts, when the caller knows it.
inline void describe_row(std::ostringstream& message, std::string_view who, std::optional<std::uint64_t> position) {
    message << who << " logits";
    if (position) message << " at position " << *position;
}

[[noreturn]] inline void throw_bad_logit(std::string_view who, std::span<const float> logits,
                                         std::optional<std::uint64_t> position) {
    std::ostringstream message;
    describe_row(message, who, position);
    for (std::size_t i = 0; i < logits.size(); ++i) {
        const float value = logits[i];
        if (std::isnan(value) || value == std::numeric_limits<float>::infinity()) {
            message << " contain " << (std::isnan(value) ? "NaN" : "+inf") << " at token " << i
                    << ": expected finite values (or -inf for masked tokens)";
            throw Error(message.str());
        }
    }
    message << " are -inf for every one of the " << logits.size() << " tokens: no token can be sampled";
    throw Error(message.str());
}

// The largest logit, after checking the row: NaN and +inf are errors, -inf
// (a masked token) is allowed unless every token is masked.
inline float checked_max_logit(std::span<const float> logits, std::string_view who,
                               std::optional<std::uint64_t> position = std::nullopt) {
    float max_value = -std::numeric_limits<float>::infinity();
    bool bad = false;
    for (const float value : logits) {
        bad |= (value != value) | (value == std::numeric_limits<float>::infinity());
        max_value = value > max_value ? value : max_value;
    }
    if (bad || max_value == -std::numeric_limits<float>::infinity()) throw_bad_logit(who, logits, position);
    return max_value;
}

}  // namespace detail

// Argmax with ties going to the lowest token id; NaN/+inf logits are an error
// whose message names `who` and, when given, the position the row predicts.
[[nodiscard]] inline Token greedy_token(std::span<const float> logits, std::string_view who = "model",
                                        std::optional<std::uint64_t> position = std::nullopt) {
    const float max_value = detail::checked_max_logit(logits, who, position);
    for (std::size_t i = 0; i < logits.size(); ++i)
        if (logits[i] == max_value) return static_cast<Token>(i);
    return 0;  // unreachable: max_value is one of the logits
}

// Writes the sampling distribution for `logits` into `probabilities` (same
// size): softmax(logits / temperature), then top-k, top-p and min-p filtering,
// renormalised. Greedy options produce a point mass on the argmax.
inline void logits_to_distribution(std::span<const float> logits, const SamplingOptions& options,
                                   std::span<float> probabilities, std::string_view who = "model",
                                   std::optional<std::uint64_t> position = std::nullopt) {
    const std::size_t vocab = logits.size();
    if (probabilities.size() != vocab) throw Error("logits_to_distribution: output size differs from the vocabulary");
    if (options.greedy()) {
        const Token best = greedy_token(logits, who, position);
        std::fill(probabilities.begin(), probabilities.end(), 0.0f);
        probabilities[static_cast<std::size_t>(best)] = 1.0f;
        return;
    }
    const float max_logit = detail::checked_max_logit(logits, who, position);
    const float inverse_temperature = static_cast<float>(1.0 / options.temperature);
    float total = 0.0f;
    for (std::size_t i = 0; i < vocab; ++i) {
        // The maximum gets exp(0) = 1 without the product: at a temperature so
        // small that 1 / T overflows to inf, 0 * inf would be NaN and the row
        // would have no mass (the limit T -> 0 is the uniform distribution over
        // the tied maxima, which this gives).
        const float scaled = logits[i] == max_logit ? 0.0f : (logits[i] - max_logit) * inverse_temperature;
        const float e = detail::exp_nonpositive(scaled);
        probabilities[i] = e;
        total += e;
    }
    // total >= 1: the max logit contributes exp(0) = 1.
    float scale = 1.0f / total;
    for (std::size_t i = 0; i < vocab; ++i) probabilities[i] *= scale;

    const bool use_top_k = options.top_k > 0 && options.top_k < vocab;
    const bool use_top_p = options.top_p < 1.0;
    const bool use_min_p = options.min_p > 0.0;
    if (!use_top_k && !use_top_p && !use_min_p) return;

    // Candidates in decreasing probability, ties by increasing id, so that the
    // filtered set is a deterministic function of the row.
    std::vector<Token> order(vocab);
    std::iota(order.begin(), order.end(), Token{0});
    auto more_probable = [&](Token a, Token b) {
        const float pa = probabilities[static_cast<std::size_t>(a)], pb = probabilities[static_cast<std::size_t>(b)];
        return pa > pb || (pa == pb && a < b);
    };
    std::size_t kept = vocab;
    if (use_top_k) {
        std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(options.top_k) - 1, order.end(),
                         more_probable);
        kept = options.top_k;
    }
    if (use_top_p || use_min_p) {
        std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), more_probable);
    }
    if (use_top_p) {
        double cumulative = 0.0;
        std::size_t needed = 0;
        while (needed < kept) {
            cumulative += probabilities[static_cast<std::size_t>(order[needed])];
            ++needed;
            if (cumulative >= options.top_p) break;
        }
        kept = needed;
    }
    if (use_min_p) {
        const double threshold = options.min_p * probabilities[static_cast<std::size_t>(order[0])];
        std::size_t needed = 1;
        while (needed < kept && probabilities[static_cast<std::size_t>(order[needed])] >= threshold) ++needed;
        kept = needed;
    }
    std::vector<float> kept_probabilities(kept);
    double kept_mass = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
        kept_probabilities[i] = probabilities[static_cast<std::size_t>(order[i])];
        kept_mass += kept_probabilities[i];
    }
    std::fill(probabilities.begin(), probabilities.end(), 0.0f);
    for (std::size_t i = 0; i < kept; ++i)
        probabilities[static_cast<std::size_t>(order[i])] = static_cast<float>(kept_probabilities[i] / kept_mass);
}

// Inverse-CDF draw with a uniform u in [0, 1). Never returns a token of
// probability 0, even when rounding leaves u beyond the accumulated mass.
// A NaN, an infinite or a negative probability is an error, as is u outside [0, 1).
[[nodiscard]] inline Token sample_from_distribution(std::span<const float> probabilities, double u) {
    double total = 0.0;
    bool valid = true;
    for (const float p : probabilities) {
        total += p;
        valid &= p >= 0.0f && p <= std::numeric_limits<float>::max();  // false for NaN
    }
    if (!valid || !(total <= std::numeric_limits<double>::max())) {
        for (std::size_t i = 0; i < probabilities.size(); ++i) {
            const float p = probabilities[i];
            if (!(p >= 0.0f && p <= std::numeric_limits<float>::max())) {
                std::ostringstream message;
                message << "cannot sample: probability " << p << " of token " << i
                        << ": expected finite, non-negative values";
                throw Error(message.str());
            }
        }
        throw Error("cannot sample: the probabilities sum to infinity; expected a finite total");
    }
    if (!(u >= 0.0 && u < 1.0)) {
        std::ostringstream message;
        message << "cannot sample with the uniform draw u = " << u << ": expected a value in [0, 1)";
        throw Error(message.str());
    }
    const double threshold = u * total;
    double cumulative = 0.0;
    std::size_t last_positive = probabilities.size();
    for (std::size_t i = 0; i < probabilities.size(); ++i) {
        if (probabilities[i] <= 0.0f) continue;
        cumulative += probabilities[i];
        last_positive = i;
        if (threshold < cumulative) return static_cast<Token>(i);
    }
    if (last_positive == probabilities.size()) throw Error("cannot sample from a distribution with no positive mass");
    return static_cast<Token>(last_positive);
}

}  // namespace specdec
