#pragma once
// The batch's model: what a batched step with given draft lengths is expected
// to emit and to cost, and the search for the lengths of the highest rate.
//   maximise  sum_i E_i(k_i) / T(k)   over 0 <= k_i <= cap_i, with
//   E_i(k) = 1 + sum_{j<k} prod_{m<=j} a_{i,m}
//   T(k)   = step_seconds(rounds b_r = #{i : k_i > r}, pass sum_i (k_i + 1))
// (step_cost.hpp: the one step price). V and D are learned in seconds by
// width (BatchStepCosts); a_{i,m} is request i's acceptance of draft m,
// shrunk towards the batch's pooled estimate by s pseudo-samples, s learned
// from how much the requests' first-draft acceptance really differs
// (RequestSpread, empirical Bayes). Reads only earlier steps: exact as any plan.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "specdec/decoding/acceptance_estimate.hpp"
#include "specdec/decoding/batch_options.hpp"
#include "specdec/decoding/pass_costs.hpp"
#include "specdec/decoding/step_cost.hpp"

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

// What one batched step measured: its timings (StepTimings, with every draft
// round's width and seconds) and each verified sequence's outcome.
struct BatchOutcome : StepTimings {
    std::span<const SequenceOutcome> sequences{};
};

// The parts of a batched step's price, learned in seconds: V(n) and D(b) by
// width (a width never timed costs what the next timed width does: passes are
// lumpy between timed widths), r per verified row and o the rest. A round 0
// that caught a lagging draft cache up is not a round's cost and is left out.
class BatchStepCosts {
public:
    explicit BatchStepCosts(const AutoBatchOptions& options) : decay_(options.decay), untimed_(options.untimed_seconds) {}

    void observe(const StepTimings& step) {
        if (step.target_width > 0) target_.add(step.target_width, step.target_seconds, decay_);
        double drafting = 0.0;
        for (std::size_t r = 0; r < step.draft_round_widths.size(); ++r) {
            if (r > 0 || !step.first_round_caught_up) draft_round_.add(step.draft_round_widths[r], step.draft_round_seconds[r], decay_);
            drafting += step.draft_round_seconds[r];
        }
        if (step.target_width == 0) return;
        row_.add(step.acceptance_seconds / static_cast<double>(step.target_width));
        other_.add(std::max(0.0, step.total_seconds - step.target_seconds - drafting - step.acceptance_seconds));
    }

    [[nodiscard]] double pass_seconds(std::size_t n) const {
        const double v = target_.at_or_above(n);
        return v < 0.0 ? untimed_ : v;
    }
    [[nodiscard]] double round_seconds(std::size_t b) const {
        const double d = draft_round_.at_or_above(b);
        return d < 0.0 ? untimed_ : d;
    }
    // A batch's first round carries no overhead of its own: its catch-up is
    // left out of D above and paid where it happens (the guard sees it).
    [[nodiscard]] double drafting_overhead_seconds() const { return 0.0; }
    [[nodiscard]] double row_seconds() const { return row_.value(); }
    [[nodiscard]] double other_seconds() const { return other_.value(); }

    [[nodiscard]] const PassCostCurve& target() const { return target_; }
    [[nodiscard]] const PassCostCurve& draft_round() const { return draft_round_; }

private:
    double decay_, untimed_;
    PassCostCurve target_, draft_round_;
    RecentTimings row_, other_;
};

// How far requests' acceptance differs, and so how many pseudo-samples s of
// the pooled estimate a request's own counts are set against. The requests'
// true first-draft acceptance p_i is taken to spread as a Beta of mean p and
// strength s; then n_i r_i is beta-binomial and S = sum_i n_i (r_i - p)^2 has
//   E S = p (1 - p) [(m - 1) + rho (N - m - sum_i n_i^2 / N + 1)],  rho = 1 / (s + 1)
// over m requests of N drafts. S measured gives rho, so s (the method of
// moments, clamped to [spread_fewest, spread_most]). Counted: the requests in
// flight and the last spread_retired retired ones.
class RequestSpread {
public:
    struct FirstDrafts {  // a request's first drafts, every one counted alike
        double tested = 0.0, accepted = 0.0;
        void add(double kept) {
            tested += 1.0;
            accepted += kept;
        }
    };

    explicit RequestSpread(const AutoBatchOptions& options) : options_(options) {}

