#pragma once
// The timings behind the step-cost model (step_cost.hpp): robust recent
// medians (RecentTimings), a pass's cost by width (PassCostCurve), and the
// parts of one sequence's step price (PassCosts: d, e, V(n), r, o), which
// AutoLength and AutoTree price through step_seconds().
// docs/design/cost-model.md gives the measurements behind each choice below.
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "specdec/decoding/step_cost.hpp"

namespace specdec {

// A timing's estimate: the median of its last nine samples. A pass that was
// preempted (or the first, cold one) does not move it; a lasting change of
// the machine's speed shows after five samples; and a width timed rarely is
// not stuck with an old outlier, as a moving average started from one would be.
class RecentTimings {
public:
    // The median is recomputed here, once per sample: the policies read it
    // for every candidate of every step.
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
    // The median; 0 before any sample.
    [[nodiscard]] double value() const { return median_; }

private:
    std::array<double, 9> values_{};
    std::size_t count_ = 0, next_ = 0;
    double median_ = 0.0;
};

// RecentTimings by a count (a pass width, a step's draft passes), each with
// how many recent samples timed it (every weight decays once per added
// sample). A count not timed for a long while (weight below kStaleWeight:
// ~110 samples at decay 0.98) is not fresh: its old median may be from
// another phase of the machine.
class TimingsByCount {
public:
    static constexpr double kStaleWeight = 0.1;

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

// V(n) from the recent medians of the widths timed so far, in whatever unit
// they were recorded in.
//
// A pass over more tokens never costs less, but single timings on a busy
// machine say otherwise often enough; a width timed once in a slow moment
// would look dearer than the next for a long time, and a policy reading
// differences V(n + 1) - V(n) would act on that noise. So the medians are
// replaced by their non-decreasing least-squares fit (pool-adjacent-
// violators), each width weighted by how many recent passes timed it. A stale
// width is left out and interpolated from fresher ones: kept in, it could
// keep a policy from ever coming near that width again to re-time it.
//
// Between fitted widths V is linear. Outside the timed range it errs on the
// dear side:
//   below the narrowest width w: V(w) (a narrower pass costs no more);
//   beyond the widest width w: V(w) n / w. A pass costs the larger of
//   streaming the weights (flat in n) and its arithmetic (proportional to n),
//   so past w it grows by at most V(w) / w a token. Extending the last slope
//   instead reads every wider width as free whenever the widest two are flat
//   or pooled to one value. Where passes really are flat (a GPU), a policy
//   that explores one width beyond its choice times the next width and climbs.
class PassCostCurve {
public:
    void add(std::size_t width, double cost, double decay) {
        timings_.add(width, cost, decay);
        refit();
    }
    // V(n), or -1 before any width was timed.
    [[nodiscard]] double at(std::size_t n) const {
        const std::vector<double>& v = fit_;
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

    // V(n) where n was timed; otherwise V at the nearest timed width above n
    // (beyond the widest, at() extrapolates), or -1 before any: for a policy
    // that may choose any width, whose cost is lumpy between the widths it
    // timed (a pass over a few more columns than a tile holds costs a whole
    // tile), so an untimed width is never cheaper than the next timed one.
    [[nodiscard]] double at_or_above(std::size_t n) const {
        const std::vector<double>& v = fit_;
        for (std::size_t w = n; w < v.size(); ++w)
            if (v[w] >= 0.0) return v[w];
        return at(n);
    }

    // The narrowest and the widest width with a fresh timing; 0 before any.
    [[nodiscard]] std::size_t narrowest() const {
        for (std::size_t w = 1; w < fit_.size(); ++w)
            if (fit_[w] >= 0.0) return w;
        return 0;
    }
    [[nodiscard]] std::size_t widest() const {
        for (std::size_t w = fit_.size(); w-- > 1;)
            if (fit_[w] >= 0.0) return w;
        return 0;
    }

private:
    void refit() {
        struct Block {
            double value, weight;
            std::size_t first, last;
        };
        std::vector<Block> blocks;
        for (std::size_t w = 1; w < timings_.size(); ++w) {
            if (!timings_.fresh(w)) continue;
            blocks.push_back({timings_.value(w), timings_.weight(w), w, w});
            while (blocks.size() > 1 && blocks[blocks.size() - 2].value > blocks.back().value) {
                const Block last = blocks.back();
                blocks.pop_back();
                Block& merged = blocks.back();
                merged.value = (merged.value * merged.weight + last.value * last.weight) / (merged.weight + last.weight);
                merged.weight += last.weight;
                merged.last = last.last;
            }
        }
        fit_.assign(timings_.size(), -1.0);
        for (const Block& block : blocks)
            for (std::size_t w = block.first; w <= block.last; ++w)
                if (timings_.fresh(w)) fit_[w] = block.value;
    }

    TimingsByCount timings_;
    std::vector<double> fit_;  // timings_ made non-decreasing; -1 where a width has no fresh timing
};

// The costs of a step's two passes: drafting and verification.
//
// Drafting costs (passes + e) draft passes of d seconds: a step's first draft
// pass runs on caches the target's pass has just swept (and catches up on up
// to two tokens). Dividing the draft time by the passes would make the unit
// below larger in short steps than in long ones. e is fitted through the
// recent medians of the draft time by pass count (the line's intercept over
// its slope: a ratio of two times, which a machine speeding up or slowing
// down leaves be), bounded by one pass so that a line through two noisy
// medians early on cannot claim that drafting is mostly overhead.
//
// V(n) is kept in draft passes of the same step, times the current d: on a
// shared machine both models slow down and speed up together, and widths
// timed in different phases, compared in seconds, would say more about the
// phases than the widths. A drafter without passes (prompt lookup) leaves
// seconds as the unit. Before any width was timed V(n) = 1 s: speculation
// looks expensive, and the policy's warm-up is what gets measured first.
class PassCosts {
public:
    // One step's timings: d, e and V as below, and, where its target pass was
    // recorded, r (acceptance seconds per verified row) and o (what the step
    // took beyond its passes and acceptance).
    void observe(const StepTimings& step, double decay) {
        if (!observe(step.draft_passes, step.draft_seconds, step.target_width, step.target_seconds, decay)) return;
        row_.add(step.acceptance_seconds / static_cast<double>(step.target_width));
        other_.add(std::max(0.0, step.total_seconds - step.draft_seconds - step.target_seconds - step.acceptance_seconds));
    }

