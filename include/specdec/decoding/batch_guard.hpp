#pragma once
// The batch policy's guard and probes: what keeps the model's plans honest.
//
// BatchGuard compares, by batch size, the tokens per second of the plain
// steps (no drafts) with those of the steps that drafted by plan, counted
// twice: the tokens the plan expected over the time the steps took (checks
// the cost model) and the tokens they emitted (checks the acceptance the plan
// relied on). Where drafting recently lost by either count, plans are vetoed
// (plain steps), but for exploring probes of the plan, one of which that wins
// lifts the veto. The plain rate compared must be of the plan's own time: a
// host's speed drifts, so a plan lacking recent plain steps gets one (stale).
// While drafting clearly wins, plain probes are rare.
//
// BatchProbes shapes the steps that measure rather than exploit: warm-up,
// exploring one draft beyond the plan, and widening past the widest timed
// pass where the pass has stayed flat. Only timings, counts and caps are
// read: every plan stays exact.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "specdec/decoding/batch_model.hpp"
#include "specdec/decoding/batch_options.hpp"
#include "specdec/decoding/pass_costs.hpp"

namespace specdec {

// Tokens per second over a kind of step's last rate_window samples: the ratio
// of the sums (a step's tokens vary widely, so a mean of per-step rates would
// misjudge it). Each sample carries its step; samples(since) and value(since)
// read those from step `since` on.
class RecentRate {
public:
    explicit RecentRate(std::size_t window = 1) : samples_(window) {}
    void add(double tokens, double seconds, std::size_t step) {
        samples_[next_] = {tokens, seconds, step};
        next_ = (next_ + 1) % samples_.size();
        count_ = std::min(count_ + 1, samples_.size());
    }
    void restart(double tokens, double seconds, std::size_t step) {
        count_ = next_ = 0;
        add(tokens, seconds, step);
    }
    [[nodiscard]] std::size_t samples(std::size_t since = 0) const {
        std::size_t n = 0;
        for (std::size_t i = 0; i < count_; ++i) n += samples_[i].step >= since ? 1 : 0;
        return n;
    }
    [[nodiscard]] double value(std::size_t since = 0) const {
        double tokens = 0.0, seconds = 0.0;
        for (std::size_t i = 0; i < count_; ++i)
            if (samples_[i].step >= since) tokens += samples_[i].tokens, seconds += samples_[i].seconds;
        return seconds > 0.0 ? tokens / seconds : 0.0;
    }

private:
    struct Sample {
        double tokens = 0.0, seconds = 0.0;
        std::size_t step = 0;
    };
    std::vector<Sample> samples_;
    std::size_t count_ = 0, next_ = 0;
};

class BatchGuard {
public:
    explicit BatchGuard(const AutoBatchOptions& options) : options_(options) {}

    // What the step about to run is: planned drafts (expecting `tokens` from
    // `sequences` sequences), a probe of a vetoed plan, or anything else.
    void planned(double tokens, std::size_t sequences) {
        kind_ = Kind::planned_drafts;
        planned_tokens_ = tokens, planned_sequences_ = sequences;
    }
    void vetoed_probe() { kind_ = Kind::vetoed_probe; }
    void unplanned() { kind_ = Kind::other; }
    void plain_probe() { last_plain_probe_ = steps_; }
    void plain_refresh() { unplanned(), last_plain_probe_ = steps_, ++plain_refreshes_; }
    void skip_plain_probe() { kind_ = Kind::planned_drafts, ++plain_probes_skipped_; }

    // After each step, before the model learns from it (a probe's catch-up
    // round is judged by the draft rounds timed before it).
    void observe(const BatchOutcome& outcome, const PassCostCurve& draft_round) {
        ++steps_;
        const Kind kind = kind_;
        kind_ = Kind::other;
        const std::size_t n = outcome.sequences.size();
        if (n == 0 || !(outcome.total_seconds > 0.0)) return;
        double emitted = 0.0;
        bool drafted = false;
        for (const SequenceOutcome& s : outcome.sequences) {
            emitted += static_cast<double>(s.accepted + 1);
            drafted = drafted || s.proposed > 0;
        }
        ModeRates& r = rates_at(n);
        if (!drafted) {
            r.plain.add(emitted, outcome.total_seconds, steps_);
            return;
        }
        // A step whose sequences are not those planned (a request failed while
        // drafting) is left out: its plan's expectation is not its own.
        if (n != planned_sequences_) return;
        if (kind == Kind::planned_drafts) {
            r.planned_expected.add(planned_tokens_, outcome.total_seconds, steps_);
            r.planned_emitted.add(emitted, outcome.total_seconds, steps_);
        } else if (kind == Kind::vetoed_probe) {
            // A probe that beats the plain steps by a count ends what that
            // count held against the plan; one that loses is one more sample.
            const double seconds = probe_seconds(outcome, draft_round), plain = r.plain.value();
            const auto count = [&](RecentRate& rate, double tokens) {
                if (r.plain.samples() > 0 && tokens / seconds >= plain) rate.restart(tokens, seconds, steps_);
                else rate.add(tokens, seconds, steps_);
            };
            count(r.planned_expected, planned_tokens_);
            count(r.planned_emitted, emitted);
            if (!drafting_lost(n)) ++veto_lifts_;
        }
    }

