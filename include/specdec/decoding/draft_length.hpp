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
#include <limits>
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
        return candidate.formed && candidate.index >= min_tokens && candidate.top_probability < min_top_probability;
    }
};

// Chooses each step's draft length to maximise expected tokens per second,
// from what it measures while generating:
//   a_i   acceptance of draft i given drafts 0..i-1 were kept (decayed counts,
//         shrunk towards a_{i-1} where a position has few samples: acceptance
//         rarely grows with depth, so an unmeasured position is not promised more);
//   A(t)  acceptance of a draft whose q has top probability t, and P(t) how
//         often q has it (10 bins; at position i, A(t) is a_i times the bin's
//         acceptance relative to all bins');
//   d     seconds per draft pass, and e the extra passes' worth a step's
//         drafting costs beyond its passes (its first pass runs cold); V(n)
//         seconds of a target pass over n tokens,
//         kept as draft passes of the same step (so that widths timed while
//         the machine was slow and while it was fast compare) times the
//         current d (the measured widths' recent medians fitted non-decreasing
//         in n, unmeasured widths interpolated linearly, and a width beyond
//         the widest timed one taken as compute-bound: V(n) = V(w) n / w,
//         the steepest a pass can grow); r per verified row of
//         acceptance work; o the rest of a step.
// plan(): k* = argmax_k E(k) / T(k) with E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j and
// T(k) = (k + e) d + V(k + 1) + (k + 1) r + o (T(0) = V(1) + r + o), and
// R = E(k*) / T(k*), the rate of
// the best fixed length. k* = 0: no drafting (speculation does not pay).
// Otherwise the draft may run to k* + max_extension drafts (at most the cap),
// and each draft is decided by its worth in tokens less R times seconds (the rate-optimal stop of a renewal
// process; Dinkelbach). With K the probability that every draft kept so far
// is accepted (the product of their A(t)), keeping draft i and drafting on
// to m drafts is worth W_i(m) = K A(t_i) (1 + a' + a'^2 ...) - R (V(m + 1) -
// V(i + 1) + (m - i) r + (m - i - 1) d), the later drafts valued at a', the
// acceptance of a q not yet formed (A(t) averaged over P(t)):
//   before the draft pass that would form q_i: spend it iff the draft it
//   forms is worth the pass in expectation, sum_t P(t) max(0, max_m W_i(m))
//   >= R d;
//   once q_i is formed (the pass spent): keep draft i iff max_m W_i(m) >= 0.
// Where K only falls and V grows evenly this is the one-step rule, optimal
// for such a monotone stopping problem; spans to m keep it from stopping
// where one more draft does not pay but two do (V(n) is lumpy on a CPU:
// tile shapes change with the width). With an uninformative q this drafts
// k* (the marginal conditions of E(k) / T(k)); with an informative one it
// drafts on while the drafts are confident and stops early where they are
// not, without wasting the pass of a draft it would not keep. The extension
// is bounded because the worth of drafts far beyond k* rests on what is
// measured least: acceptance at deep positions, and pass widths that only
// the stop itself would time (exploration times k* +- 1 drafts); with the
// whole cap open, one run drafted 6 where 3 was best and lost 14%. Every
// explore_every-th step drafts exactly k* + 1 or k* - 1 (in turn, without
// the stop) so that unfiltered acceptance and the pass widths around k* keep
// being measured. The lengths depend on measured times, so two runs with the
// same seed may choose differently (each run is still exact).
class AutoLength {
public:
    struct Options {
        std::size_t warmup_steps = 4;     // steps before the model decides: warmup_length, 1, warmup_length, 2, ...
        std::size_t warmup_length = 4;
        std::size_t explore_every = 16;   // one step in this many drafts k* + 1 or k* - 1 (in turn)
        double decay = 0.98;              // per-step weight of older acceptance samples
        double prior_strength = 4.0;      // pseudo-samples pulling a_i towards a_{i-1}
        double bin_prior_strength = 1.0;  // pseudo-samples pulling A(t) towards a_i
        bool confidence_stop = true;      // decide each draft by its marginal worth (else: k* drafts a step)
        std::size_t max_extension = 2;    // the stop may draft up to k* + this many (within the cap)
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
        // Warm-up: full-length drafts (acceptance at every depth) alternating
        // with short ones (1, 2, ...), so that the cost model starts from
        // several pass widths rather than extrapolating from one.
        planned_ = std::min(cap, steps_ % 2 == 0 ? options_.warmup_length : 1 + steps_ / 2);
        bool explore = false;
        stopping_ = false;
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
            // Exploration alternates between the two neighbours of k*, so that
            // the widths on either side keep being timed (a width never timed
            // again keeps whatever a slow moment once made of it).
            explore = options_.explore_every > 0 && steps_ % options_.explore_every == 0;
            planned_ = best;
            if (explore) {
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
            // Acceptance of a draft whose q is not formed yet: A(t) averaged
            // over how often q has had each top probability.
            unformed_acceptance_.assign(planned_ + 1, 0.0);
            double seen = 0.0;
            for (const double count : bin_formed_) seen += count;
            for (std::size_t i = 0; i <= planned_; ++i) {
                double sum = 0.0;
                for (std::size_t bin = 0; bin < kBins; ++bin) sum += bin_formed_[bin] * bin_acceptance(bin, i);
                unformed_acceptance_[i] = seen > 0.0 ? sum / seen : position_acceptance(i);
            }
        }
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
        for (double& seen : bin_formed_) seen *= options_.decay;
        for (std::size_t i = 0; i < tested && i < top_probabilities_.size(); ++i) {
            const std::size_t bin = bin_of(top_probabilities_[i]);
            bin_tested_[bin] = bin_tested_[bin] * options_.decay + 1.0;
            bin_accepted_[bin] = bin_accepted_[bin] * options_.decay + (i < outcome.accepted ? 1.0 : 0.0);
        }
        refresh_acceptance();
        // Costs. A target pass is recorded in draft passes of the same step:
        // on a shared machine the speed of both models drifts together (by a
        // third within a minute here), and widths timed in different phases,
        // compared in seconds, would say more about the phases than the widths.
        // A drafter without passes (prompt lookup) leaves seconds as the unit.
        double pace = draft_pass_.value();  // seconds per draft pass now
        if (outcome.draft_passes > 0) {
            record_draft_seconds(outcome.draft_passes, outcome.draft_seconds);
            pace = outcome.draft_seconds / (static_cast<double>(outcome.draft_passes) + draft_overhead_);
            draft_pass_.add(pace);
        }
        if (outcome.verified_tokens > 0 && cost_unit_ == CostUnit::undecided)
            cost_unit_ = outcome.draft_passes > 0 ? CostUnit::draft_passes : CostUnit::seconds;
        if (cost_unit_ != CostUnit::draft_passes) pace = 1.0;
        if (outcome.verified_tokens > 0 && pace > 0.0) {
            const std::size_t n = outcome.verified_tokens;
            verify_.add(n, outcome.target_seconds / pace, options_.decay);
            fit_verify_costs();
            row_.add(outcome.acceptance_seconds / static_cast<double>(outcome.proposed + 1));
            const double rest =
                outcome.total_seconds - outcome.draft_seconds - outcome.target_seconds - outcome.acceptance_seconds;
            other_.add(std::max(0.0, rest));
        }
    }

