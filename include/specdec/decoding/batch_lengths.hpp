#pragma once
// Draft lengths for a batch: how many drafts each sequence of a batched step
// proposes. A batched step costs one target pass over every sequence's
// pending token and drafts, plus draft rounds (round r runs the draft model
// over the sequences drafting at least r + 1 tokens). A memory-bound pass
// costs about the same for one token or many, so speculation is nearly free;
// once the batch makes it compute-bound, speculation pays only where
// acceptance is high.
//
// Exactness: a plan reads the sequences' caps and what earlier steps measured
// (acceptance counts, pass timings), never this step's drafts' outcomes or
// the verifier's uniforms; every sequence's output keeps the target's
// distribution whatever lengths are chosen, including 0 (plain decoding).
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/decoding/batch_guard.hpp"
#include "specdec/decoding/batch_model.hpp"
#include "specdec/decoding/batch_options.hpp"

namespace specdec {

// plan(queries, lengths): lengths[i] <= queries[i].cap for each sequence.
// observe(outcome) after each step; forget(id) when a request retires.
template <class P>
concept BatchLengthPolicy = requires(P& policy, std::span<const SequenceDraftQuery> queries,
                                     std::span<std::size_t> lengths, const BatchOutcome& outcome, std::uint64_t id) {
    { policy.plan(queries, lengths) };
    { policy.observe(outcome) };
    { policy.forget(id) };
};

// Every sequence drafts its cap (its own draft_tokens, where room allows).
struct FixedBatchLength {
    void plan(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        for (std::size_t i = 0; i < queries.size(); ++i) lengths[i] = queries[i].cap;
    }
    void observe(const BatchOutcome&) {}
    void forget(std::uint64_t) {}
};

// Each step's lengths for the batch's expected tokens per second: the model's
// plan (BatchModel), checked against realised rates (BatchGuard), with probes
// that keep the model measured (BatchProbes). docs/design/batch-policy.md.
// Lengths depend on measured times, so two runs with one seed may choose
// differently (each run is still exact).
class AutoBatchLength {
public:
    using Options = AutoBatchOptions;

    AutoBatchLength() : AutoBatchLength(Options{}) {}
    explicit AutoBatchLength(Options options)
        : options_((options.check(), options)), model_(options), guard_(options), probes_(options),
          equal_lengths_(options.equal_lengths.value_or(false)) {}

    void plan(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size(), step = guard_.steps();
        const auto plain = [&] { std::fill(lengths.begin(), lengths.end(), 0); };
        guard_.unplanned();
        if (step < options_.warmup_steps) return probes_.warm_up(step, queries, lengths, equal_lengths_);
        model_.refresh_request_strength();
        const double expected = model_.search(queries, lengths, equal_lengths_);
        const bool any = std::any_of(lengths.begin(), lengths.end(), [](std::size_t k) { return k > 0; });
        const bool explore = options_.explore_every > 0 && step % options_.explore_every == 0;
        const bool up = explore && probes_.next_exploration_looks_up();
        if (any) guard_.planned(expected, n);
        if (any && guard_.drafting_lost(n)) {
            // The realised rates overrule the plan; a looking-up step probes it.
            if (up) return guard_.vetoed_probe();
            guard_.unplanned();
            return plain();
        }
        if (any && !explore && guard_.plain_rate_stale(n)) return guard_.plain_refresh(), plain();
        // Mid-interval, so that widening steps fall between the exploring ones.
        const bool widen_turn = options_.widen_every > 0 && step % options_.widen_every == options_.widen_every / 2;
        if (!explore && widen_turn && probes_.widen(queries, lengths, model_.costs().target(), equal_lengths_))
            return guard_.unplanned();
        if (!explore) return;
        guard_.unplanned();
        if (up) return probes_.look_up(queries, lengths, any, equal_lengths_);
        if (any && guard_.may_skip_plain_probe(n)) return guard_.skip_plain_probe();
        guard_.plain_probe();
        plain();
    }

    void observe(const BatchOutcome& outcome) {
        guard_.observe(outcome, model_.costs().draft_round());
        model_.observe(outcome);
    }
    void forget(std::uint64_t id) { model_.forget(id); }

    // What the target says of its passes: whether one over feeds of unequal
    // lengths runs as several (Options::equal_lengths, where set, wins).
    // BatchedDecoder calls it at construction.
    void target_splits_ragged_passes(bool splits) {
        if (!options_.equal_lengths) equal_lengths_ = splits;
    }
    [[nodiscard]] bool plans_equal_lengths() const { return equal_lengths_; }

    // The model (its predictions and learned costs, for reports).
    [[nodiscard]] const BatchModel& model() const { return model_; }
    // V(n) and D(b) in seconds (-1 before any timing), the pooled acceptance
    // of draft m, and the pseudo-samples s the last plan used.
    [[nodiscard]] double target_pass_seconds(std::size_t n) const { return model_.costs().target().at(n); }
    [[nodiscard]] double draft_round_seconds(std::size_t b) const { return model_.costs().draft_round().at(b); }
    [[nodiscard]] double pooled_acceptance(std::size_t m) const { return model_.pooled_acceptance(m); }
    [[nodiscard]] double request_prior_strength() const { return model_.request_prior_strength(); }
    [[nodiscard]] std::size_t steps_observed() const { return guard_.steps(); }
    [[nodiscard]] std::size_t widened_steps() const { return probes_.widened_steps(); }
    [[nodiscard]] std::size_t veto_lifts() const { return guard_.veto_lifts(); }
    [[nodiscard]] std::size_t plain_probes_skipped() const { return guard_.plain_probes_skipped(); }
    [[nodiscard]] std::size_t plain_refreshes() const { return guard_.plain_refreshes(); }

private:
    Options options_;
    BatchModel model_;
    BatchGuard guard_;
    BatchProbes probes_;
    bool equal_lengths_ = false;
};

}  // namespace specdec
