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
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/acceptance_estimate.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/pass_costs.hpp"
#include "specdec/decoding/step_cost.hpp"

namespace specdec {

// What a policy decides for one step.
struct DraftPlan {
    std::size_t max_tokens = 0;  // draft at most this many (<= the decoder's cap)
    DraftStop stop{};            // optional early stop inside the draft
};

// What happened in one step, for policies that learn: its timings
// (StepTimings: passes, widths, seconds) and what verification decided.
struct StepOutcome : StepTimings {
    std::size_t proposed = 0;  // drafts the drafter returned
    std::size_t accepted = 0;  // drafts the rule kept (before stop tokens/callbacks)
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
        return candidate.formed && candidate.index >= min_tokens && candidate.top_probability < min_top_probability;
    }
};

// Chooses each step's draft length to maximise expected tokens per second,
// from what it measures while generating (docs/design/cost-model.md):
//   a_i   acceptance of draft i given drafts 0..i-1 were kept, and A(t) of a
//         draft whose q has top probability t (AcceptanceEstimate,
//         ConfidenceBins: decayed, shrunk towards the neighbour position);
//   d, e, V(n), r, o  the step-cost model's parts (PassCosts): the draft
//         pass, a step's drafting overhead, the target pass over n tokens,
//         acceptance work per verified row and the rest of a step.
// plan(): k* = argmax_k E(k) / T(k) with E(k) = 1 + sum_{i<k} prod_{j<=i} a_j
// and T(k) = step_seconds() of k rounds of one sequence and a pass of k + 1
// tokens, i.e. (k + e) d + V(k + 1) + (k + 1) r + o (no (k + e) d for k = 0),
// and R = E(k*) / T(k*), the rate of the best fixed length; k* = 0 means
// speculation does not pay. The draft may then run to k* + max_extension
// drafts (within the cap), each draft decided by its worth in tokens less R
// times seconds (the rate-optimal stop of a renewal process; Dinkelbach).
// With K the probability that every draft kept so far is accepted, keeping
// draft i and drafting on to m drafts is worth W_i(m) = K A(t_i) (1 + a' +
// a'^2 ...) - R (V(m + 1) - V(i + 1) + (m - i) r + (m - i - 1) d), the later
// drafts valued at a', the acceptance of a q not yet formed:
//   before the pass that would form q_i: spend it iff sum_t P(t) max(0,
//   max_m W_i(m)) >= R d;
//   once q_i is formed: keep draft i iff max_m W_i(m) >= 0.
// Spans to m keep it from stopping where one more draft does not pay but two
// do (V(n) is lumpy on a CPU: tile shapes change with the width). The
// extension is bounded because the worth of drafts far beyond k* rests on
// what is measured least (deep acceptance, widths only the stop would time).
// Every explore_every-th step drafts exactly k* + 1 or k* - 1 (in turn,
// without the stop), so that unfiltered acceptance and the widths around k*
// keep being timed. While k* stays 0 the interval doubles after each such
// step (up to max_explore_every): there each exploring step pays a draft
// pass, the draft's catching up on every token since the last one and a
// wider target pass, which on an engine whose wider passes cost nearly as
// much as separate ones made plain decoding with probes every 16 steps
// several percent slower than plain decoding. Any k* > 0 restores the
// interval. The lengths depend on measured times, so two runs with
// one seed may choose differently (each run is still exact).
class AutoLength {
public:
    struct Options {
        std::size_t warmup_steps = 4;     // steps before the model decides: warmup_length, 1, warmup_length, 2, ...
        std::size_t warmup_length = 4;
        std::size_t explore_every = 16;   // one step in this many drafts k* + 1 or k* - 1 (in turn)
        std::size_t max_explore_every = 256;  // the interval's bound while k* = 0 (see the class comment)
        double decay = 0.98;              // per-step weight of older acceptance samples
        double prior_strength = 4.0;      // pseudo-samples pulling a_i towards a_{i-1}
        double bin_prior_strength = 1.0;  // pseudo-samples pulling A(t) towards a_i
        bool confidence_stop = true;      // decide each draft by its marginal worth (else: k* drafts a step)
        std::size_t max_extension = 2;    // the stop may draft up to k* + this many (within the cap)
    };

    AutoLength() : AutoLength(Options{}) {}
    explicit AutoLength(Options options)
        : options_(options),
          positions_(options.decay, options.prior_strength),
          bins_(options.decay, options.bin_prior_strength) {
        if (!(options_.decay > 0.0 && options_.decay <= 1.0)) {
            std::ostringstream message;
            message << "invalid AutoLength decay = " << options_.decay << ": expected a value in (0, 1]";
            throw Error(message.str());
        }
    }