    // What the model currently believes (for reports).
    [[nodiscard]] double acceptance_at(std::size_t i) const { return position_acceptance(i); }
    [[nodiscard]] std::size_t steps_observed() const { return steps_; }

private:
    static constexpr std::size_t kBins = 10;
    static constexpr double kStaleWeight = 0.1;

    static std::size_t bin_of(float top) {
        return std::min(kBins - 1, static_cast<std::size_t>(std::max(0.0f, top) * static_cast<float>(kBins)));
    }
    // A timing's estimate: the median of its last nine samples. A pass that
    // was preempted (3x or 10x slower once, or the first, cold one) does not
    // move it; a lasting change of the machine's speed shows after five
    // samples; and a width timed rarely is not stuck with an old outlier
    // (as a moving average started from one would be for many samples).
    class RecentTimings {
    public:
        // The median is recomputed here, once per sample: plan() reads it for
        // every candidate length of every step.
        void add(double seconds) {
            values_[next_] = seconds;
            next_ = (next_ + 1) % values_.size();
            count_ = std::min(count_ + 1, values_.size());
            std::array<double, 9> sorted{};  // insertion sort: at most nine values
            for (std::size_t i = 0; i < count_; ++i) {
                std::size_t j = i;
                for (; j > 0 && sorted[j - 1] > values_[i]; --j) sorted[j] = sorted[j - 1];
                sorted[j] = values_[i];
            }
            median_ = count_ % 2 == 1 ? sorted[count_ / 2] : 0.5 * (sorted[count_ / 2 - 1] + sorted[count_ / 2]);
        }
        [[nodiscard]] bool empty() const { return count_ == 0; }
        // The median (seconds); 0 before any sample.
        [[nodiscard]] double value() const { return median_; }

