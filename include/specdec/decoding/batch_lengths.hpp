#pragma once
// Draft lengths for a batch: how many drafts each sequence of a batched step
// proposes. A batched step costs one target pass over every sequence's
// pending token and drafts, plus draft rounds (round r runs the draft model
// over the sequences drafting at least r + 1 tokens). A pass that is
// memory-bound costs about the same for one token or many, so speculation is
// nearly free; once the batch makes it compute-bound, every draft row costs
// its share of arithmetic, and speculation pays only where acceptance is high.
//
// Exactness: a plan reads the sequences' caps and what earlier steps measured
// (acceptance counts, pass timings), never this step's drafts' outcomes or
// the verifier's uniforms; every sequence's output keeps the target's
// distribution whatever lengths are chosen, including 0 (plain decoding).
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <span>
#include <unordered_map>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/acceptance_estimate.hpp"
#include "specdec/decoding/pass_costs.hpp"

namespace specdec {

// One sequence as a batch policy sees it before a step.
struct SequenceDraftQuery {
    std::uint64_t id = 0;  // the request (its acceptance is learned per request)
    std::size_t cap = 0;   // the most drafts it may hold (its draft_tokens, context and token budget allow)
};

// What one sequence's verification decided.
struct SequenceOutcome {
    std::uint64_t id = 0;
    std::size_t proposed = 0;  // drafts the drafter returned
    std::size_t accepted = 0;  // drafts the rule kept
};

// What one batched step measured.
struct BatchOutcome {
    std::span<const SequenceOutcome> sequences;  // the sequences verified in the pass
    std::size_t target_width = 0;                // tokens in the target pass
    double target_seconds = 0.0;
    std::span<const std::size_t> draft_round_widths;  // sequences in each draft round
    std::span<const double> draft_round_seconds;
    // Round 0 fed some sequence more than the tokens its last step committed
    // (its draft cache lagging after steps without drafts): its time is a
    // one-off catch-up, not what a round costs.
    bool first_round_caught_up = false;
    double acceptance_seconds = 0.0;  // every sequence's rule and emission
    double total_seconds = 0.0;       // the whole step but the prefill of admitted prompts
};

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

// Chooses every sequence's length for the batch's expected tokens per second:
//   maximise  sum_i E_i(k_i) / T(k)   over 0 <= k_i <= cap_i, with
//   E_i(k) = 1 + sum_{j<k} prod_{m<=j} a_{i,m}    (chain_expected_tokens)
//   T(k)   = V(sum_i (k_i + 1)) + sum_{r < max k} D(#{i : k_i > r})
//            + r sum_i (k_i + 1) + o,
// where V(n) is the target pass over n tokens and D(b) a draft round over b
// sequences (both PassCostCurve, learned online in seconds; a width never
// timed costs what the next timed width does, since passes are lumpy between
// them), r the
// acceptance work per verified row and o the rest of a step. a_{i,m} is the
// acceptance of draft m of request i, shrunk towards the batch's pooled
// estimate while the request has few samples of its own. How hard it is
// shrunk (the pseudo-samples s of the pooled estimate) is learned from how
// much the requests' own first-draft acceptance really differs (empirical
// Bayes, see RequestSpread): where requests accept alike, a request's few
// samples are mostly noise, and one that happened to lose its first drafts
// would otherwise read as poor, draft nothing, and so never be measured again
// (at two sequences on a CPU, that starved one request of a batch of two in
// most steps); where they differ (code beside chat), each request soon
// follows its own counts.
// The search adds one draft at a time to the sequence whose draft raises the
// rate most (a draft's worth falls with its depth, its cost rises with the
// width) and keeps the best point of that path, all k_i = 0 included: when the
// pass is compute-bound the step is plain batched decoding, with no draft
// round and no extra rows. A plan that drafts must expect draft_margin (3%)
// more tokens per second than plain decoding: a near tie, such as one
// request's single draft in a large batch, loses to costs the timings do
// not show (a draft cache catching up) and to the plan's own optimism (it
// drafts for the requests whose estimates are highest), and is too close for
// the check against realized rates below to settle.
// Warm-up: the first steps alternate plain steps (V at the batch's width)
// with drafting steps of warmup_length, 1, 2, ... drafts, so that V and D are
// timed at several widths and acceptance at every position. Only a few
// sequences draft in a warm-up step (at most warmup_rows draft rows in all,
// in turn across the batch): a large batch, whose pass is compute-bound, does
// not pay a full-length draft for every sequence to learn that speculation
// does not pay. Then one step in explore_every drafts one more per drafting
// sequence than planned (when none drafts, one sequence drafts one token, or
// two every other time: the widths just above the plain pass and the
// acceptance stay measured at the price of a row or two), or, in turn, none at all (a plain step: V at the
// batch's own width stays timed at the machine's current speed). While the
// steps that drafted by plan beat the plain ones by clear_margin by both
// counts below, those plain probes run only once in max_plain_probe_every
// steps: there a plain step gives up most of a drafting step's tokens (one
// token for a step that drafts 2.3 on a CPU at one sequence, where one
// probe in 32 steps cost about 2%), and a comparison that far apart is not
// decided by a plain rate somewhat out of date. Where
// the pass has stayed flat over the widths timed so far and the plan reaches
// the widest of them, one step in widen_every drafts out to twice that width
// (widen_past_timed): a GPU's pass, flat far past what warm-up times, is then
// timed out to the widths worth drafting in a few steps, not hundreds.
// A check on the model, by batch size: the tokens per second the plain steps
// reached against those of the steps that drafted by plan, counted twice:
//   - the tokens their plan expected over the time they actually took, which
//     checks the cost model (costs it does not see, such as a lagging draft
//     cache catching up, or timings that read a width as cheaper than it is);
//   - the tokens they emitted, which also checks the acceptance the plan
//     relied on (the search picks the requests whose estimates are highest,
//     so the plans' expectations run high).
// Where drafting recently lost by either count, the step runs plain; an
// exploring step still runs the plan, so that the comparison follows the
// machine and the requests, and one that beats the plain steps (the catch-up
// the veto caused aside) ends the veto. The emitted count's evidence expires
// after kEmittedHorizon steps: a stretch of rejected drafts, which the
// requests' own acceptance estimates already answer, would otherwise stop
// the plan for every request until a probe (one step in 32) was lucky.
// The plain steps compared are those of the plan's own time: a host's speed
// drifts, and plain steps are rare while a plan drafts, so where the plan
// lacks two plain steps among its recent ones a plain step runs to time one
// (plain_rate_stale).
class AutoBatchLength {
public:
    struct Options {
        std::size_t warmup_steps = 6;
        std::size_t warmup_length = 4;
        std::size_t warmup_rows = 8;    // draft rows a warm-up or exploration step adds at most
        std::size_t explore_every = 16;
        std::size_t max_plain_probe_every = 128;  // a plain probe's interval while drafting clearly wins
        double clear_margin = 1.25;               // what "clearly" means: drafting's tokens per second over plain's
        double draft_margin = 1.03;               // what a plan must expect over plain's tokens per second to draft
        std::size_t widen_every = 4;    // a step in this many may time a pass twice the widest timed (see widen_past_timed)
        double decay = 0.98;            // per-step weight of older samples
        double prior_strength = 4.0;    // pseudo-samples pulling the pooled a_m to a_{m-1} (and a request's, see below)
        // Pseudo-samples pulling a request's a_m to the pooled one. Unset:
        // learned from the spread of the requests' acceptance (RequestSpread),
        // prior_strength until enough requests were measured.
        std::optional<double> request_prior_strength{};
        // Every request of a step drafts the same number of tokens (or its cap,
        // where that is smaller), in warm-up, exploration and widening too: for
        // a target whose pass over feeds of unequal lengths costs more than
        // its width says. llama.cpp with a cache stream per sequence (the
        // adapter's setting) runs one physical pass per distinct feed length,
        // so a plan that mixes lengths pays several passes that V(width)
        // cannot see (docs/llama_cpp.md). Unset: what the target says of its
        // passes (BatchedDecoder calls target_splits_ragged_passes with the
        // target's ragged_passes_split(), where it has one), else false.
        std::optional<bool> equal_lengths{};
    };

