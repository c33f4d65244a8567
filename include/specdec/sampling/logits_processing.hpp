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
#include "specdec/sampling/row_kernels.hpp"
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
    const RowMax result = row_max(logits);
    if (result.bad || result.max == -std::numeric_limits<float>::infinity()) throw_bad_logit(who, logits, position);
    return result.max;
}

// What turns one logits row into softmax probabilities without filtering:
// p(x) = exp_term(logits[x], max, inverse_temperature) * scale.
struct SoftmaxNormaliser {
    float max = 0.0f;
    float inverse_temperature = 1.0f;
    float scale = 1.0f;

    [[nodiscard]] float probability(float logit) const { return exp_term(logit, max, inverse_temperature) * scale; }
};

// One checked-max pass and one exp-and-sum pass; writes the unnormalised
// terms to `terms` when given.
inline SoftmaxNormaliser softmax_normaliser(std::span<const float> logits, double temperature, std::string_view who,
                                            float* terms = nullptr,
                                            std::optional<std::uint64_t> position = std::nullopt) {
    SoftmaxNormaliser normaliser;
    normaliser.max = checked_max_logit(logits, who, position);
    normaliser.inverse_temperature = static_cast<float>(1.0 / temperature);
    // total >= 1: the max logit contributes exp(0) = 1.
    const float total = exp_sum(logits, normaliser.max, normaliser.inverse_temperature, terms);
    normaliser.scale = 1.0f / total;
    return normaliser;
}

// Whether top-k, top-p or min-p can remove tokens from a row of `vocab`.
[[nodiscard]] inline bool filters_tokens(const SamplingOptions& options, std::size_t vocab) {
    return (options.top_k > 0 && options.top_k < vocab) || options.top_p < 1.0 || options.min_p > 0.0;
}

// Throws naming the first value of a row that is not a probability (NaN,
// infinite or negative): the block sums would silently skip it.
inline void check_sampling_row(std::span<const float> probabilities) {
    if (all_probabilities(probabilities)) return;
    for (std::size_t i = 0; i < probabilities.size(); ++i) {
        const float p = probabilities[i];
        if (!(p >= 0.0f && p <= std::numeric_limits<float>::max())) {
            std::ostringstream message;
            message << "cannot sample: probability " << p << " of token " << i
                    << ": expected finite, non-negative values";
            throw Error(message.str());
        }
    }
}

// Inverse CDF over n non-negative weights whose kSampleBlock-element block
// sums are given: the first index whose cumulative weight exceeds
// `threshold`, scanning only the block that holds it. weight(i) is element
// i's weight (only values > 0 count). Where rounding of the sums leaves the
// threshold past a block's own scan, the block's last positive element is
// taken, and past every block the row's last positive one; n if no weight is
// positive.
template <class Weight>
std::size_t inverse_cdf_by_blocks(std::span<const double> sums, std::size_t n, double threshold, const Weight& weight) {
    double cumulative = 0.0;
    for (std::size_t b = 0; b < sums.size(); ++b) {
        if (!(threshold < cumulative + sums[b])) {
            cumulative += sums[b];
            continue;
        }
        const std::size_t end = std::min(n, (b + 1) * kSampleBlock);
        std::size_t last_positive = end;
        for (std::size_t i = b * kSampleBlock; i < end; ++i) {
            const double w = weight(i);
            if (!(w > 0.0)) continue;
            cumulative += w;
            last_positive = i;
            if (threshold < cumulative) return i;
        }
        if (last_positive != end) return last_positive;
    }
    for (std::size_t i = n; i-- > 0;)
        if (weight(i) > 0.0) return i;
    return n;
}

// Scratch for the block sums of one row (per thread: sampling runs on the
// caller's thread, and rows are at most a vocabulary wide).
inline std::span<double> block_sum_scratch(std::size_t n) {
    thread_local std::vector<double> sums;
    sums.resize((n + kSampleBlock - 1) / kSampleBlock);
    return sums;
}

}  // namespace detail

// Argmax with ties going to the lowest token id; NaN/+inf logits are an error
// whose message names `who` and, when given, the position the row predicts.
[[nodiscard]] inline Token greedy_token(std::span<const float> logits, std::string_view who = "model",
                                        std::optional<std::uint64_t> position = std::nullopt) {
    const float max_value = detail::checked_max_logit(logits, who, position);
    return static_cast<Token>(detail::first_equal(logits, max_value));  // max_value is one of the logits
}