    private:
        std::array<double, 9> values_{};
        std::size_t count_ = 0, next_ = 0;
        double median_ = 0.0;
    };
    // RecentTimings by a count (a pass width, a step's draft passes), each
    // with how many recent steps timed it (decayed once per added sample).
    // A count not timed for a long while (weight below kStaleWeight: ~110
    // steps at the default decay) is not fresh: its old median may be from
    // another phase of the machine.
    class TimingsByCount {
    public:
        void add(std::size_t n, double seconds, double decay) {
            if (timings_.size() < n + 1) {
                timings_.resize(n + 1);
                weights_.resize(n + 1, 0.0);
            }
            timings_[n].add(seconds);
            for (double& weight : weights_) weight *= decay;
            weights_[n] += 1.0;
        }
        [[nodiscard]] std::size_t size() const { return timings_.size(); }  // counts 0 .. size() - 1
        [[nodiscard]] bool fresh(std::size_t n) const {
            return n < timings_.size() && !timings_[n].empty() && weights_[n] >= kStaleWeight;
        }
        [[nodiscard]] double value(std::size_t n) const { return timings_[n].value(); }
        [[nodiscard]] double weight(std::size_t n) const { return weights_[n]; }

    private:
        std::vector<RecentTimings> timings_;
        std::vector<double> weights_;
    };

    void ensure_positions(std::size_t n) {
        if (tested_.size() < n) {
            tested_.resize(n, 0.0);
            accepted_.resize(n, 0.0);
        }
    }