    AutoBatchLength() : AutoBatchLength(Options{}) {}
    explicit AutoBatchLength(Options options)
        : options_(options),
          pooled_(options.decay, options.prior_strength),
          request_strength_(options.request_prior_strength.value_or(options.prior_strength)),
          equal_lengths_(options.equal_lengths.value_or(false)) {
        if (!(options_.decay > 0.0 && options_.decay <= 1.0)) {
            std::ostringstream message;
            message << "invalid AutoBatchLength decay = " << options_.decay << ": expected a value in (0, 1]";
            throw Error(message.str());
        }
        if (!(options_.clear_margin >= 1.0 && options_.clear_margin <= std::numeric_limits<double>::max())) {
            std::ostringstream message;
            message << "invalid AutoBatchLength clear_margin = " << options_.clear_margin
                    << ": expected a finite ratio of at least 1 (drafting's tokens per second over plain decoding's)";
            throw Error(message.str());
        }
        if (!(options_.draft_margin >= 1.0 && options_.draft_margin <= std::numeric_limits<double>::max())) {
            std::ostringstream message;
            message << "invalid AutoBatchLength draft_margin = " << options_.draft_margin
                    << ": expected a finite ratio of at least 1 (a plan's expected tokens per second over plain "
                       "decoding's)";
            throw Error(message.str());
        }
        if (options_.request_prior_strength &&
            !(*options_.request_prior_strength > 0.0 && *options_.request_prior_strength <= std::numeric_limits<double>::max())) {
            std::ostringstream message;
            message << "invalid AutoBatchLength request_prior_strength = " << *options_.request_prior_strength
                    << ": expected a positive, finite number of pseudo-samples (or none: learned)";
            throw Error(message.str());
        }
        if (!(options_.prior_strength > 0.0)) {
            std::ostringstream message;
            message << "invalid AutoBatchLength prior_strength = " << options_.prior_strength
                    << ": expected a positive number of pseudo-samples";
            throw Error(message.str());
        }
    }

