#pragma once
// Draft-length policies: how many tokens each step drafts. A policy is the
// decoder's third plug-in beside the drafter and the acceptance rule:
//
//   specdec::SpeculativeDecoder decoder(specdec::target(big), specdec::draft(small),
//                                       {.draft_tokens = 8},   // now the maximum
//                                       specdec::TokenwiseRejection{}, specdec::AutoLength{});
//
// Before a step the decoder asks plan() for the step's cap (<= draft_tokens)
// and an optional stop rule the drafter consults before each draft; after
// verification it reports the outcome to observe(). Exactness: a plan may
// depend on earlier steps' outcomes, and a stop only on this step's earlier
// drafts and the drafter's q; neither may read the verifier's randomness of
// this step (the tests check a policy that does and see it caught).
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/drafter.hpp"

namespace specdec {

// What a policy decides for one step.
struct DraftPlan {
    std::size_t max_tokens = 0;  // draft at most this many (<= the decoder's cap)
    DraftStop stop{};            // optional early stop inside the draft
};

// What happened in one step, for policies that learn.
struct StepOutcome {
    std::size_t proposed = 0;          // drafts the drafter returned
    std::size_t accepted = 0;          // drafts the rule kept (before stop tokens/callbacks)
    std::size_t draft_passes = 0;      // draft forward passes
    std::size_t verified_tokens = 0;   // width of the target's pass
    double draft_seconds = 0.0;
    double target_seconds = 0.0;
    double acceptance_seconds = 0.0;
    double total_seconds = 0.0;        // the whole step, emission included
};

// plan(cap, first_position): cap = the most drafts the step may hold
// (draft_tokens, the context and max_tokens allow); first_position = the
// position of the first draft. observe(outcome) after each verified step.
template <class P>
concept DraftLengthPolicy = requires(P& policy, std::size_t cap, std::uint64_t position, const StepOutcome& outcome) {
    { policy.plan(cap, position) } -> std::same_as<DraftPlan>;
    { policy.observe(outcome) };
};

// Always draft_tokens (the classic fixed chain).
struct FixedLength {
    DraftPlan plan(std::size_t cap, std::uint64_t) { return {cap, {}}; }
    void observe(const StepOutcome&) {}
};

// Ends a draft when the drafter's own distribution is not confident: before
// draft i >= min_tokens, stop if max_x q_i(x) < min_top_probability (llama.cpp's
// p_min; the token is not kept). The pass that formed q_i is spent either way.
struct ConfidenceStop {
    double min_top_probability = 0.5;
    std::size_t min_tokens = 1;

    DraftPlan plan(std::size_t cap, std::uint64_t) {
        if (!(min_top_probability >= 0.0 && min_top_probability <= 1.0)) {
            std::ostringstream message;
            message << "invalid ConfidenceStop min_top_probability = " << min_top_probability
                    << ": expected a value in [0, 1]";
            throw Error(message.str());
        }
        return {cap, DraftStop(*this)};
    }
    void observe(const StepOutcome&) {}

    bool operator()(const DraftCandidate& candidate) const {
        return candidate.index >= min_tokens && candidate.top_probability < min_top_probability;
    }
};

// Chooses each step's draft length to maximise expected tokens per second,
// from what it measures while generating:
//   a_i   acceptance of draft i given drafts 0..i-1 were kept (decayed counts,
//         shrunk towards a_{i-1} where a position has few samples: acceptance
//         rarely grows with depth, so an unmeasured position is not promised more);
//   A(t)  acceptance of a draft whose q has top probability t (10 bins);
//   d     seconds per draft pass; V(n) seconds of a target pass over n tokens
//         (unmeasured widths interpolated linearly); r per verified row of
//         acceptance work; o the rest of a step.
// plan(): k* = argmax_k E(k) / T(k) with E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j and
// T(k) = k d + V(k + 1) + (k + 1) r + o, so k = 0 (no drafting) when speculation
// does not pay. Inside the draft, draft i is kept only while its marginal
// expected tokens per marginal second, P(drafts < i kept) A(t_i) / (V(n+1) - V(n)
// + r + d), is at least the step's planned rate E(k*) / T(k*): the threshold on
// t follows from the costs instead of being a constant. Every explore_every-th
// step drafts one more than k* so that deeper positions and wider passes keep
// being measured. The lengths depend on measured times, so two runs with the
// same seed may choose differently (each run is still exact).
class AutoLength {
public:
    struct Options {
        std::size_t warmup_steps = 4;     // steps drafted at min(cap, warmup_length) before the model decides
        std::size_t warmup_length = 4;
        std::size_t explore_every = 16;   // one step in this many drafts k* + 1
        double decay = 0.98;              // per-step weight of older acceptance samples
        double prior_strength = 4.0;      // pseudo-samples pulling a_i towards a_{i-1}
        bool confidence_stop = true;      // stop inside a draft by the cost threshold
    };