    // a_i: the decayed acceptance at position i, pulled towards a_{i-1} by
    // prior_strength pseudo-samples (a position never tested takes the
    // deepest estimate; before anything was measured, 0.5). Read many times
    // per draft, so observe() computes it once per step (refresh_acceptance).
    [[nodiscard]] double position_acceptance(std::size_t i) const {
        if (position_acceptance_.empty()) return 0.5;
        return position_acceptance_[std::min(i, position_acceptance_.size() - 1)];
    }
    void refresh_acceptance() {
        position_acceptance_.resize(tested_.size());
        double estimate = 0.5;
        for (std::size_t j = 0; j < tested_.size(); ++j) {
            estimate = (accepted_[j] + options_.prior_strength * estimate) / (tested_[j] + options_.prior_strength);
            position_acceptance_[j] = estimate;
        }
        double tested = 0.0, accepted = 0.0;
        for (std::size_t b = 0; b < kBins; ++b) {
            tested += bin_tested_[b];
            accepted += bin_accepted_[b];
        }
        pooled_acceptance_ = accepted > 0.0 ? accepted / tested : 0.0;
    }
    // A(t) at draft position i: a_i times how much more (or less) often than
    // average a draft with q's top probability in this bin is accepted. The
    // bins pool every position, and most of their samples are shallow drafts
    // (tested most often): read directly, they would value a deep draft at the
    // acceptance of the first ones (on the 100m pair 0.9 at the first
    // position, 0.7 at the third), and the stop would draft on where a_i says
    // a fixed length would not (with the block rule one run drafted 5.6 a
    // step on average where 3 was best).
    [[nodiscard]] double bin_acceptance(std::size_t bin, std::size_t i) const {
        if (!(pooled_acceptance_ > 0.0)) return position_acceptance(i);
        const double pooled = pooled_acceptance_;
        const double bin_rate = (bin_accepted_[bin] + options_.bin_prior_strength * pooled) /
                                (bin_tested_[bin] + options_.bin_prior_strength);
        return std::min(1.0, position_acceptance(i) * bin_rate / pooled);
    }
    [[nodiscard]] double expected_tokens(std::size_t k) const {
        double total = 1.0, survive = 1.0;
        for (std::size_t i = 0; i < k; ++i) {
            survive *= position_acceptance(i);
            total += survive;
        }
        return total;
    }
    // V(n): the width's cost in draft passes times the current draft pass
    // (in seconds for a drafter without passes; before any width was timed:
    // 1 s, i.e. speculation looks expensive and the warm-up's lengths are what
    // gets measured first).
    [[nodiscard]] double verify_seconds(std::size_t n) const {
        const double fitted = verify_fit_units(n);
        return fitted < 0.0 ? 1.0 : fitted * (cost_unit_ == CostUnit::draft_passes ? draft_pass_.value() : 1.0);
    }
    // The fitted cost (in the cost unit) of a measured width, else linear
    // between the nearest measured widths; -1 before any width was measured.
    // Outside the measured range the estimate errs on the dear side:
    //   below the narrowest width w: V(w) (a narrower pass costs no more);
    //   beyond the widest width w: V(w) n / w. A pass costs the larger of
    //   streaming the weights (flat in n) and its arithmetic (proportional to
    //   n), so past w it grows by at most V(w) / w a token. Extrapolating the
    //   last measured slope instead read widths never timed as free whenever
    //   the widest two had pooled to one value (a plateau, or noise the
    //   monotone fit evened out): on the 100m pair the plan then drafted 6 to
    //   8 tokens a step, width 7 costing 22.5 ms against 19.1 ms for width 6.
    //   Where passes really are flat (a GPU), exploration drafts k* + 1 once
    //   in 2 explore_every steps, timing the next width, and k* climbs one
    //   width at a time.
    [[nodiscard]] double verify_fit_units(std::size_t n) const {
        const std::vector<double>& v = verify_fit_;
        if (n < v.size() && v[n] >= 0.0) return v[n];
        std::size_t below = 0, above = 0;
        for (std::size_t w = std::min(n, v.size()); w-- > 1;)
            if (v[w] >= 0.0) { below = w; break; }
        for (std::size_t w = n + 1; w < v.size(); ++w)
            if (v[w] >= 0.0) { above = w; break; }
        if (below && above) return v[below] + (v[above] - v[below]) * double(n - below) / double(above - below);
        if (below) return v[below] * double(n) / double(below);
        if (above) return v[above];
        return -1.0;
    }
    // A pass over more tokens never costs less, but single timings on a busy
    // machine say otherwise often enough: a width timed once in a slow moment
    // would look dearer than the next one for a long time, and the in-draft
    // stop, which reads differences V(n + 1) - V(n), would act on that noise.
    // So the per-width medians are replaced by their non-decreasing
    // least-squares fit (pool-adjacent-violators), each width weighted by
    // how many recent passes measured it.
    void fit_verify_costs() {
        struct Block {
            double value, weight;
            std::size_t first, last;
        };
        std::vector<Block> blocks;
        for (std::size_t w = 1; w < verify_.size(); ++w) {
            // A stale width is left out and interpolated from fresher ones:
            // leaving it in could keep k* from ever coming near that width
            // again to re-time it.
            if (!verify_.fresh(w)) continue;
            blocks.push_back({verify_.value(w), verify_.weight(w), w, w});
            while (blocks.size() > 1 && blocks[blocks.size() - 2].value > blocks.back().value) {
                const Block last = blocks.back();
                blocks.pop_back();
                Block& merged = blocks.back();
                merged.value = (merged.value * merged.weight + last.value * last.weight) / (merged.weight + last.weight);
                merged.weight += last.weight;
                merged.last = last.last;
            }
        }
        verify_fit_.assign(verify_.size(), -1.0);
        for (const Block& block : blocks)
            for (std::size_t w = block.first; w <= block.last; ++w)
                if (verify_.fresh(w)) verify_fit_[w] = block.value;
    }
    [[nodiscard]] double step_seconds(std::size_t k) const {
        const double d = draft_pass_.value(), r = row_.value(), o = other_.value();
        const double drafting = k > 0 ? (static_cast<double>(k) + draft_overhead_) * d : 0.0;
        return drafting + verify_seconds(k + 1) + static_cast<double>(k + 1) * r + o;
    }

    // A step's drafting costs more than its passes: the first pass runs on
    // caches the target's pass has just swept (and catches up on up to two
    // tokens). Measured on the 100m pair: 2.7 ms for one pass, 2.3 ms a pass
    // for three. Dividing the draft time by the passes would then make the
    // unit of V(n) larger in short steps than in long ones, and a width timed
    // in one-draft steps would look cheaper than it is: V(2) came out 4 ms
    // below V(3) where the passes differ by 1 ms, and the plan drafted one
    // token a step where three paid more. So drafting is modelled as
    // (passes + e) draft passes, e fitted through the recent medians of the
    // draft time by pass count (the line's intercept over its slope: a ratio
    // of two times, so a machine that speeds up or slows down leaves it be).
    void record_draft_seconds(std::size_t passes, double seconds) {
        draft_by_passes_.add(passes, seconds, options_.decay);
        double sw = 0.0, sp = 0.0, sy = 0.0, spp = 0.0, spy = 0.0;
        std::size_t counts = 0;
        for (std::size_t n = 1; n < draft_by_passes_.size(); ++n) {
            if (!draft_by_passes_.fresh(n)) continue;
            const double w = draft_by_passes_.weight(n), x = static_cast<double>(n), y = draft_by_passes_.value(n);
            sw += w;
            sp += w * x;
            sy += w * y;
            spp += w * x * x;
            spy += w * x * y;
            ++counts;
        }
        const double spread = sw * spp - sp * sp;
        if (counts < 2 || !(spread > 0.0)) return;  // one pass count: nothing to fit a line to
        const double slope = (sw * spy - sp * sy) / spread, intercept = (sy - slope * sp) / sw;
        // Bounded by one pass (0.25 was measured): a line through two noisy
        // medians, early on, could otherwise claim that drafting is mostly
        // overhead and make long drafts look cheap.
        draft_overhead_ = slope > 0.0 ? std::clamp(intercept / slope, 0.0, 1.0) : 0.0;
    }