    void plan(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size();
        step_kind_ = StepKind::other;
        if (steps_ < options_.warmup_steps) {
            std::fill(lengths.begin(), lengths.end(), 0);
            if (steps_ % 2 == 1) {
                const std::size_t turn = steps_ / 2;
                draft_a_few(queries, lengths, turn == 0 ? options_.warmup_length : turn);
            }
            return;
        }
        // Measured only where not fixed (value_or would measure it anyway).
        request_strength_ = options_.request_prior_strength ? *options_.request_prior_strength
                                                            : spread_.strength(requests_, options_.prior_strength);
        const double expected = equal_lengths_ ? search_equal(queries, lengths) : search(queries, lengths);
        bool any = false;
        for (std::size_t i = 0; i < n; ++i) any = any || lengths[i] > 0;
        const bool explore = options_.explore_every > 0 && steps_ % options_.explore_every == 0;
        const bool up = explore && explorations_++ % 2 == 0;
        if (any) {
            step_kind_ = StepKind::planned_drafts;
            planned_tokens_ = expected;
            planned_sequences_ = n;
        }
        if (any && drafting_lost(n)) {
            // The plan says drafting pays, but the steps that drafted by
            // plan recently reached fewer tokens per second than the plain
            // steps at this batch size (drafting_lost): costs the model does
            // not see, or acceptance that ran below its estimates, outweigh
            // what it expects. A plain step instead, but for the exploring
            // steps that probe the plan as it is, so that the comparison
            // stays current.
            if (up) {
                step_kind_ = StepKind::vetoed_probe;
                return;
            }
            std::fill(lengths.begin(), lengths.end(), 0);
            step_kind_ = StepKind::other;
            return;
        }
        if (any && !explore && plain_rate_stale(n)) {
            // The plan's recent steps have no plain steps of their time to be
            // compared with: one now (see plain_rate_stale).
            std::fill(lengths.begin(), lengths.end(), 0);
            step_kind_ = StepKind::other;
            last_plain_probe_ = steps_;
            ++plain_refreshes_;
            return;
        }
        if (!explore && options_.widen_every > 0 && steps_ % options_.widen_every == options_.widen_every / 2 &&
            widen_past_timed(queries, lengths)) {
            ++widened_;
            step_kind_ = StepKind::other;
            return;
        }
        if (explore) {
            step_kind_ = StepKind::other;
            if (up && !any && equal_lengths_) {
                // One draft for every sequence, the cheapest equal look; every
                // other such exploration only, as it costs a whole draft
                // round and a pass twice as wide.
                if (equal_looks_++ % 2 == 0) cap_all(queries, lengths, 1);
            } else if (up && !any) {
                // One sequence drafts: the cheapest look. Every other look
                // drafts two, so that a pass whose cost is lumpy (one token
                // more dear, two more not, as tiles of even width make it) is
                // timed past the first width too: untimed widths are priced
                // as compute-bound, and the plan would never reach them.
                const std::size_t i = rotation_++ % n;
                lengths[i] = std::min<std::size_t>(1 + plain_looks_++ % 2, queries[i].cap);
            } else if (up) {
                for (std::size_t i = 0; i < n; ++i)
                    if (lengths[i] > 0) lengths[i] = std::min(queries[i].cap, lengths[i] + 1);
            } else if (any && steps_ - last_plain_probe_ < options_.max_plain_probe_every && drafting_clearly_won(n)) {
                // Drafting wins by a wide margin: the plan runs instead
                // of this plain probe (see the class comment).
                ++plain_probes_skipped_;
                step_kind_ = StepKind::planned_drafts;
            } else {
                // A plain step: every plan is compared with V at the batch's
                // own width, which a policy that always drafts would
                // otherwise keep from the machine's speed of long ago.
                std::fill(lengths.begin(), lengths.end(), 0);
                last_plain_probe_ = steps_;
            }
        }
    }

