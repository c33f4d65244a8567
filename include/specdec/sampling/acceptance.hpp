#pragma once
// Acceptance rules: pure functions of (target distributions p, draft proposal
// with its q, randomness) -> (how many drafts are kept, the next token). They
// are the only place where the exactness of speculative decoding is decided.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

// k + 1 target distributions of `vocab` floats: rows 0..k-1 score the k drafts,
// row k is the distribution after all of them (for the bonus token).
struct DistributionRows {
    const float* data = nullptr;
    std::size_t rows = 0;
    std::size_t vocab = 0;

    [[nodiscard]] std::span<const float> row(std::size_t i) const { return {data + i * vocab, vocab}; }
};

namespace detail {

inline void check_draft_tokens(const DraftProposal& draft, std::size_t vocab) {
    for (const Token token : draft.tokens) {
        if (token < 0 || static_cast<std::size_t>(token) >= vocab) {
            std::ostringstream message;
            message << "draft token " << token << " is outside the target vocabulary [0, " << vocab << ")";
            throw Error(message.str());
        }
    }
}

inline void check_rows(const DraftProposal& draft, std::size_t target_rows, std::size_t vocab) {
    if (target_rows != draft.size() + 1) {
        std::ostringstream message;
        message << "acceptance needs k + 1 = " << draft.size() + 1 << " target rows, got " << target_rows;
        throw Error(message.str());
    }
    if (!draft.point_mass() && (draft.vocab != vocab || draft.probabilities.size() != draft.size() * vocab)) {
        std::ostringstream message;
        message << "draft distributions have vocabulary " << draft.vocab << " but the target has " << vocab;
        throw Error(message.str());
    }
    check_draft_tokens(draft, vocab);
}

// Every value a probability: finite and non-negative (NaN fails both tests).
inline void check_probabilities(std::span<const float> values, const char* what, std::size_t row_length) {
    bool valid = true;
    for (const float v : values) valid &= v >= 0.0f && v <= std::numeric_limits<float>::max();
    if (valid) return;
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!(values[i] >= 0.0f && values[i] <= std::numeric_limits<float>::max())) {
            std::ostringstream message;
            message << what << " row " << i / row_length << " holds " << values[i] << " at token " << i % row_length
                    << ": expected finite, non-negative probabilities";
            throw Error(message.str());
        }
    }
}

// y ~ norm(max(p - q, 0)), drawn by inverse CDF without normalising (so no
// division by a tiny mass). If rounding leaves no residual mass at all (p == q
// up to float error, where a rejection has probability ~1e-7), fall back to p.
inline Token sample_residual(std::span<const float> p, const DraftProposal& draft, std::size_t i, double u) {
    double mass = 0.0;
    if (draft.point_mass()) {
        const std::size_t drafted = static_cast<std::size_t>(draft.tokens[i]);
        for (std::size_t x = 0; x < p.size(); ++x) mass += x == drafted ? 0.0 : p[x];
    } else {
        const std::span<const float> q = draft.q(i);
        for (std::size_t x = 0; x < p.size(); ++x) mass += p[x] > q[x] ? static_cast<double>(p[x]) - q[x] : 0.0;
    }
    if (!(mass > 0.0)) return sample_from_distribution(p, u);
    const double threshold = u * mass;
    double cumulative = 0.0;
    std::size_t last_positive = 0;
    for (std::size_t x = 0; x < p.size(); ++x) {
        const double q_x = draft.q_of(i, static_cast<Token>(x));
        const double residual = p[x] > q_x ? p[x] - q_x : 0.0;
        if (residual <= 0.0) continue;
        cumulative += residual;
        last_positive = x;
        if (threshold < cumulative) return static_cast<Token>(x);
    }
    return static_cast<Token>(last_positive);
}

}  // namespace detail

// Token-wise rejection sampling (Leviathan et al. 2022; Chen et al. 2023).
// Draft i sits at sequence position first_position + i.
//   accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), i.e. iff u * q < p with
//   u ~ U[0,1) (strict, so a token with p = 0 is never accepted; q = 0 rejects);
//   at the first rejection emit y ~ norm(max(p_i - q_i, 0));
//   if all k are accepted emit a bonus y ~ p_{k+1}.
// The emitted tokens are distributed exactly as sequential sampling from p
// provided tokens[i] really was drawn from q_i and the uniforms are independent
// of the drafts (they are: different RandomPurpose streams).
[[nodiscard]] inline AcceptanceResult accept_rejection_sampling(const DraftProposal& draft, DistributionRows p,
                                                                const CounterRng& rng, std::uint64_t first_position) {
    detail::check_rows(draft, p.rows, p.vocab);
    detail::check_probabilities({p.data, p.rows * p.vocab}, "target distribution", p.vocab);
    detail::check_probabilities(draft.probabilities, "draft distribution", draft.vocab);
    const std::size_t k = draft.size();
    for (std::size_t i = 0; i < k; ++i) {
        const Token x = draft.tokens[i];
        const double p_x = p.row(i)[static_cast<std::size_t>(x)];
        const double q_x = draft.q_of(i, x);
        const double u = rng.uniform(first_position + i, RandomPurpose::accept_test);
        if (q_x > 0.0 && u * q_x < p_x) continue;
        const double v = rng.uniform(first_position + i, RandomPurpose::target_sample);
        return {i, detail::sample_residual(p.row(i), draft, i, v)};
    }
    const double v = rng.uniform(first_position + k, RandomPurpose::target_sample);
    return {k, sample_from_distribution(p.row(k), v)};
}

// Greedy verification (temperature 0): keep drafts while they equal the
// target's argmax; emit the target's argmax at the first mismatch, or after
// the last draft. `target_argmax` holds k + 1 argmax tokens.
[[nodiscard]] inline AcceptanceResult accept_greedy(std::span<const Token> drafts, std::span<const Token> target_argmax) {
    if (target_argmax.size() != drafts.size() + 1) {
        std::ostringstream message;
        message << "greedy acceptance needs k + 1 = " << drafts.size() + 1 << " target tokens, got "
                << target_argmax.size();
        throw Error(message.str());
    }
    std::size_t i = 0;
    while (i < drafts.size() && drafts[i] == target_argmax[i]) ++i;
    return {i, target_argmax[i]};
}

}  // namespace specdec