    // Drafter-side: each draft's worth against the planned rate (see the
    // class comment); records each formed q's top probability for learning.
    bool stop_before(const DraftCandidate& candidate) {
        const std::size_t i = candidate.index;
        if (!candidate.formed) {
            double seen = 0.0, worth = 0.0;
            for (std::size_t bin = 0; bin < kBins; ++bin) {
                seen += bin_formed_[bin];
                worth += bin_formed_[bin] * std::max(0.0, span_worth(i, kept_probability_ * bin_acceptance(bin, i)));
            }
            return seen > 0.0 && worth < seen * target_rate_ * draft_pass_.value();
        }
        record(candidate);
        const double accept = bin_acceptance(bin_of(candidate.top_probability), i);
        if (span_worth(i, kept_probability_ * accept) < 0.0) {
            top_probabilities_.pop_back();
            return true;
        }
        kept_probability_ *= accept;
        return false;
    }
    // The worth (expected tokens less R times seconds) of keeping draft i,
    // accepted with probability `reach` (with every draft before it), and
    // drafting on to m drafts, for the best m up to the plan: the drafts
    // after i are valued at the acceptance of a q not yet formed, and cost
    // their passes and the wider verification. Spans rather than draft i
    // alone, because V(n) need not grow evenly: where V(3) - V(2) is large
    // and V(4) - V(3) small, one more draft does not pay but two do.
    [[nodiscard]] double span_worth(std::size_t i, double reach) const {
        const double d = draft_pass_.value(), r = row_.value(), base = verify_seconds(i + 1);
        double tokens = 0.0, survive = reach, best = -std::numeric_limits<double>::infinity();
        for (std::size_t m = i + 1; m <= std::max(planned_, i + 1); ++m) {
            tokens += survive;  // draft m - 1 kept
            const double seconds =
                verify_seconds(m + 1) - base + static_cast<double>(m - i) * r + static_cast<double>(m - i - 1) * d;
            best = std::max(best, tokens - target_rate_ * seconds);
            survive *= m < unformed_acceptance_.size() ? unformed_acceptance_[m] : 0.0;
        }
        return best;
    }
    bool record(const DraftCandidate& candidate) {
        if (candidate.formed) {
            top_probabilities_.push_back(candidate.top_probability);
            bin_formed_[bin_of(candidate.top_probability)] += 1.0;
        }
        return false;
    }

    Options options_;
    std::size_t steps_ = 0;
    std::size_t explorations_ = 0;
    std::size_t planned_ = 0;
    bool stopping_ = false;
    double target_rate_ = 0.0;
    double kept_probability_ = 1.0;
    enum class CostUnit { undecided, draft_passes, seconds };
    CostUnit cost_unit_ = CostUnit::undecided;  // of V(n), chosen at the first verified step
    std::vector<double> tested_, accepted_;
    std::vector<double> position_acceptance_;  // a_i (refresh_acceptance)
    double pooled_acceptance_ = 0.0;           // accepted / tested over every bin; 0 before any acceptance
    std::array<double, kBins> bin_tested_{}, bin_accepted_{}, bin_formed_{};
    std::vector<float> top_probabilities_;
    std::vector<double> unformed_acceptance_;  // per draft position, for this step's stop
    RecentTimings draft_pass_, row_, other_;  // draft_pass_: seconds per draft pass, overhead apart
    TimingsByCount draft_by_passes_;             // a step's draft seconds, by its passes
    double draft_overhead_ = 0.0;                 // e: a step's drafting costs (passes + e) draft passes
    TimingsByCount verify_;              // a target pass in the cost unit, by its width
    std::vector<double> verify_fit_;     // verify_ made non-decreasing (fit_verify_costs)

public:
    // The drafter's stop hook (see plan()).
    bool operator()(const DraftCandidate& candidate) { return stopping_ ? stop_before(candidate) : record(candidate); }
};

}  // namespace specdec
