#pragma once
// Acceptance rules: pure functions of (target distributions p, draft proposal
// with its q, randomness) -> (how many drafts are kept, the next token). They
// are the only place where the exactness of speculative decoding is decided.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <algorithm>
#include <concepts>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/sampling/coupled_draw.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

namespace detail {

// Target distributions computed from logits only as far as a rule reads them.
// Token-wise rejection reads p_i(x_i) for the accepted drafts and one full row
// (the residual or the bonus); p_i(x_i) needs only the row's maximum and
// normaliser (two passes, nothing written). Full rows are computed on first
// use. A probability read alone is bitwise the value the full row holds, so a
// rule sees one distribution whichever way it reads it.
class LazyDistributions {
public:
    // `logits`: the k + 1 rows to process (LogitsView::row(first_row + i));
    // row i predicts the token at first_position + i (named in errors).
    void reset(const LogitsView& logits, std::size_t first_row, std::size_t rows, const SamplingOptions& sampling,
               std::string_view who, std::optional<std::uint64_t> first_position = std::nullopt) {
        logits_ = logits;
        first_position_ = first_position;
        first_row_ = first_row;
        rows_ = rows;
        sampling_ = sampling;
        who_ = who;
        plain_ = !filters_tokens(sampling, logits.vocab);
        storage_.resize(rows * logits.vocab);
        state_.assign(rows, State::none);
        normalisers_.resize(rows);
    }

    [[nodiscard]] std::size_t rows() const { return rows_; }
    [[nodiscard]] std::size_t vocab() const { return logits_.vocab; }

    std::span<const float> row(std::size_t i) {
        std::span<float> out{storage_.data() + i * vocab(), vocab()};
        if (state_[i] != State::full) {
            logits_to_distribution(logits_.row(first_row_ + i), sampling_, out, who_, position_of(i));
            state_[i] = State::full;
        }
        return out;
    }

    float probability(std::size_t i, Token x) {
        if (!plain_ || state_[i] == State::full) return row(i)[static_cast<std::size_t>(x)];
        if (state_[i] == State::none) {
            normalisers_[i] =
                softmax_normaliser(logits_.row(first_row_ + i), sampling_.temperature, who_, nullptr, position_of(i));
            state_[i] = State::normalised;
        }
        return normalisers_[i].probability(logits_.row(first_row_ + i)[static_cast<std::size_t>(x)]);
    }

    // Rows materialised so far (for tests and cost accounting).
    [[nodiscard]] std::size_t full_rows() const {
        std::size_t count = 0;
        for (const State s : state_) count += s == State::full;
        return count;
    }

private:
    [[nodiscard]] std::optional<std::uint64_t> position_of(std::size_t i) const {
        return first_position_ ? std::optional<std::uint64_t>(*first_position_ + i) : std::nullopt;
    }

    enum class State : unsigned char { none, normalised, full };
    std::optional<std::uint64_t> first_position_;
    LogitsView logits_{};
    std::size_t first_row_ = 0, rows_ = 0;
    SamplingOptions sampling_{};
    std::string_view who_;
    bool plain_ = true;
    std::vector<float> storage_;
    std::vector<State> state_;
    std::vector<SoftmaxNormaliser> normalisers_;
};

}  // namespace detail

// k + 1 target distributions of `vocab` floats: rows 0..k-1 score the k drafts,
// row k is the distribution after all of them (for the bonus token). Either
// dense rows at `data`, or computed on demand from logits (`lazy`).
struct DistributionRows {
    const float* data = nullptr;
    std::size_t rows = 0;
    std::size_t vocab = 0;
    detail::LazyDistributions* lazy = nullptr;

    [[nodiscard]] std::span<const float> row(std::size_t i) const {
        return lazy ? lazy->row(i) : std::span<const float>{data + i * vocab, vocab};
    }
    // p_i(x): cheaper than row(i)[x] when the rows are lazy.
    [[nodiscard]] float probability(std::size_t i, Token x) const {
        return lazy ? lazy->probability(i, x) : data[i * vocab + static_cast<std::size_t>(x)];
    }
};

namespace detail {

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
    if (all_probabilities(values)) return;
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!(values[i] >= 0.0f && values[i] <= std::numeric_limits<float>::max())) {
            std::ostringstream message;
            message << what << " row " << i / row_length << " holds " << values[i] << " at token " << i % row_length
                    << ": expected finite, non-negative probabilities";
            throw Error(message.str());
        }
    }
}