namespace detail {

// The candidate stages of the chain (top_k, top_p, min_p, temperature, in
// chain order) over a row whose logits are final (the logit stages already
// ran): writes p, zero outside the candidates that remain. `order` is scratch.
inline void filtered_distribution(std::span<const float> logits, const SamplingOptions& options,
                                  std::span<float> probabilities, float max_logit, std::vector<Token>& order) {
    const std::size_t vocab = logits.size();
    const float final_scale = static_cast<float>(1.0 / options.temperature);
    // Ranking by decreasing logit, ties by increasing id: the same at every
    // temperature, so the kept set is always a prefix of one ranking.
    order.resize(vocab);
    std::iota(order.begin(), order.end(), Token{0});
    auto ranks_before = [&](Token a, Token b) {
        const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
        return la > lb || (la == lb && a < b);
    };
    std::size_t kept = vocab;
    std::size_t sorted = 0;  // order[0 .. sorted) is ranked
    auto rank_kept = [&] {
        if (sorted < kept) std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), ranks_before);
        sorted = kept;
    };
    float scale = 1.0f;  // 1 / T once the temperature stage has run
    auto weight = [&](std::size_t rank) {
        return static_cast<double>(exp_term(logits[static_cast<std::size_t>(order[rank])], max_logit, scale));
    };
    for (const SamplerStage stage : options.chain) {
        switch (stage) {
            case SamplerStage::top_k:
                if (options.top_k > 0 && options.top_k < kept) {
                    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(options.top_k) - 1,
                                     order.begin() + static_cast<std::ptrdiff_t>(kept), ranks_before);
                    kept = options.top_k;
                    sorted = 0;
                }
                break;
            case SamplerStage::top_p:
                if (options.top_p < 1.0) {
                    rank_kept();
                    double total = 0.0;
                    for (std::size_t r = 0; r < kept; ++r) total += weight(r);
                    const double target = options.top_p * total;  // renormalised over the candidates
                    double cumulative = 0.0;
                    std::size_t needed = 0;
                    while (needed < kept) {
                        cumulative += weight(needed);
                        ++needed;
                        if (cumulative >= target) break;
                    }
                    kept = needed;
                }
                break;
            case SamplerStage::min_p:
                if (options.min_p > 0.0) {
                    rank_kept();
                    // The first-ranked candidate holds the row's maximum logit: weight 1.
                    std::size_t needed = 1;
                    while (needed < kept && weight(needed) >= options.min_p) ++needed;
                    kept = needed;
                }
                break;
            case SamplerStage::temperature:
                scale = final_scale;
                break;
            case SamplerStage::logit_bias:
            case SamplerStage::penalties:
                break;  // adjust_logits ran them
        }
    }
    double kept_mass = 0.0;
    for (std::size_t r = 0; r < kept; ++r) kept_mass += exp_term(logits[static_cast<std::size_t>(order[r])], max_logit, final_scale);
    std::fill(probabilities.begin(), probabilities.end(), 0.0f);
    for (std::size_t r = 0; r < kept; ++r) {
        const auto x = static_cast<std::size_t>(order[r]);
        probabilities[x] = static_cast<float>(exp_term(logits[x], max_logit, final_scale) / kept_mass);
    }
}

}  // namespace detail

// Writes the sampling distribution for `logits` into `probabilities` (same
// size): the candidate stages of options.chain (top-k, top-p, min-p and the
// temperature, see SamplingOptions), renormalised. The logit stages (bias,
// penalties, constraint) read the row's history and are adjust_logits'
// (sampling/logit_adjustments.hpp); `logits` here has been through them.
// Greedy options produce a point mass on the argmax.
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
    if (!detail::filters_tokens(options, vocab)) {
        const detail::SoftmaxNormaliser normaliser =
            detail::softmax_normaliser(logits, options.temperature, who, probabilities.data(), position);
        detail::scale_row(probabilities, normaliser.scale);
        return;
    }
    thread_local std::vector<Token> order;
    detail::filtered_distribution(logits, options, probabilities, detail::checked_max_logit(logits, who, position),
                                  order);
}

// Inverse-CDF draw with a uniform u in [0, 1). Never returns a token of
// probability 0, even when rounding leaves u beyond the accumulated mass.
// A NaN, an infinite or a negative probability is an error, as is u outside [0, 1).
[[nodiscard]] inline Token sample_from_distribution(std::span<const float> probabilities, double u) {
    if (!(u >= 0.0 && u < 1.0)) {
        std::ostringstream message;
        message << "cannot sample with the uniform draw u = " << u << ": expected a value in [0, 1)";
        throw Error(message.str());
    }
    // Block sums first (one vectorised pass), then a scan of one block: the
    // same inverse CDF as a scan of the whole row, up to rounding of the sums.
    const std::size_t n = probabilities.size();
    detail::check_sampling_row(probabilities);
    const std::span<double> sums = detail::block_sum_scratch(n);
    const double total = detail::block_sums(probabilities, sums.data());
    const std::size_t token = detail::inverse_cdf_by_blocks(
        sums, n, u * total, [&](std::size_t i) { return static_cast<double>(probabilities[i]); });
    if (token == n) throw Error("cannot sample from a distribution with no positive mass");
    return static_cast<Token>(token);
}

}  // namespace specdec