    void observe(const BatchOutcome& outcome) {
        ++steps_;
        record_rate(outcome);
        pooled_.age();
        for (auto& [id, estimate] : requests_) estimate.age(options_.decay);
        for (const SequenceOutcome& s : outcome.sequences) {
            const std::size_t tested = std::min(s.proposed, s.accepted + 1);
            Counts& own = requests_[s.id];
            pooled_.reserve(s.proposed);
            for (std::size_t m = 0; m < tested; ++m) {
                const double kept = m < s.accepted ? 1.0 : 0.0;
                pooled_.count(m, 0, 1.0, kept);
                own.add(m, kept);
                if (m == 0) own.first.add(kept);
            }
        }
        pooled_chain_ = pooled_.chain();
        if (outcome.target_width > 0) target_.add(outcome.target_width, outcome.target_seconds, options_.decay);
        double drafting = 0.0;
        for (std::size_t r = 0; r < outcome.draft_round_widths.size(); ++r) {
            if (r > 0 || !outcome.first_round_caught_up)
                draft_round_.add(outcome.draft_round_widths[r], outcome.draft_round_seconds[r], options_.decay);
            drafting += outcome.draft_round_seconds[r];
        }
        if (outcome.target_width > 0) {
            row_.add(outcome.acceptance_seconds / static_cast<double>(outcome.target_width));
            other_.add(std::max(0.0, outcome.total_seconds - outcome.target_seconds - drafting - outcome.acceptance_seconds));
        }
    }

    void forget(std::uint64_t id) {
        if (const auto found = requests_.find(id); found != requests_.end()) {
            spread_.retire(found->second.first);
            requests_.erase(found);
        }
    }

    // What the target says of its passes: whether one over feeds of unequal
    // lengths runs as several (see Options::equal_lengths, which, where set,
    // wins). BatchedDecoder calls it at construction.
    void target_splits_ragged_passes(bool splits) {
        if (!options_.equal_lengths) equal_lengths_ = splits;
    }
    // Whether every request of a step gets one length.
    [[nodiscard]] bool plans_equal_lengths() const { return equal_lengths_; }

    // What the policy believes (for reports): V(n) and D(b) in seconds (-1
    // before any timing), and the pooled acceptance of draft m.
    [[nodiscard]] double target_pass_seconds(std::size_t n) const { return target_.at(n); }
    [[nodiscard]] double draft_round_seconds(std::size_t b) const { return draft_round_.at(b); }
    [[nodiscard]] double pooled_acceptance(std::size_t m) const {
        if (pooled_chain_.empty()) return 0.5;
        return pooled_chain_[std::min(m, pooled_chain_.size() - 1)];
    }
    [[nodiscard]] std::size_t steps_observed() const { return steps_; }
    // The pseudo-samples of the pooled estimate in a request's a_m, as the
    // last plan used them (learned unless request_prior_strength is set).
    [[nodiscard]] double request_prior_strength() const { return request_strength_; }
    // Steps planned by widen_past_timed (drafting past the widest timed width).
    [[nodiscard]] std::size_t widened_steps() const { return widened_; }
    // Probes of a vetoed plan that beat the plain steps and ended the veto.
    [[nodiscard]] std::size_t veto_lifts() const { return veto_lifts_; }
    // Plain probes left out because drafting clearly won (the plan ran instead).
    [[nodiscard]] std::size_t plain_probes_skipped() const { return plain_probes_skipped_; }
    // Plain steps run because the plain rate was older than the plan's steps.
    [[nodiscard]] std::size_t plain_refreshes() const { return plain_refreshes_; }

private:
    // A request's first drafts, every one counted alike (no decay): what
    // RequestSpread compares across requests.
    struct FirstDrafts {
        double tested = 0.0, accepted = 0.0;
        void add(double kept) {
            tested += 1.0;
            accepted += kept;
        }
    };
    // A request's own decayed counts by draft position.
    struct Counts {
        FirstDrafts first;
        std::vector<double> tested, accepted;
        void age(double decay) {
            for (double& t : tested) t *= decay;
            for (double& a : accepted) a *= decay;
        }
        void add(std::size_t m, double kept) {
            if (tested.size() <= m) tested.resize(m + 1, 0.0), accepted.resize(m + 1, 0.0);
            tested[m] += 1.0;
            accepted[m] += kept;
        }
    };

    // Tokens per second over a kind of step's last 16 samples: the ratio of
    // the sums, as a step's tokens vary widely (a sequence emits 1 to k + 1)
    // and a median of per-step rates would misjudge their mean.
    // Each sample carries the step it was taken at; samples(since) and
    // value(since) read those from step `since` on.
    class RecentRate {
    public:
        void add(double tokens, double seconds, std::size_t step) {
            tokens_[next_] = tokens;
            seconds_[next_] = seconds;
            steps_[next_] = step;
            next_ = (next_ + 1) % tokens_.size();
            count_ = std::min(count_ + 1, tokens_.size());
        }
        void restart(double tokens, double seconds, std::size_t step) {
            count_ = next_ = 0;
            add(tokens, seconds, step);
        }
        [[nodiscard]] std::size_t samples(std::size_t since = 0) const {
            std::size_t n = 0;
            for (std::size_t i = 0; i < count_; ++i) n += steps_[i] >= since ? 1 : 0;
            return n;
        }
        [[nodiscard]] double value(std::size_t since = 0) const {
            double tokens = 0.0, seconds = 0.0;
            for (std::size_t i = 0; i < count_; ++i)
                if (steps_[i] >= since) tokens += tokens_[i], seconds += seconds_[i];
            return seconds > 0.0 ? tokens / seconds : 0.0;
        }