    DraftPlan plan(std::size_t cap, std::uint64_t) {
        positions_.reserve(cap);
        // Warm-up: full-length drafts (acceptance at every depth) alternating
        // with short ones (1, 2, ...), so that the cost model starts from
        // several pass widths rather than extrapolating from one.
        planned_ = std::min(cap, steps_ % 2 == 0 ? options_.warmup_length : 1 + steps_ / 2);
        stopping_ = false;
        if (steps_ >= options_.warmup_steps && cap > 0) {
            std::size_t best = 0;
            double best_rate = 0.0;
            for (std::size_t k = 0; k <= cap; ++k) {
                const double rate = chain_expected_tokens(k, [this](std::size_t i) { return acceptance_at(i); }) /
                                    step_seconds(k);
                if (rate > best_rate) {
                    best_rate = rate;
                    best = k;
                }
            }
            // Exploration alternates between the two neighbours of k*, so that
            // the widths on either side keep being timed (a width never timed
            // again keeps whatever a slow moment once made of it).
            if (best > 0) explore_interval_ = options_.explore_every;
            const bool explore = options_.explore_every > 0 && steps_ - last_exploration_ >= explore_interval_;
            planned_ = best;
            if (explore) {
                last_exploration_ = steps_;
                if (best == 0)
                    explore_interval_ = std::max(options_.explore_every,
                                                 std::min(2 * explore_interval_, options_.max_explore_every));
                const bool up = (explorations_++ % 2 == 0 && best < cap) || best == 0;
                planned_ = up ? best + 1 : best - 1;
            } else if (best > 0 && options_.confidence_stop) {
                planned_ = std::min(cap, best + options_.max_extension);  // the stop decides each draft
                stopping_ = true;
            }
            target_rate_ = best_rate;
        }
        kept_probability_ = 1.0;
        top_probabilities_.clear();
        if (stopping_) {
            unformed_acceptance_.assign(planned_ + 1, 0.0);
            for (std::size_t i = 0; i <= planned_; ++i) unformed_acceptance_[i] = bins_.unformed(acceptance_at(i));
        }
        return {planned_, DraftStop(*this)};
    }

    void observe(const StepOutcome& outcome) {
        ++steps_;
        // Acceptance by position: draft i was tested if drafts < i were kept.
        positions_.age();
        const std::size_t tested = std::min(outcome.proposed, outcome.accepted + 1);
        positions_.reserve(outcome.proposed);
        for (std::size_t i = 0; i < tested; ++i) positions_.count(i, 0, 1.0, i < outcome.accepted ? 1.0 : 0.0);
        bins_.age_formed();
        for (std::size_t i = 0; i < tested && i < top_probabilities_.size(); ++i)
            bins_.tested(top_probabilities_[i], i < outcome.accepted);
        // a_i is read many times per draft: computed once per step.
        position_acceptance_ = positions_.chain();
        bins_.refresh();
        costs_.observe(outcome, options_.decay);
    }

    // What the model currently believes (for reports): a_i (0.5 before any step).
    [[nodiscard]] double acceptance_at(std::size_t i) const {
        if (position_acceptance_.empty()) return 0.5;
        return position_acceptance_[std::min(i, position_acceptance_.size() - 1)];
    }
    [[nodiscard]] std::size_t steps_observed() const { return steps_; }

    // The drafter's stop hook (see plan()).
    bool operator()(const DraftCandidate& candidate) { return stopping_ ? stop_before(candidate) : record(candidate); }

private:
    [[nodiscard]] double step_seconds(std::size_t k) const {
        return specdec::step_seconds(costs_, rounds_.of(k), k + 1);
    }

    // Each draft's worth against the planned rate (see the class comment).
    bool stop_before(const DraftCandidate& candidate) {
        const std::size_t i = candidate.index;
        if (!candidate.formed) {
            double worth = 0.0;
            for (std::size_t bin = 0; bin < ConfidenceBins::kBins; ++bin)
                worth += bins_.formed_in(bin) *
                         std::max(0.0, span_worth(i, kept_probability_ * bins_.acceptance(bin, acceptance_at(i))));
            const double seen = bins_.formed_total();
            return seen > 0.0 && worth < seen * target_rate_ * costs_.draft_pass();
        }
        record(candidate);
        const double accept = bins_.acceptance(ConfidenceBins::bin_of(candidate.top_probability), acceptance_at(i));
        if (span_worth(i, kept_probability_ * accept) < 0.0) {
            top_probabilities_.pop_back();
            return true;
        }
        kept_probability_ *= accept;
        return false;
    }
    // The worth of keeping draft i, accepted with probability `reach` (with
    // every draft before it), and drafting on to m drafts, for the best m up
    // to the plan: the later drafts valued at the acceptance of a q not yet
    // formed, each costing its pass and a wider verification. Spans rather
    // than draft i alone, because V(n) need not grow evenly.
    [[nodiscard]] double span_worth(std::size_t i, double reach) const {
        const double d = costs_.draft_pass(), r = costs_.row_seconds(), base = costs_.verify_seconds(i + 1);
        double tokens = 0.0, survive = reach, best = -std::numeric_limits<double>::infinity();
        for (std::size_t m = i + 1; m <= std::max(planned_, i + 1); ++m) {
            tokens += survive;  // draft m - 1 kept
            const double seconds = costs_.verify_seconds(m + 1) - base + static_cast<double>(m - i) * r +
                                   static_cast<double>(m - i - 1) * d;
            best = std::max(best, tokens - target_rate_ * seconds);
            survive *= m < unformed_acceptance_.size() ? unformed_acceptance_[m] : 0.0;
        }
        return best;
    }
    bool record(const DraftCandidate& candidate) {
        if (candidate.formed) {
            top_probabilities_.push_back(candidate.top_probability);
            bins_.formed(candidate.top_probability);
        }
        return false;
    }

    Options options_;
    std::size_t steps_ = 0, explorations_ = 0, planned_ = 0;
    std::size_t explore_interval_ = options_.explore_every, last_exploration_ = 0;  // see plan()
    bool stopping_ = false;
    double target_rate_ = 0.0;       // R
    double kept_probability_ = 1.0;  // K
    AcceptanceEstimate positions_;   // a_i, as rank 0 of a chain
    std::vector<double> position_acceptance_;  // positions_.chain() after the last step
    ConfidenceBins bins_;
    std::vector<float> top_probabilities_;     // of this step's formed q
    std::vector<double> unformed_acceptance_;  // a' per draft position, for this step's stop
    PassCosts costs_;
    SingleSequenceRounds rounds_;
};

}  // namespace specdec