    // Whether the recent planned steps at n sequences were slower than the
    // plain ones by either count. The plain rate is that of the plain
    // horizon where min_plain_samples were timed there, else of any age
    // (fallback_plain_samples at least): a plan losing by far is still
    // answered where the batch size changes often.
    [[nodiscard]] bool drafting_lost(std::size_t n) const {
        Rates d = rates(n, plain_horizon(), options_.min_plain_samples);
        if (d.plain == 0.0) d = rates(n, steps_, options_.fallback_plain_samples);
        return (d.expected && *d.expected < d.plain) || (d.emitted && *d.emitted < d.plain);
    }
    // Whether the planned steps beat the plain ones since the last rare probe
    // by clear_margin by both counts.
    [[nodiscard]] bool drafting_clearly_won(std::size_t n) const {
        const Rates d = rates(n, options_.max_plain_probe_every + plain_probe_interval(), options_.clear_plain_samples);
        const double bar = options_.clear_margin * d.plain;
        return d.expected && *d.expected >= bar && d.emitted && *d.emitted >= bar;
    }
    // Whether a plain probe may be left out now: drafting clearly wins and the
    // last plain probe is younger than max_plain_probe_every steps.
    [[nodiscard]] bool may_skip_plain_probe(std::size_t n) const {
        return steps_ - last_plain_probe_ < options_.max_plain_probe_every && drafting_clearly_won(n);
    }
    // Whether the plan drafted in min_planned_samples steps of the plain
    // horizon with fewer than min_plain_samples plain steps there to be
    // compared with (and does not clearly win): a stale plain rate reads a
    // losing plan as a winning one after the host sped up.
    [[nodiscard]] bool plain_rate_stale(std::size_t n) const {
        if (n >= rates_.size()) return false;
        const ModeRates& r = rates_[n];
        const std::size_t since = first_step_within(plain_horizon());
        return r.planned_expected.samples(since) >= options_.min_planned_samples &&
               r.plain.samples(since) < options_.min_plain_samples && !drafting_clearly_won(n);
    }

    [[nodiscard]] std::size_t steps() const { return steps_; }
    [[nodiscard]] std::size_t veto_lifts() const { return veto_lifts_; }
    [[nodiscard]] std::size_t plain_probes_skipped() const { return plain_probes_skipped_; }
    [[nodiscard]] std::size_t plain_refreshes() const { return plain_refreshes_; }

private:
    enum class Kind { other, planned_drafts, vetoed_probe };
    struct ModeRates {  // by a step's number of sequences
        RecentRate plain, planned_expected, planned_emitted;
    };
    struct Rates {
        double plain = 0.0;
        std::optional<double> expected, emitted;
    };

    ModeRates& rates_at(std::size_t n) {
        const RecentRate empty(options_.rate_window);
        while (rates_.size() <= n) rates_.push_back(ModeRates{empty, empty, empty});
        return rates_[n];
    }
    // The plain rate over the last `horizon` steps (none with fewer than
    // plain_samples plain steps there) and the planned rates by both counts,
    // each where it has min_planned_samples (the emitted one within
    // emitted_horizon).
    [[nodiscard]] Rates rates(std::size_t n, std::size_t horizon, std::size_t plain_samples) const {
        if (n >= rates_.size()) return {};
        const ModeRates& r = rates_[n];
        const std::size_t plain_since = first_step_within(horizon);
        if (r.plain.samples(plain_since) < plain_samples) return {};
        const std::size_t recent = first_step_within(options_.emitted_horizon);
        Rates d;
        d.plain = r.plain.value(plain_since);
        if (r.planned_expected.samples() >= options_.min_planned_samples) d.expected = r.planned_expected.value();
        if (r.planned_emitted.samples(recent) >= options_.min_planned_samples) d.emitted = r.planned_emitted.value(recent);
        return d;
    }
    [[nodiscard]] std::size_t first_step_within(std::size_t horizon) const {
        return steps_ > horizon ? steps_ - horizon : 0;
    }
    [[nodiscard]] std::size_t plain_horizon() const { return options_.plain_horizon_explorations * options_.explore_every; }
    // Exploring steps alternate looks and plain probes: a plain probe comes
    // once in two exploring intervals.
    [[nodiscard]] std::size_t plain_probe_interval() const { return 2 * options_.explore_every; }
    // A probe of a vetoed plan follows plain steps, so its first round
    // catches every drafting request's draft cache up: a cost of having
    // stopped, not of the plan. That round counts at what D says a round of
    // its width costs (else no probe could ever lift the veto).
    [[nodiscard]] static double probe_seconds(const BatchOutcome& outcome, const PassCostCurve& draft_round) {
        if (!outcome.first_round_caught_up || outcome.draft_round_seconds.empty()) return outcome.total_seconds;
        const double usual = draft_round.at_or_above(outcome.draft_round_widths.front());
        if (usual < 0.0) return outcome.total_seconds;
        return outcome.total_seconds - outcome.draft_round_seconds.front() +
               std::min(usual, outcome.draft_round_seconds.front());
    }