    private:
        std::array<double, 16> tokens_{}, seconds_{};
        std::array<std::size_t, 16> steps_{};
        std::size_t count_ = 0, next_ = 0;
    };
    // Steps after which a drafting step's emitted-token sample no longer
    // counts against the plan (see the class comment).
    static constexpr std::size_t kEmittedHorizon = 32;
    // Rates by a step's number of sequences: of the plain steps (no drafts
    // at all), and of the steps that drafted as the search planned, by the
    // tokens the plan expected and by those they emitted.
    struct ModeRates {
        RecentRate plain, planned_expected, planned_emitted;
    };
    enum class StepKind { other, planned_drafts, vetoed_probe };

    void record_rate(const BatchOutcome& outcome) {
        const StepKind kind = step_kind_;
        step_kind_ = StepKind::other;
        const std::size_t n = outcome.sequences.size();
        if (n == 0 || !(outcome.total_seconds > 0.0)) return;
        double emitted = 0.0;
        bool drafted = false;
        for (const SequenceOutcome& s : outcome.sequences) {
            emitted += static_cast<double>(s.accepted + 1);
            drafted = drafted || s.proposed > 0;
        }
        if (rates_.size() <= n) rates_.resize(n + 1);
        ModeRates& r = rates_[n];
        if (!drafted) {
            r.plain.add(emitted, outcome.total_seconds, steps_);
            return;
        }
        // A step whose sequences are not those planned (a request failed
        // while drafting) is left out: its plan's expectation is not its own.
        if (n != planned_sequences_) return;
        if (kind == StepKind::planned_drafts) {
            r.planned_expected.add(planned_tokens_, outcome.total_seconds, steps_);
            r.planned_emitted.add(emitted, outcome.total_seconds, steps_);
        } else if (kind == StepKind::vetoed_probe) {
            // A probe that beats the plain steps by a count ends what that
            // count held against the plan: the drafting steps behind it are
            // history, and the plan runs again until its own steps say
            // otherwise. A probe that loses is one more sample against it.
            const double seconds = probe_seconds(outcome), plain = r.plain.value();
            const auto count = [&](RecentRate& rate, double tokens) {
                if (r.plain.samples() > 0 && tokens / seconds >= plain) rate.restart(tokens, seconds, steps_);
                else rate.add(tokens, seconds, steps_);
            };
            count(r.planned_expected, planned_tokens_);
            count(r.planned_emitted, emitted);
            if (!drafting_lost(n)) ++veto_lifts_;
        }
    }

    // A probe of a vetoed plan follows a stretch of plain steps, so its first
    // draft round catches every drafting request's draft cache up on all the
    // tokens those steps committed: a cost of having stopped drafting, which
    // the plan's own steps, one after another, do not pay. Counted in full it
    // makes every probe lose however well the plan would run, and the veto
    // never lifts. So that round counts at what a round of its width costs
    // (D). A plan's own steps keep their catch-up: a plan that drafts for a
    // rotating few requests pays it every step.
    [[nodiscard]] double probe_seconds(const BatchOutcome& outcome) const {
        if (!outcome.first_round_caught_up || outcome.draft_round_seconds.empty()) return outcome.total_seconds;
        const double usual = draft_round_.at_or_above(outcome.draft_round_widths.front());
        if (usual < 0.0) return outcome.total_seconds;
        return outcome.total_seconds - outcome.draft_round_seconds.front() + std::min(usual, outcome.draft_round_seconds.front());
    }

    // The first step of the last `horizon` steps (0 while fewer were taken):
    // what RecentRate's samples(since) and value(since) read from.
    [[nodiscard]] std::size_t first_step_within(std::size_t horizon) const {
        return steps_ > horizon ? steps_ - horizon : 0;
    }

    // Steps over which the plain rate that may veto a plan is read: the plain
    // probes of a plan that drafts come every 2 explore_every steps, so this
    // holds two or three of them (see plain_rate_stale).
    [[nodiscard]] std::size_t plain_horizon() const { return 5 * options_.explore_every; }

    // Whether the recent steps that drafted by plan were slower than the
    // recent plain ones by either count, at n sequences (four planned steps
    // at least; the emitted count over the last kEmittedHorizon steps). The
    // plain rate is that of the last plain_horizon() steps where two or more
    // plain steps were timed there, else of the last 16 plain steps (three
    // at least): a batch whose size keeps changing may not time every size
    // that often, and a plain rate of long ago still answers a plan that
    // loses by far.
    [[nodiscard]] bool drafting_lost(std::size_t n) const {
        DraftingRates d = drafting_rates(n, plain_horizon(), 2);
        if (d.plain == 0.0) d = drafting_rates(n, steps_, 3);
        return (d.expected && *d.expected < d.plain) || (d.emitted && *d.emitted < d.plain);
    }