// The residual of draft i, max(w p(x) - q_i(x), 0) (q_i = delta(tokens[i])
// for a point-mass draft), as block sums (`sums`, kSampleBlock elements each)
// and one element at a time; returns the total mass. Both use the same
// double arithmetic.
struct Residual {
    std::span<const float> p;
    const float* q = nullptr;        // null: a point mass on `drafted`
    std::size_t drafted = 0;
    double w = 1.0;

    Residual(std::span<const float> p_row, const DraftProposal& draft, std::size_t i, double weight)
        : p(p_row),
          q(draft.point_mass() ? nullptr : draft.q(i).data()),
          drafted(static_cast<std::size_t>(draft.tokens[i])),
          w(weight) {}

    [[nodiscard]] double operator()(std::size_t x) const {
        const double q_x = q ? static_cast<double>(q[x]) : (x == drafted ? 1.0 : 0.0);
        const double value = w * static_cast<double>(p[x]) - q_x;
        return value > 0.0 ? value : 0.0;
    }

    // Block sums into `sums` (may be empty: only the total is wanted).
    double sums(std::span<double> sums) const {
        double* out = sums.empty() ? nullptr : sums.data();
        double total = residual_sums(p, q, w, out);
        if (q == nullptr && drafted < p.size()) {
            // residual_sums read q as 0: recount the drafted token's block.
            const std::size_t block = drafted / kSampleBlock;
            const std::size_t end = std::min(p.size(), (block + 1) * kSampleBlock);
            double read_as_zero = 0.0, right = 0.0;
            for (std::size_t x = block * kSampleBlock; x < end; ++x) {
                const double plain = w * static_cast<double>(p[x]);
                read_as_zero += plain > 0.0 ? plain : 0.0;
                right += (*this)(x);
            }
            total += right - (out ? out[block] : read_as_zero);
            if (out) out[block] = right;
        }
        return total;
    }
};

// y ~ norm(max(w * p - q, 0)) with q = draft.q(i) (w = 1: the token-wise
// residual; w <= 1: block verification's), drawn by inverse CDF without
// normalising (so no division by a tiny mass): block sums in one vectorised
// pass, then a scan of one block. If rounding leaves no residual mass at all
// (p == q up to float error, where a rejection has probability ~1e-7), fall
// back to p.
inline Token sample_residual(std::span<const float> p, const DraftProposal& draft, std::size_t i, double u,
                             double w = 1.0) {
    const Residual residual(p, draft, i, w);
    const std::span<double> sums = block_sum_scratch(p.size());
    const double mass = residual.sums(sums);
    if (!(mass > 0.0)) return sample_from_distribution(p, u);
    const std::size_t token = inverse_cdf_by_blocks(sums, p.size(), u * mass, residual);
    if (token == p.size()) return sample_from_distribution(p, u);
    return static_cast<Token>(token);
}

// Block verification's quantities for drafts 1..k (index i - 1):
//   w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i)), w_0 = 1 (0 once some q_i(x_i) = 0);
//   h_i = Z_i / (Z_i + 1 - w_i) with Z_i = sum_x max(w_i p_{i+1}(x) - q_{i+1}(x), 0)
//         (1 when the denominator is 0), for i < k;  h_k = w_k.
// The w_i read only p_i(x_i); h_i (i < k) reads row i + 1 of p in full.
inline void block_acceptance_weights(const DraftProposal& draft, const DistributionRows& p, std::vector<double>& w) {
    const std::size_t k = draft.size();
    w.assign(k, 0.0);
    double weight = 1.0;
    for (std::size_t i = 0; i < k; ++i) {
        const Token x = draft.tokens[i];
        const double q_x = draft.q_of(i, x);
        const double p_x = p.probability(i, x);
        weight = q_x > 0.0 ? std::min(1.0, weight * p_x / q_x) : 0.0;
        w[i] = weight;
    }
}

// h_{i+1} (index i) from the w of block_acceptance_weights.
inline double block_stop_probability(const DraftProposal& draft, const DistributionRows& p,
                                     std::span<const double> w, std::size_t i) {
    if (i + 1 == w.size()) return w[i];
    // Z is the mass of the residual max(w_i p_{i+1} - q_{i+1}, 0).
    const double z = Residual(p.row(i + 1), draft, i + 1, w[i]).sums({});
    const double denominator = z + 1.0 - w[i];
    return denominator > 0.0 ? z / denominator : 1.0;
}