    void retire(const FirstDrafts& first) {
        if (first.tested <= 0.0) return;
        if (retired_.size() < options_.spread_retired) retired_.push_back(first);
        else if (!retired_.empty()) retired_[next_] = first;
        next_ = retired_.empty() ? 0 : (next_ + 1) % options_.spread_retired;
    }
    template <class Active>  // a range of FirstDrafts of the requests in flight
    [[nodiscard]] double strength(const Active& active, double fallback) const {
        double m = 0.0, n = 0.0, x = 0.0, n2 = 0.0, x2_over_n = 0.0;
        const auto add = [&](const FirstDrafts& f) {
            if (f.tested <= 0.0) return;
            m += 1.0, n += f.tested, x += f.accepted, n2 += f.tested * f.tested;
            x2_over_n += f.accepted * f.accepted / f.tested;
        };
        for (const FirstDrafts& f : retired_) add(f);
        for (const FirstDrafts& f : active) add(f);
        if (m < options_.spread_min_requests || n < options_.spread_min_drafts) return fallback;
        const double p = x / n, binomial = p * (1.0 - p), between = n - m - n2 / n + 1.0;
        // All accepted or all rejected: no spread to measure; one draft each:
        // spread and noise cannot be told apart.
        if (!(binomial > 0.0) || !(between > 0.0)) return fallback;
        const double spread = x2_over_n - n * p * p;  // S
        const double rho = (spread / binomial - (m - 1.0)) / between;
        if (!(rho > 1.0 / (options_.spread_most + 1.0))) return options_.spread_most;
        return std::clamp(1.0 / rho - 1.0, options_.spread_fewest, options_.spread_most);
    }

private:
    AutoBatchOptions options_;
    std::vector<FirstDrafts> retired_;
    std::size_t next_ = 0;
};

class BatchModel {
public:
    explicit BatchModel(const AutoBatchOptions& options)
        : options_(options),
          costs_(options),
          pooled_(options.decay, options.prior_strength),
          spread_(options),
          request_strength_(options.request_prior_strength.value_or(options.prior_strength)) {}

    void observe(const BatchOutcome& outcome) {
        pooled_.age();
        for (auto& [id, own] : requests_) own.age(options_.decay);
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
        costs_.observe(outcome);
    }
    void forget(std::uint64_t id) {
        if (const auto found = requests_.find(id); found != requests_.end()) {
            spread_.retire(found->second.first);
            requests_.erase(found);
        }
    }
    // Re-reads s from the requests' spread (unless request_prior_strength is set).
    void refresh_request_strength() {
        if (options_.request_prior_strength) return;
        firsts_.clear();
        for (const auto& [id, own] : requests_) firsts_.push_back(own.first);
        request_strength_ = spread_.strength(firsts_, options_.prior_strength);
    }

    // The lengths of the highest expected rate (k = 0 for all included, which
    // must be beaten by draft_margin); returns their sum_i E_i(k_i).
    double search(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths, bool equal_lengths) {
        return equal_lengths ? search_equal(queries, lengths) : search_each(queries, lengths);
    }

    // The prediction of a step with these lengths (caps aside): sum_i E_i(k_i)
    // and its price.
    [[nodiscard]] double expected_tokens(std::uint64_t id, std::size_t k) const {
        const auto found = requests_.find(id);
        const Counts* own = found == requests_.end() ? nullptr : &found->second;
        double expected = 1.0, survive = 1.0;
        for (std::size_t j = 0; j < k; ++j) expected += survive *= acceptance(own, j);
        return expected;
    }
    template <class Lengths>  // a range of draft lengths, one per sequence
    [[nodiscard]] double predicted_seconds(const Lengths& lengths) const {
        std::size_t width = 0;
        rounds_.clear();
        for (const auto k : lengths) {
            width += static_cast<std::size_t>(k) + 1;
            if (rounds_.size() < static_cast<std::size_t>(k)) rounds_.resize(static_cast<std::size_t>(k), 0);
            for (std::size_t r = 0; r < static_cast<std::size_t>(k); ++r) ++rounds_[r];
        }
        return step_seconds(costs_, rounds_, width);
    }

    [[nodiscard]] const BatchStepCosts& costs() const { return costs_; }
    [[nodiscard]] double pooled_acceptance(std::size_t m) const {
        if (pooled_chain_.empty()) return options_.unmeasured_acceptance;
        return pooled_chain_[std::min(m, pooled_chain_.size() - 1)];
    }
    [[nodiscard]] double request_prior_strength() const { return request_strength_; }

private:
    struct Counts {  // a request's own decayed counts by draft position
        RequestSpread::FirstDrafts first;
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