    AutoLength() : AutoLength(Options{}) {}
    explicit AutoLength(Options options) : options_(options) {
        if (!(options_.decay > 0.0 && options_.decay <= 1.0)) {
            std::ostringstream message;
            message << "invalid AutoLength decay = " << options_.decay << ": expected a value in (0, 1]";
            throw Error(message.str());
        }
    }

    DraftPlan plan(std::size_t cap, std::uint64_t) {
        ensure_positions(cap);
        planned_ = std::min(cap, options_.warmup_length);
        if (steps_ >= options_.warmup_steps && cap > 0) {
            std::size_t best = 0;
            double best_rate = 0.0;
            for (std::size_t k = 0; k <= cap; ++k) {
                const double rate = expected_tokens(k) / step_seconds(k);
                if (rate > best_rate) {
                    best_rate = rate;
                    best = k;
                }
            }
            const bool explore = options_.explore_every > 0 && steps_ % options_.explore_every == 0;
            planned_ = explore ? std::min(cap, best + 1) : best;
            target_rate_ = best_rate;
        }
        kept_probability_ = 1.0;
        top_probabilities_.clear();
        stopping_ = options_.confidence_stop && steps_ >= options_.warmup_steps;
        return {planned_, DraftStop(*this)};
    }

    void observe(const StepOutcome& outcome) {
        ++steps_;
        // Acceptance by position: draft i was tested if drafts < i were kept.
        for (double& t : tested_) t *= options_.decay;
        for (double& a : accepted_) a *= options_.decay;
        const std::size_t tested = std::min(outcome.proposed, outcome.accepted + 1);
        ensure_positions(outcome.proposed);
        for (std::size_t i = 0; i < tested; ++i) {
            tested_[i] += 1.0;
            if (i < outcome.accepted) accepted_[i] += 1.0;
        }
        for (std::size_t i = 0; i < tested && i < top_probabilities_.size(); ++i) {
            const std::size_t bin = bin_of(top_probabilities_[i]);
            bin_tested_[bin] = bin_tested_[bin] * options_.decay + 1.0;
            bin_accepted_[bin] = bin_accepted_[bin] * options_.decay + (i < outcome.accepted ? 1.0 : 0.0);
        }
        // Costs.
        if (outcome.draft_passes > 0) average(draft_pass_, outcome.draft_seconds / outcome.draft_passes);
        if (outcome.verified_tokens > 0) {
            if (verify_.size() < outcome.verified_tokens + 1) verify_.resize(outcome.verified_tokens + 1, -1.0);
            average(verify_[outcome.verified_tokens], outcome.target_seconds);
            average(row_, outcome.acceptance_seconds / static_cast<double>(outcome.proposed + 1));
            const double rest =
                outcome.total_seconds - outcome.draft_seconds - outcome.target_seconds - outcome.acceptance_seconds;
            average(other_, std::max(0.0, rest));
        }
    }

    // What the model currently believes (for reports).
    [[nodiscard]] double acceptance_at(std::size_t i) const { return position_acceptance(i); }
    [[nodiscard]] std::size_t steps_observed() const { return steps_; }

private:
    static constexpr std::size_t kBins = 10;

    static std::size_t bin_of(float top) {
        return std::min(kBins - 1, static_cast<std::size_t>(std::max(0.0f, top) * static_cast<float>(kBins)));
    }
    static void average(double& into, double sample) { into = into < 0.0 ? sample : 0.9 * into + 0.1 * sample; }

    void ensure_positions(std::size_t n) {
        if (tested_.size() < n) {
            tested_.resize(n, 0.0);
            accepted_.resize(n, 0.0);
        }
    }