    AutoBatchOptions options_;
    std::vector<ModeRates> rates_;
    Kind kind_ = Kind::other;
    double planned_tokens_ = 0.0;        // sum_i E_i(k_i) of the step planned last
    std::size_t planned_sequences_ = 0;  // and its number of sequences
    std::size_t steps_ = 0, last_plain_probe_ = 0;
    std::size_t veto_lifts_ = 0, plain_probes_skipped_ = 0, plain_refreshes_ = 0;
};

class BatchProbes {
public:
    explicit BatchProbes(const AutoBatchOptions& options) : options_(options) {}

    // Warm-up step `step`: plain on even steps; on odd ones warmup_length,
    // then 1, 2, ... drafts for a few sequences.
    void warm_up(std::size_t step, std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths,
                 bool equal_lengths) {
        std::fill(lengths.begin(), lengths.end(), 0);
        if (step % 2 == 0) return;
        const std::size_t turn = step / 2;
        draft_a_few(queries, lengths, turn == 0 ? options_.warmup_length : turn, equal_lengths);
    }
    // Whether the next exploring step looks beyond the plan (else it is a
    // plain probe): the two alternate.
    bool next_exploration_looks_up() { return explorations_++ % 2 == 0; }
    // One draft beyond the plan: one more per drafting sequence, or where none
    // drafts, a look of 1, 2, ... drafts for one sequence (equal lengths: one
    // draft for all, every equal_look_every-th look only, as it is dear).
    void look_up(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, bool any, bool equal_lengths) {
        const std::size_t n = queries.size();
        if (any) {
            for (std::size_t i = 0; i < n; ++i)
                if (lengths[i] > 0) lengths[i] = std::min(queries[i].cap, lengths[i] + 1);
        } else if (equal_lengths) {
            if (options_.equal_look_every > 0 && equal_looks_++ % options_.equal_look_every == 0) cap_all(queries, lengths, 1);
        } else if (n > 0) {
            const std::size_t i = rotation_++ % n;
            lengths[i] = std::min<std::size_t>(1 + plain_looks_++ % options_.max_look_drafts, queries[i].cap);
        }
    }
    // Where the pass stayed flat over a wide enough timed range and the plan
    // reaches its top, drafts out to widen_factor times the widest timed
    // width (shortest lengths first). Returns whether it did.
    bool widen(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, const PassCostCurve& target,
               bool equal_lengths) {
        const std::size_t narrowest = target.narrowest(), widest = target.widest();
        if (widest <= narrowest || options_.widen_min_span * (widest - narrowest) < widest) return false;
        std::size_t width = queries.size(), room = queries.size();
        for (std::size_t i = 0; i < queries.size(); ++i) width += lengths[i], room += queries[i].cap;
        const std::size_t goal = std::min(room, options_.widen_factor * widest);
        if (static_cast<double>(width) < options_.widen_reach * static_cast<double>(widest) || goal <= widest) return false;
        const double wide = target.at(widest), narrow = target.at(narrowest);
        // Flat: V rose less than widen_flatness of what a compute-bound pass
        // (V proportional to n) would have over the range.
        if (!((wide - narrow) * static_cast<double>(widest) <
              options_.widen_flatness * wide * static_cast<double>(widest - narrowest)))
            return false;
        if (equal_lengths) {
            std::size_t k = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()), most = 0;
            for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
            while (width < goal && k < most) {
                ++k;
                for (const SequenceDraftQuery& q : queries) width += q.cap >= k ? 1 : 0;
            }
            cap_all(queries, lengths, k);
        } else {
            while (width < goal) {
                std::size_t shortest = queries.size();
                for (std::size_t i = 0; i < queries.size(); ++i)
                    if (lengths[i] < queries[i].cap && (shortest == queries.size() || lengths[i] < lengths[shortest]))
                        shortest = i;
                if (shortest == queries.size()) break;
                ++lengths[shortest], ++width;
            }
        }
        ++widened_;
        return true;
    }
    [[nodiscard]] std::size_t widened_steps() const { return widened_; }

private:
    // `length` drafts for as many sequences as warmup_rows allows (one at
    // least), in turn across the batch from step to step.
    void draft_a_few(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, std::size_t length,
                     bool equal_lengths) {
        const std::size_t n = queries.size();
        if (n == 0 || length == 0) return;
        if (equal_lengths) return cap_all(queries, lengths, length);
        const std::size_t count = std::min(n, std::max<std::size_t>(1, options_.warmup_rows / length));
        for (std::size_t j = 0; j < count; ++j) {
            const std::size_t i = (rotation_ + j) % n;
            lengths[i] = std::min(length, queries[i].cap);
        }
        rotation_ = (rotation_ + count) % n;
    }
    static void cap_all(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, std::size_t k) {
        for (std::size_t i = 0; i < queries.size(); ++i) lengths[i] = std::min(k, queries[i].cap);
    }

    AutoBatchOptions options_;
    std::size_t rotation_ = 0, explorations_ = 0, plain_looks_ = 0, equal_looks_ = 0, widened_ = 0;
};

}  // namespace specdec