    // Whether the recent steps that drafted by plan beat the plain ones since
    // the last rare probe (one at least: max_plain_probe_every steps, and up
    // to the exploring step that ran it) by clear_margin by both counts, at n
    // sequences.
    [[nodiscard]] bool drafting_clearly_won(std::size_t n) const {
        const DraftingRates d = drafting_rates(n, options_.max_plain_probe_every + 2 * options_.explore_every, 1);
        const double bar = options_.clear_margin * d.plain;
        return d.expected && *d.expected >= bar && d.emitted && *d.emitted >= bar;
    }

    // Whether the plan drafted at n sequences in four of the last
    // plain_horizon() steps while fewer than two plain steps there timed what
    // it is compared with, and drafting does not clearly win: the next step
    // then runs plain. Plain steps come once in 32 while a plan drafts; read
    // over their last 16 samples, the plain rate spans 500 steps and the
    // drafting rates 16. A host whose pass got faster in between (traffic
    // from elsewhere that stopped) then reads a plan that loses as one that
    // wins, and the stale V at the batch's own width, pooled with the fresh
    // timings just above it, prices the wider passes as free: 32 requests on
    // a scripted host drafted in half the steps at 0.95x plain decoding for
    // hundreds of steps.
    [[nodiscard]] bool plain_rate_stale(std::size_t n) const {
        if (n >= rates_.size()) return false;
        const ModeRates& r = rates_[n];
        const std::size_t since = first_step_within(plain_horizon());
        return r.planned_expected.samples(since) >= 4 && r.plain.samples(since) < 2 && !drafting_clearly_won(n);
    }

    // The plain rate at n sequences over the plain steps of the last
    // `horizon` steps (all of the last 16 where that reaches back to
    // step 0; 0 with fewer than plain_samples of them), and the
    // drafting steps' rates by the two counts, each where it has four samples
    // (the emitted one over kEmittedHorizon steps).
    struct DraftingRates {
        double plain = 0.0;
        std::optional<double> expected, emitted;
    };
    [[nodiscard]] DraftingRates drafting_rates(std::size_t n, std::size_t horizon, std::size_t plain_samples) const {
        if (n >= rates_.size()) return {};
        const ModeRates& r = rates_[n];
        const std::size_t plain_since = first_step_within(horizon);
        if (r.plain.samples(plain_since) < plain_samples) return {};
        const std::size_t recent = first_step_within(kEmittedHorizon);
        DraftingRates d;
        d.plain = r.plain.value(plain_since);
        if (r.planned_expected.samples() >= 4) d.expected = r.planned_expected.value();
        if (r.planned_emitted.samples(recent) >= 4) d.emitted = r.planned_emitted.value(recent);
        return d;
    }

    // Past the widest timed width w, V is extrapolated as if the pass were
    // compute-bound from w on (PassCostCurve::at), which keeps the search
    // inside the widths it has timed. Where the pass is flat instead (a GPU's,
    // bound by streaming the weights and by launches), climbing by the
    // exploring steps' one more draft per sequence would take hundreds of
    // steps to reach the widths that cost no more than one token. So when the
    // plan reaches into the top quarter of the timed range and V rose over
    // that range less than half as fast as a compute-bound pass would, one
    // step is drafted out to twice w (or as far as the caps allow), one more
    // draft at a time to the shortest lengths. Its timing then settles what
    // the wider plans cost; where the pass turns out compute-bound, the test
    // fails from then on. The timed range must span a fifth of its widest
    // width at least: over two close widths (the batch's own and the one an
    // exploring step adds, once the wider timings have aged out) a few
    // percent of timing noise reads as flat, and a CPU batch that is
    // compute-bound would draft for every request. Only timings and caps are
    // read: exact as any plan.
    bool widen_past_timed(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) const {
        const std::size_t narrowest = target_.narrowest(), widest = target_.widest();
        if (widest <= narrowest || 5 * (widest - narrowest) < widest) return false;
        std::size_t width = queries.size(), room = queries.size();
        for (std::size_t i = 0; i < queries.size(); ++i) width += lengths[i], room += queries[i].cap;
        const std::size_t goal = std::min(room, 2 * widest);
        if (4 * width < 3 * widest || goal <= widest) return false;
        const double wide = target_.at(widest), narrow = target_.at(narrowest);
        if (!((wide - narrow) * static_cast<double>(widest) < 0.5 * wide * static_cast<double>(widest - narrowest))) return false;
        if (equal_lengths_) {
            // The common length whose pass first reaches the goal (a plan of
            // equal lengths is min(k, cap_i); each k more adds a row for every
            // sequence whose cap reaches it).
            std::size_t k = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()), most = 0;
            for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
            while (width < goal && k < most) {
                ++k;
                for (const SequenceDraftQuery& q : queries) width += q.cap >= k ? 1 : 0;
            }
            cap_all(queries, lengths, k);
            return true;
        }
        while (width < goal) {
            std::size_t shortest = queries.size();
            for (std::size_t i = 0; i < queries.size(); ++i)
                if (lengths[i] < queries[i].cap && (shortest == queries.size() || lengths[i] < lengths[shortest])) shortest = i;
            if (shortest == queries.size()) break;
            ++lengths[shortest];
            ++width;
        }
        return true;
    }