    [[nodiscard]] double position_acceptance(std::size_t i) const {
        double estimate = 0.5;  // before anything was measured
        for (std::size_t j = 0; j <= i; ++j) {
            const double t = j < tested_.size() ? tested_[j] : 0.0, a = j < accepted_.size() ? accepted_[j] : 0.0;
            estimate = (a + options_.prior_strength * estimate) / (t + options_.prior_strength);
        }
        return estimate;
    }
    [[nodiscard]] double bin_acceptance(float top, std::size_t i) const {
        const std::size_t bin = bin_of(top);
        return (bin_accepted_[bin] + options_.prior_strength * position_acceptance(i)) /
               (bin_tested_[bin] + options_.prior_strength);
    }
    [[nodiscard]] double expected_tokens(std::size_t k) const {
        double total = 1.0, survive = 1.0;
        for (std::size_t i = 0; i < k; ++i) {
            survive *= position_acceptance(i);
            total += survive;
        }
        return total;
    }
    // V(n): measured, else linear between the nearest measured widths (or
    // along the last measured slope; a flat line from one point).
    [[nodiscard]] double verify_seconds(std::size_t n) const {
        if (n < verify_.size() && verify_[n] >= 0.0) return verify_[n];
        std::size_t below = 0, above = 0;
        for (std::size_t w = std::min(n, verify_.size()); w-- > 1;)
            if (verify_[w] >= 0.0) { below = w; break; }
        for (std::size_t w = n + 1; w < verify_.size(); ++w)
            if (verify_[w] >= 0.0) { above = w; break; }
        if (below && above)
            return verify_[below] + (verify_[above] - verify_[below]) * double(n - below) / double(above - below);
        const std::size_t known = below ? below : above;
        if (!known) return 1.0;
        std::size_t second = 0;  // another measured width for a slope
        for (std::size_t w = 1; w < verify_.size(); ++w)
            if (w != known && verify_[w] >= 0.0) second = w;
        if (!second) return verify_[known];
        const double slope = (verify_[known] - verify_[second]) / (double(known) - double(second));
        return std::max(verify_[known], verify_[known] + slope * (double(n) - double(known)));
    }
    [[nodiscard]] double step_seconds(std::size_t k) const {
        const double d = draft_pass_ > 0.0 ? draft_pass_ : 0.0;
        const double r = row_ > 0.0 ? row_ : 0.0, o = other_ > 0.0 ? other_ : 0.0;
        return static_cast<double>(k) * d + verify_seconds(k + 1) + static_cast<double>(k + 1) * r + o;
    }

    // Drafter-side: the cost threshold (keep draft i while its marginal rate
    // beats the planned rate); records each q's top probability for learning.
    bool stop_before(const DraftCandidate& candidate) {
        top_probabilities_.push_back(candidate.top_probability);
        const std::size_t i = candidate.index;
        if (i == 0) {
            kept_probability_ = bin_acceptance(candidate.top_probability, 0);
            return false;  // at least one draft once a step was planned with k > 0
        }
        const double accept = bin_acceptance(candidate.top_probability, i);
        const double gain = kept_probability_ * accept;
        const double cost = std::max(1e-12, verify_seconds(i + 2) - verify_seconds(i + 1) + std::max(0.0, row_) +
                                                (i + 1 < planned_ ? std::max(0.0, draft_pass_) : 0.0));
        if (gain / cost < target_rate_) {
            top_probabilities_.pop_back();
            return true;
        }
        kept_probability_ = gain;
        return false;
    }
    bool record(const DraftCandidate& candidate) {
        top_probabilities_.push_back(candidate.top_probability);
        return false;
    }

    Options options_;
    std::size_t steps_ = 0;
    std::size_t planned_ = 0;
    bool stopping_ = false;
    double target_rate_ = 0.0;
    double kept_probability_ = 1.0;
    std::vector<double> tested_, accepted_;
    std::array<double, kBins> bin_tested_{}, bin_accepted_{};
    std::vector<float> top_probabilities_;
    double draft_pass_ = -1.0, row_ = -1.0, other_ = -1.0;
    std::vector<double> verify_;

public:
    // The drafter's stop hook (see plan()).
    bool operator()(const DraftCandidate& candidate) { return stopping_ ? stop_before(candidate) : record(candidate); }
};

}  // namespace specdec