    [[nodiscard]] double acceptance(const Counts* own, std::size_t m) const {
        const double prior = pooled_acceptance(m);
        if (own == nullptr || m >= own->tested.size()) return prior;
        return (own->accepted[m] + request_strength_ * prior) / (own->tested[m] + request_strength_);
    }
    [[nodiscard]] const Counts* counts_of(std::uint64_t id) const {
        const auto found = requests_.find(id);
        return found == requests_.end() ? nullptr : &found->second;
    }
    // What a drafting plan must beat: draft_margin times plain decoding's rate.
    [[nodiscard]] double plain_rate_to_beat(std::size_t n) const {
        return options_.draft_margin * static_cast<double>(n) / step_seconds(costs_, std::span<const std::size_t>{}, n);
    }

    // One length k for all (capped per sequence): the k of the highest rate.
    double search_equal(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size();
        std::size_t most = 0;
        for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
        survive_.assign(n, 1.0);  // prod_{m<k} a_{i,m} as k grows
        rounds_.clear();
        double tokens = static_cast<double>(n), best_tokens = tokens, best_rate = plain_rate_to_beat(n);
        std::size_t width = n, best_k = 0;
        for (std::size_t k = 1; k <= most; ++k) {
            std::size_t drafting = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (queries[i].cap < k) continue;
                survive_[i] *= acceptance(counts_of(queries[i].id), k - 1);
                tokens += survive_[i];
                ++width, ++drafting;
            }
            rounds_.push_back(drafting);
            if (const double rate = tokens / step_seconds(costs_, rounds_, width); rate > best_rate) {
                best_rate = rate, best_k = k, best_tokens = tokens;
            }
        }
        for (std::size_t i = 0; i < n; ++i) lengths[i] = std::min(best_k, queries[i].cap);
        return best_tokens;
    }

    // Greedy path: one draft at a time to the sequence whose draft raises the
    // rate most (a draft's worth falls with its depth, its cost rises with
    // the width); the best point of the path wins.
    double search_each(std::span<const SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        const std::size_t n = queries.size();
        std::size_t most = 0;
        for (const SequenceDraftQuery& q : queries) most = std::max(most, q.cap);
        // gain_[i * (most + 1) + j]: what draft j adds to E_i (prod_{m<=j} a_{i,m}).
        gain_.assign(n * (most + 1), 0.0);
        for (std::size_t i = 0; i < n; ++i) {
            const Counts* own = counts_of(queries[i].id);
            double survive = 1.0;
            for (std::size_t j = 0; j < queries[i].cap; ++j) gain_[i * (most + 1) + j] = survive *= acceptance(own, j);
        }
        rounds_.assign(most, 0);  // rounds_[r]: sequences drafting at least r + 1 tokens
        std::fill(lengths.begin(), lengths.end(), 0);
        double tokens = static_cast<double>(n), best_tokens = tokens, best_rate = plain_rate_to_beat(n);
        std::size_t width = n;
        best_.assign(lengths.begin(), lengths.end());
        price_by_depth_.resize(most + 1);
        for (;;) {
            // A draft at depth j widens round j and the pass by one: priced
            // once per depth, whichever sequence it goes to.
            std::fill(price_by_depth_.begin(), price_by_depth_.end(), -1.0);
            std::size_t pick = n;
            double pick_rate = -1.0;
            for (std::size_t i = 0; i < n; ++i) {
                const std::size_t j = lengths[i];
                if (j >= queries[i].cap) continue;
                if (price_by_depth_[j] < 0.0) {
                    ++rounds_[j];
                    price_by_depth_[j] = step_seconds(costs_, rounds_, width + 1);
                    --rounds_[j];
                }
                const double rate = (tokens + gain_[i * (most + 1) + j]) / price_by_depth_[j];
                if (rate > pick_rate) pick_rate = rate, pick = i;
            }
            if (pick == n) break;
            tokens += gain_[pick * (most + 1) + lengths[pick]];
            ++rounds_[lengths[pick]];
            ++lengths[pick];
            ++width;
            if (pick_rate > best_rate) {
                best_rate = pick_rate, best_tokens = tokens;
                best_.assign(lengths.begin(), lengths.end());
            }
        }
        std::copy(best_.begin(), best_.end(), lengths.begin());
        return best_tokens;
    }

    AutoBatchOptions options_;
    BatchStepCosts costs_;
    AcceptanceEstimate pooled_;
    std::vector<double> pooled_chain_;
    std::unordered_map<std::uint64_t, Counts> requests_;
    RequestSpread spread_;
    double request_strength_;  // what the last plan used
    std::vector<RequestSpread::FirstDrafts> firsts_;
    std::vector<double> gain_, survive_, price_by_depth_;
    std::vector<std::size_t> best_;
    mutable std::vector<std::size_t> rounds_;  // draft round widths of the step being priced
};

}  // namespace specdec