    // `length` drafts for as many sequences as warmup_rows allows (at least
    // one), taken in turn across the batch from step to step.
    void draft_a_few(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, std::size_t length) {
        const std::size_t n = queries.size();
        if (n == 0 || length == 0) return;
        if (equal_lengths_) {
            cap_all(queries, lengths, length);
            return;
        }
        const std::size_t count = std::min(n, std::max<std::size_t>(1, options_.warmup_rows / length));
        for (std::size_t j = 0; j < count; ++j) {
            const std::size_t i = (rotation_ + j) % n;
            lengths[i] = std::min(length, queries[i].cap);
        }
        rotation_ = (rotation_ + count) % n;
    }

    [[nodiscard]] double acceptance(const Counts* own, std::size_t m) const {
        const double prior = pooled_acceptance(m);
        if (own == nullptr || m >= own->tested.size()) return prior;
        return (own->accepted[m] + request_strength_ * prior) / (own->tested[m] + request_strength_);
    }

    // V and D where timed; before any timing, dear (one second), so that
    // nothing untimed looks free.
    [[nodiscard]] double pass_seconds(std::size_t n) const {
        const double v = target_.at_or_above(n);
        return v < 0.0 ? 1.0 : v;
    }
    [[nodiscard]] double round_seconds(std::size_t b) const {
        if (b == 0) return 0.0;
        const double d = draft_round_.at_or_above(b);
        return d < 0.0 ? 1.0 : d;
    }

    // How far requests' acceptance differs, and so how many pseudo-samples
    // s of the pooled estimate a request's own counts are set against. The
    // requests' true first-draft acceptance p_i is taken to spread as a
    // Beta of mean p and strength s (the prior of a_i = (x_i + s p) / (n_i + s));
    // then n_i r_i (r_i = x_i / n_i) is beta-binomial, and the weighted spread
    // S = sum_i n_i (r_i - p)^2 has the expectation
    //   E S = p (1 - p) [(m - 1) + rho (N - m - sum_i n_i^2 / N + 1)],
    //   rho = 1 / (s + 1)
    // over m requests of N drafts in all (binomial noise alone: rho = 0). S
    // measured gives rho, so s (the method of moments, clamped to
    // [kFewest, kMost]). Counted: the requests in flight and the last
    // kRetired retired ones, each with its first drafts (the most often
    // tested); until kMinRequests requests with kMinDrafts drafts in all were
    // seen, the fallback. Reads only past outcomes: exact as any plan.
    class RequestSpread {
    public:
        void retire(const FirstDrafts& first) {
            if (first.tested <= 0.0) return;
            if (retired_.size() < kRetired) retired_.push_back(first);
            else retired_[next_] = first;
            next_ = (next_ + 1) % kRetired;
        }
        [[nodiscard]] double strength(const std::unordered_map<std::uint64_t, Counts>& active, double fallback) const {
            double m = 0.0, n = 0.0, x = 0.0, n2 = 0.0, x2_over_n = 0.0;
            const auto add = [&](const FirstDrafts& f) {
                if (f.tested <= 0.0) return;
                m += 1.0, n += f.tested, x += f.accepted, n2 += f.tested * f.tested;
                x2_over_n += f.accepted * f.accepted / f.tested;
            };
            for (const FirstDrafts& f : retired_) add(f);
            for (const auto& [id, counts] : active) add(counts.first);
            if (m < kMinRequests || n < kMinDrafts) return fallback;
            const double p = x / n;
            const double binomial = p * (1.0 - p);
            const double between = n - m - n2 / n + 1.0;
            // All accepted or all rejected: no spread to measure; one draft
            // each: spread and noise cannot be told apart.
            if (!(binomial > 0.0) || !(between > 0.0)) return fallback;
            const double spread = x2_over_n - n * p * p;  // S
            const double rho = (spread / binomial - (m - 1.0)) / between;
            if (!(rho > 1.0 / (kMost + 1.0))) return kMost;
            return std::clamp(1.0 / rho - 1.0, kFewest, kMost);
        }

    private:
        static constexpr std::size_t kRetired = 64;
        static constexpr double kMinRequests = 16.0, kMinDrafts = 128.0;
        static constexpr double kFewest = 1.0, kMost = 256.0;
        std::vector<FirstDrafts> retired_;
        std::size_t next_ = 0;
    };

    // A step's predicted seconds: the target pass over `width` tokens, the
    // draft rounds' `draft` seconds, the acceptance work per verified row and
    // the rest of a step.
    [[nodiscard]] double step_seconds(std::size_t width, double draft) const {
        return pass_seconds(width) + draft + row_.value() * static_cast<double>(width) + other_.value();
    }