    // The parts of step_seconds(): a round is one draft pass.
    [[nodiscard]] double pass_seconds(std::size_t n) const { return verify_seconds(n); }
    [[nodiscard]] double round_seconds(std::size_t) const { return draft_pass(); }
    [[nodiscard]] double drafting_overhead_seconds() const { return overhead_ * draft_pass(); }
    [[nodiscard]] double row_seconds() const { return row_.value(); }
    [[nodiscard]] double other_seconds() const { return other_.value(); }

    // The timings of a step alone. Returns whether its target pass was
    // recorded (a step with a target pass, and a known pace).
    bool observe(std::size_t draft_passes, double draft_seconds, std::size_t verified_tokens, double target_seconds,
                 double decay) {
        double pace = draft_pass_.value();  // seconds per draft pass now
        if (draft_passes > 0) {
            fit_overhead(draft_passes, draft_seconds, decay);
            pace = draft_seconds / (static_cast<double>(draft_passes) + overhead_);
            draft_pass_.add(pace);
        }
        if (verified_tokens > 0 && unit_ == Unit::undecided) unit_ = draft_passes > 0 ? Unit::draft_passes : Unit::seconds;
        if (unit_ != Unit::draft_passes) pace = 1.0;
        if (verified_tokens == 0 || !(pace > 0.0)) return false;
        verify_.add(verified_tokens, target_seconds / pace, decay);
        return true;
    }

    // d: seconds of one draft pass, the step's overhead apart (0 before any).
    [[nodiscard]] double draft_pass() const { return draft_pass_.value(); }
    // e: a step's drafting costs (passes + e) draft passes.
    [[nodiscard]] double draft_overhead() const { return overhead_; }
    // Seconds of a step's drafting over `passes` passes (0 without drafting).
    [[nodiscard]] double drafting_seconds(std::size_t passes) const {
        return passes > 0 ? (static_cast<double>(passes) + overhead_) * draft_pass_.value() : 0.0;
    }
    // V(n): seconds of a target pass over n tokens.
    [[nodiscard]] double verify_seconds(std::size_t n) const {
        const double fitted = verify_.at(n);
        return fitted < 0.0 ? 1.0 : fitted * (unit_ == Unit::draft_passes ? draft_pass_.value() : 1.0);
    }

private:
    void fit_overhead(std::size_t passes, double seconds, double decay) {
        by_passes_.add(passes, seconds, decay);
        double sw = 0.0, sp = 0.0, sy = 0.0, spp = 0.0, spy = 0.0;
        std::size_t counts = 0;
        for (std::size_t n = 1; n < by_passes_.size(); ++n) {
            if (!by_passes_.fresh(n)) continue;
            const double w = by_passes_.weight(n), x = static_cast<double>(n), y = by_passes_.value(n);
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
        overhead_ = slope > 0.0 ? std::clamp(intercept / slope, 0.0, 1.0) : 0.0;
    }

    enum class Unit { undecided, draft_passes, seconds };
    Unit unit_ = Unit::undecided;  // of V(n), chosen at the first verified step
    RecentTimings draft_pass_;     // seconds per draft pass, overhead apart
    TimingsByCount by_passes_;     // a step's draft seconds, by its passes
    double overhead_ = 0.0;        // e
    PassCostCurve verify_;         // a target pass in the unit, by its width
    RecentTimings row_, other_;    // r and o
};

}  // namespace specdec
