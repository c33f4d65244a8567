#pragma once
// Logprobs of emitted tokens, read from the row each token was drawn from.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "specdec/core/logprobs.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec::detail {

// `raw_row`: the model's logits; `adjusted_row`: after the logit stages. The
// logprobs are of the processed distribution (logits_to_distribution of the
// adjusted row) or the raw log-softmax, as `options.source` says.
inline TokenLogprob token_logprob(std::span<const float> raw_row, std::span<const float> adjusted_row,
                                  const SamplingOptions& sampling, const LogprobOptions& options, Token token,
                                  std::vector<float>& scratch) {
    const std::size_t vocab = raw_row.size();
    scratch.resize(vocab);
    constexpr float kImpossible = -std::numeric_limits<float>::infinity();
    if (options.source == LogprobSource::processed) {
        logits_to_distribution(adjusted_row, sampling, scratch, "target model");
        for (float& value : scratch) value = value > 0.0f ? std::log(value) : kImpossible;
    } else {
        const float max = checked_max_logit(raw_row, "target model");
        double total = 0.0;
        for (const float logit : raw_row) total += std::exp(static_cast<double>(logit) - max);
        const double log_total = std::log(total);
        for (std::size_t x = 0; x < vocab; ++x)
            scratch[x] = static_cast<float>(static_cast<double>(raw_row[x]) - max - log_total);
    }
    TokenLogprob result{token, scratch[static_cast<std::size_t>(token)], {}};
    const std::size_t n = std::min(options.top_n, vocab);
    if (n > 0) {
        thread_local std::vector<Token> order;
        order.resize(vocab);
        std::iota(order.begin(), order.end(), Token{0});
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), [&](Token a, Token b) {
            const float la = scratch[static_cast<std::size_t>(a)], lb = scratch[static_cast<std::size_t>(b)];
            return la > lb || (la == lb && a < b);
        });
        result.top.reserve(n);
        for (std::size_t i = 0; i < n; ++i) result.top.push_back({order[i], scratch[static_cast<std::size_t>(order[i])]});
    }
    return result;
}

}  // namespace specdec::detail