    // lengths[i] = min(k, cap_i) for every sequence.
    static void cap_all(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, std::size_t k) {
        for (std::size_t i = 0; i < queries.size(); ++i) lengths[i] = std::min(k, queries[i].cap);
    }

    // search() over the plans with one length k for all (capped per
    // sequence): the k of the highest rate, k = 0 included. Returns the
    // plan's expected tokens, sum_i E_i(k_i).
    double search_equal(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size();
        std::size_t most = 0;
        for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
        // survive_[i]: prod_{m<k} a_{i,m} as k grows.
        survive_.assign(n, 1.0);
        double tokens = static_cast<double>(n), rounds = 0.0;
        std::size_t width = n, best_k = 0;
        double best_rate = options_.draft_margin * tokens / step_seconds(width, 0.0), best_tokens = tokens;
        for (std::size_t k = 1; k <= most; ++k) {
            std::size_t drafting = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (queries[i].cap < k) continue;
                const auto found = requests_.find(queries[i].id);
                survive_[i] *= acceptance(found == requests_.end() ? nullptr : &found->second, k - 1);
                tokens += survive_[i];
                ++width;
                ++drafting;
            }
            rounds += round_seconds(drafting);
            if (const double rate = tokens / step_seconds(width, rounds); rate > best_rate) {
                best_rate = rate;
                best_k = k;
                best_tokens = tokens;
            }
        }
        cap_all(queries, lengths, best_k);
        return best_tokens;
    }

    // The search of the class comment; returns the plan's expected tokens.
    double search(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size();
        std::size_t most = 0;
        for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
        // gain_[i * (most + 1) + j]: what draft j adds to E_i (prod_{m<=j} a_{i,m}).
        gain_.assign(n * (most + 1), 0.0);
        for (std::size_t i = 0; i < n; ++i) {
            const auto found = requests_.find(queries[i].id);
            const Counts* own = found == requests_.end() ? nullptr : &found->second;
            double survive = 1.0;
            for (std::size_t j = 0; j < queries[i].cap; ++j) {
                survive *= acceptance(own, j);
                gain_[i * (most + 1) + j] = survive;
            }
        }
        // drafting_[r]: sequences drafting at least r + 1 tokens.
        drafting_.assign(most + 1, 0);
        std::fill(lengths.begin(), lengths.end(), 0);
        double tokens = static_cast<double>(n), rounds = 0.0;
        std::size_t width = n;
        double best_rate = options_.draft_margin * tokens / step_seconds(width, 0.0), best_tokens = tokens;
        best_.assign(lengths.begin(), lengths.end());
        for (;;) {
            std::size_t pick = n;
            double pick_rate = -1.0, pick_rounds = 0.0;
            for (std::size_t i = 0; i < n; ++i) {
                const std::size_t j = lengths[i];
                if (j >= queries[i].cap) continue;
                const double more_rounds =
                    rounds + round_seconds(drafting_[j] + 1) - round_seconds(drafting_[j]);
                const double rate = (tokens + gain_[i * (most + 1) + j]) / step_seconds(width + 1, more_rounds);
                if (rate > pick_rate) {
                    pick_rate = rate;
                    pick = i;
                    pick_rounds = more_rounds;
                }
            }
            if (pick == n) break;
            tokens += gain_[pick * (most + 1) + lengths[pick]];
            ++drafting_[lengths[pick]];
            ++lengths[pick];
            ++width;
            rounds = pick_rounds;
            if (pick_rate > best_rate) {
                best_rate = pick_rate;
                best_.assign(lengths.begin(), lengths.end());
                best_tokens = tokens;
            }
        }
        std::copy(best_.begin(), best_.end(), lengths.begin());
        return best_tokens;
    }

    Options options_;
    std::size_t steps_ = 0, explorations_ = 0, rotation_ = 0, widened_ = 0, veto_lifts_ = 0, equal_looks_ = 0;
    std::size_t last_plain_probe_ = 0, plain_probes_skipped_ = 0, plain_looks_ = 0, plain_refreshes_ = 0;
    AcceptanceEstimate pooled_;
    std::vector<double> pooled_chain_;
    std::unordered_map<std::uint64_t, Counts> requests_;
    RequestSpread spread_;
    double request_strength_;  // what the last plan used
    PassCostCurve target_, draft_round_;
    RecentTimings row_, other_;
    std::vector<double> gain_, survive_;
    std::vector<std::size_t> drafting_, best_;
    std::vector<ModeRates> rates_;
    StepKind step_kind_ = StepKind::other;
    double planned_tokens_ = 0.0;        // sum_i E_i(k_i) of the step planned last (the search's best point)
    std::size_t planned_sequences_ = 0;  // and its number of sequences
    bool equal_lengths_ = false;
};

}  // namespace specdec
