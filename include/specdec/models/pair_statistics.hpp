#pragma once
// How well a draft model matches a target, measured without running a
// decoder: along text sampled from the target, the mean target entropy and
// top-1 probability (is the target peaked like a real LM?), the expected
// acceptance of exact token-wise rejection sampling alpha = mean of
// sum_x min(p(x), q(x)) = 1 - TV(p, q), and how varied the target's greedy
// continuation is (a collapsed random model repeats one token).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

struct PairStatisticsOptions {
    std::size_t positions = 128;  // sampled positions (and greedy continuation length)
    double temperature = 1.0;     // of both p and q; 0 compares the argmaxes (greedy acceptance)
    std::uint64_t seed = 7;       // of the sampled text
    Token first_token = 1;        // the text starts after this token (BOS in Llama vocabularies)
};

struct PairStatistics {
    double target_entropy = 0.0;              // nats, mean over positions
    double target_top1 = 0.0;                 // mean probability of the target's most likely token
    double acceptance = 0.0;                  // mean sum_x min(p(x), q(x))
    double argmax_agreement = 0.0;            // fraction of positions where the argmaxes agree
    double greedy_distinct_fraction = 0.0;    // distinct tokens / length of the target's greedy continuation
    std::size_t positions = 0;
};

namespace detail {

// Softmax of logits / temperature (or a one-hot argmax for temperature 0).
inline void tempered_distribution(std::span<const float> logits, double temperature, std::vector<double>& out) {
    out.assign(logits.size(), 0.0);
    const auto best = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (temperature <= 0.0) {
        out[best] = 1.0;
        return;
    }
    double total = 0.0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
        out[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
        total += out[i];
    }
    for (double& v : out) v /= total;
}

inline Token argmax_token(std::span<const float> logits) {
    return static_cast<Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace detail

// Both models are reset (truncate(0)) before and after. Needs
// options.positions + 1 positions of context in both.
template <CausalLM Target, CausalLM Draft>
PairStatistics measure_pair(Target& target, Draft& draft, const PairStatisticsOptions& options = {}) {
    if (target.vocab_size() != draft.vocab_size()) {
        throw Error("measure_pair: target vocabulary " + std::to_string(target.vocab_size()) +
                    " differs from draft vocabulary " + std::to_string(draft.vocab_size()));
    }
    if (options.positions == 0) throw Error("measure_pair: positions must be positive");
    PairStatistics stats;
    stats.positions = options.positions;
    std::vector<double> p, q;
    target.truncate(0);
    draft.truncate(0);
    Token token = options.first_token;
    for (std::size_t step = 0; step < options.positions; ++step) {
        const LogitsView target_logits = target.forward(std::span<const Token>(&token, 1));
        const LogitsView draft_logits = draft.forward(std::span<const Token>(&token, 1));
        const Token target_best = detail::argmax_token(target_logits.last_row());
        stats.argmax_agreement += target_best == detail::argmax_token(draft_logits.last_row()) ? 1.0 : 0.0;
        detail::tempered_distribution(target_logits.last_row(), options.temperature, p);
        detail::tempered_distribution(draft_logits.last_row(), options.temperature, q);
        double entropy = 0.0, overlap = 0.0;
        for (std::size_t x = 0; x < p.size(); ++x) {
            if (p[x] > 0.0) entropy -= p[x] * std::log(p[x]);
            overlap += std::min(p[x], q[x]);
        }
        stats.target_entropy += entropy;
        stats.target_top1 += *std::max_element(p.begin(), p.end());
        stats.acceptance += overlap;
        // Next token: inverse-CDF draw from p with the counter-based RNG.
        const double u = counter_uniform(options.seed, step, RandomPurpose::target_sample);
        double cumulative = 0.0;
        token = target_best;
        for (std::size_t x = 0; x < p.size(); ++x) {
            cumulative += p[x];
            if (u < cumulative) {
                token = static_cast<Token>(x);
                break;
            }
        }
    }
    const double n = static_cast<double>(options.positions);
    stats.target_entropy /= n;
    stats.target_top1 /= n;
    stats.acceptance /= n;
    stats.argmax_agreement /= n;

    target.truncate(0);
    std::unordered_set<Token> distinct;
    token = options.first_token;
    for (std::size_t step = 0; step < options.positions; ++step) {
        token = detail::argmax_token(target.forward(std::span<const Token>(&token, 1)).last_row());
        distinct.insert(token);
    }
    stats.greedy_distinct_fraction = static_cast<double>(distinct.size()) / n;
    target.truncate(0);
    draft.truncate(0);
    return stats;
}

}  // namespace specdec