// Block verification's kept length: tau = the largest i with u_i <= h_i (0 if
// none), testing from the last draft down. It stops at the first success, so
// h_i is computed only for i >= tau: the full rows of p below the kept block
// are never materialised (most steps keep most of the block). The uniforms
// are keyed by the step's first position and the lane, so the order they are
// read in changes nothing.
inline std::size_t block_kept_length(const DraftProposal& draft, const DistributionRows& p, std::span<const double> w,
                                     const CounterRng& rng, std::uint64_t first_position) {
    for (std::size_t i = w.size(); i > 0; --i) {
        if (rng.uniform(first_position, RandomPurpose::block_test, static_cast<std::uint32_t>(i)) <=
            block_stop_probability(draft, p, w, i - 1))
            return i;
    }
    return 0;
}

// Every w_i and h_i (the tests enumerate with them; the rule itself computes
// h only where its test reaches, see block_kept_length).
inline void block_weights(const DraftProposal& draft, const DistributionRows& p, std::vector<double>& w,
                          std::vector<double>& h) {
    block_acceptance_weights(draft, p, w);
    h.assign(w.size(), 0.0);
    for (std::size_t i = 0; i < w.size(); ++i) h[i] = block_stop_probability(draft, p, w, i);
}

}  // namespace detail

namespace detail {

// What every chain rule checks before it reads anything: k + 1 target rows,
// draft rows of the target's vocabulary, draft ids inside it, and probabilities
// that are probabilities. Rows the decoder computed lazily were made from
// checked logits; rows handed in directly (a test, a fuzzer, a caller of a rule)
// are checked here.
inline void check_rule_inputs(const DraftProposal& draft, const DistributionRows& p) {
    check_rows(draft, p.rows, p.vocab);
    if (p.data != nullptr) check_probabilities({p.data, p.rows * p.vocab}, "target distribution", p.vocab);
    check_probabilities(draft.probabilities, "draft distribution", draft.vocab);
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
    detail::check_rule_inputs(draft, p);
    const std::size_t k = draft.size();
    for (std::size_t i = 0; i < k; ++i) {
        const Token x = draft.tokens[i];
        const double q_x = draft.q_of(i, x);
        const double p_x = q_x > 0.0 ? p.probability(i, x) : 0.0;
        const double u = rng.uniform(first_position + i, RandomPurpose::accept_test);
        if (q_x > 0.0 && u * q_x < p_x) continue;
        const double v = rng.uniform(first_position + i, RandomPurpose::target_sample);
        return {i, detail::sample_residual(p.row(i), draft, i, v)};
    }
    const double v = rng.uniform(first_position + k, RandomPurpose::target_sample);
    return {k, sample_from_distribution(p.row(k), v)};
}

// Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh,
// "Block Verification Accelerates Speculative Decoding", ICLR 2025). Decides
// the whole block at once instead of draft by draft: with w_i, h_i as in
// detail::block_weights and independent uniforms u_1..u_k,
//   tau = the largest i with u_i <= h_i (0 if none); keep x_1..x_tau;
//   emit y ~ p_{k+1} if tau = k, else y ~ norm(max(w_tau p_{tau+1} - q_{tau+1}, 0)).
// Exact for every draft length (the paper's Theorem 1) and never keeps fewer
// drafts in expectation than token-wise rejection (Theorem 2); a draft stopped
// early by a rule that reads only earlier drafts and their q is still exact
// (checked by enumeration in the tests). Point-mass drafts are handled
// (q = delta) but gain nothing: w_i = prod p_j(x_j) never clips.
//
// All k uniforms are drawn, also those of drafts that end up rejected, and the
// outcome depends on every draft. So the uniforms are keyed by the step's first
// position and the draft index (a lane), never by the position alone, which a
// later step would reuse: after a rejection the next step starts inside this
// block. The drafter must likewise draw per step (ModelDrafter does).
[[nodiscard]] inline AcceptanceResult accept_block_verification(const DraftProposal& draft, DistributionRows p,
                                                                const CounterRng& rng, std::uint64_t first_position) {
    detail::check_rule_inputs(draft, p);
    const std::size_t k = draft.size();
    thread_local std::vector<double> w;
    detail::block_acceptance_weights(draft, p, w);
    const std::size_t tau = detail::block_kept_length(draft, p, w, rng, first_position);
    const double v = rng.uniform(first_position + tau, RandomPurpose::target_sample);
    if (tau == k) return {k, sample_from_distribution(p.row(k), v)};
    const double weight = tau == 0 ? 1.0 : w[tau - 1];
    return {tau, detail::sample_residual(p.row(tau), draft, tau, v, weight)};
}

// Coupled sampling: the token at position t is the target's own coupled
// draw y_t = coupled_draw(p_t, seed, t) (sampling/coupled_draw.hpp), whose
// noise depends on the seed and t alone; drafts are kept while they equal it,
// and the first that differs is replaced by it (after k kept drafts, y is the
// bonus). A step of no drafts emits y_t too. The emitted tokens are therefore
// a function of the seed, the prompt and the target alone: the same, bitwise
// on the CPU rows, whatever the drafts, the draft lengths (none included) or
// the batch. Exact for any drafter: the drafts only decide how many positions
// one pass settles. A draft made by the same draw from q (DraftDraws::coupled)
// is kept with the Gumbel coupling's probability, at least (1 - d) / (1 + d)
// for the total variation d between p and q, below token-wise rejection's
// 1 - d. The rule for seeded requests that must repeat under an adaptive
// length policy.
[[nodiscard]] inline AcceptanceResult accept_coupled(const DraftProposal& draft, DistributionRows p,
                                                     const CounterRng& rng, std::uint64_t first_position) {
    detail::check_rule_inputs(draft, p);
    const std::size_t k = draft.size();
    for (std::size_t i = 0;; ++i) {
        const Token y = coupled_draw(p.row(i), rng, first_position + i);
        if (i == k || y != draft.tokens[i]) return {i, y};
    }
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

// The rules as types, so that a decoder is parameterised on one. A rule is any
// callable (draft, target distributions p, rng, first_position) ->
// AcceptanceResult (the AcceptanceRule concept); tests plug in wrong ones to
// show the exactness tests catch them. Temperature 0 is not a rule: the
// decoders verify greedily there (accept_greedy).

// accept_rejection_sampling, the classic token-wise rule.
struct TokenwiseRejection {
    AcceptanceResult operator()(const DraftProposal& draft, DistributionRows p, const CounterRng& rng,
                                std::uint64_t first_position) const {
        return accept_rejection_sampling(draft, p, rng, first_position);
    }
};

// accept_block_verification, SpeculativeDecoder's default: exact, and keeps at
// least as many drafts as TokenwiseRejection in expectation. Needs a model
// drafter's full q rows to gain anything (with point-mass drafts it equals token-wise).
struct BlockVerification {
    AcceptanceResult operator()(const DraftProposal& draft, DistributionRows p, const CounterRng& rng,
                                std::uint64_t first_position) const {
        return accept_block_verification(draft, p, rng, first_position);
    }
};

// accept_coupled: a seeded run's tokens independent of every length decision.
// Its drafts are best made by the coupled draw (draft_draws()), and a step of
// no drafts is its own draw too (the decoders ask the rule then).
struct CoupledSampling {
    [[nodiscard]] static constexpr DraftDraws draft_draws() { return DraftDraws::coupled; }
    AcceptanceResult operator()(const DraftProposal& draft, DistributionRows p, const CounterRng& rng,
                                std::uint64_t first_position) const {
        return accept_coupled(draft, p, rng, first_position);
    }
};

// Any of the three, chosen at run time: for a batched decoder whose requests
// choose their own rule (BatchedDecoder::submit takes one per request).
struct ChosenRule {
    enum class Kind { tokenwise, block, coupled };
    Kind kind = Kind::tokenwise;
    [[nodiscard]] DraftDraws draft_draws() const { return kind == Kind::coupled ? DraftDraws::coupled : DraftDraws::own; }
    AcceptanceResult operator()(const DraftProposal& draft, DistributionRows p, const CounterRng& rng,
                                std::uint64_t first_position) const {
        switch (kind) {
            case Kind::block: return accept_block_verification(draft, p, rng, first_position);
            case Kind::coupled: return accept_coupled(draft, p, rng, first_position);
            case Kind::tokenwise: break;
        }
        return accept_rejection_sampling(draft, p, rng, first_position);
    }
};

template <class Rule>
concept AcceptanceRule = requires(const Rule& rule, const DraftProposal& draft, DistributionRows p,
                                  const CounterRng& rng, std::uint64_t position) {
    { rule(draft, p, rng, position) } -> std::same_as<AcceptanceResult>;
};

// The uniforms a rule needs its drafts drawn with: what it says
// (draft_draws()), else a stream of the drafter's own.
template <class Rule>
[[nodiscard]] DraftDraws draft_draws_for(const Rule& rule) {
    if constexpr (requires { { rule.draft_draws() } -> std::same_as<DraftDraws>; }) return rule.draft_draws();
    else return DraftDraws::own;
}

}  // namespace specdec
