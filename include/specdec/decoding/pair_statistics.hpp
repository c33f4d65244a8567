#pragma once
// How well a draft model matches a target, measured without running a
// decoder: along text sampled from the target, the mean target entropy and
// top-1 probability (is the target peaked like a real LM?), the expected
// acceptance of exact token-wise rejection sampling alpha = mean of
// sum_x min(p(x), q(x)) = 1 - TV(p, q), and how varied the target's greedy
// continuation is (a collapsed random model repeats one token).
//
// It takes any two CausalLMs, so it lives beside the decoders rather than the
// reference models, and each row goes through sampling/'s processing: p and q
// are the very distributions a decoder at this temperature would compare,
// and the text is drawn as its autoregressive sampling would draw it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/sampling/logits_processing.hpp"

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

// Both models are reset (truncate(0)) before and after. Needs
// options.positions + 1 positions of context in both.
template <CausalLM Target, CausalLM Draft>
PairStatistics measure_pair(Target& target, Draft& draft, const PairStatisticsOptions& options = {}) {
    if (target.vocab_size() != draft.vocab_size()) {
        throw Error("measure_pair: target vocabulary " + std::to_string(target.vocab_size()) +
                    " differs from draft vocabulary " + std::to_string(draft.vocab_size()));
    }
    if (options.positions == 0) throw Error("measure_pair: positions must be positive");
    const SamplingOptions sampling{.temperature = options.temperature};
    validate(sampling);
    PairStatistics stats;
    stats.positions = options.positions;
    std::vector<float> p(target.vocab_size()), q(draft.vocab_size());
    detail::truncate_checked(target, 0, "target");
    detail::truncate_checked(draft, 0, "draft");
    Token token = options.first_token;
    // The row after the token at position `step` predicts position step + 1.
    for (std::size_t step = 0; step < options.positions; ++step) {
        const std::span<const float> target_row = target.forward(std::span<const Token>(&token, 1)).last_row();
        const std::span<const float> draft_row = draft.forward(std::span<const Token>(&token, 1)).last_row();
        stats.argmax_agreement += greedy_token(target_row, "target", step + 1) == greedy_token(draft_row, "draft", step + 1) ? 1.0 : 0.0;
        logits_to_distribution(target_row, sampling, p, "target", step + 1);
        logits_to_distribution(draft_row, sampling, q, "draft", step + 1);
        double entropy = 0.0, overlap = 0.0;
        for (std::size_t x = 0; x < p.size(); ++x) {
            const double px = p[x];
            if (px > 0.0) entropy -= px * std::log(px);
            overlap += std::min(px, static_cast<double>(q[x]));
        }
        stats.target_entropy += entropy;
        stats.target_top1 += *std::max_element(p.begin(), p.end());
        stats.acceptance += overlap;
        // Next token: drawn from p with the counter-based RNG.
        token = sample_from_distribution(p, counter_uniform(options.seed, step, RandomPurpose::target_sample));
    }
    const double n = static_cast<double>(options.positions);
    stats.target_entropy /= n;
    stats.target_top1 /= n;
    stats.acceptance /= n;
    stats.argmax_agreement /= n;

    detail::truncate_checked(target, 0, "target");
    std::unordered_set<Token> distinct;
    token = options.first_token;
    for (std::size_t step = 0; step < options.positions; ++step) {
        token = greedy_token(target.forward(std::span<const Token>(&token, 1)).last_row(), "target", step + 1);
        distinct.insert(token);
    }
    stats.greedy_distinct_fraction = static_cast<double>(distinct.size()) / n;
    detail::truncate_checked(target, 0, "target");
    detail::truncate_checked(draft, 0, "draft");
    return stats;
}

}  // namespace specdec
