#pragma once
// The results of --batch (batch_bench.hpp): the sweep's settings and, per
// batch size and variant, what its runs measured and what the cost model
// predicted for them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "specdec/decoding/batched_decoder.hpp"

#include "auto_variants.hpp"
#include "bench_results.hpp"

namespace specdec::bench {

enum class BatchVariantKind { autoregressive, fixed, automatic };

struct BatchSettings {
    std::vector<std::size_t> batch_sizes{1, 2, 4, 8, 16, 32};
    std::vector<std::size_t> fixed_lengths{1, 2, 3, 4};  // one fixed-k variant each
    std::size_t auto_max_draft_tokens = 8;                // the cap of the auto variant
    std::vector<AutoVariant> auto_variants{};             // more auto variants, settings changed (--auto-variant)
    double temperature = 0.0;
    // Every request's acceptance rule at T > 0 (at T = 0 both are greedy).
    ChosenRule::Kind rule = ChosenRule::Kind::tokenwise;
    std::size_t new_tokens = 24;   // per request
    std::size_t waves = 2;         // requests per run = waves x B, at least min_requests
    // Small batches finish a run of waves x B requests in a few dozen steps,
    // where a handful of requests that happen to accept well or badly move
    // the ratio to plain decoding by tens of percent from round to round.
    std::size_t min_requests = 16;
    std::size_t rounds = 2;
    std::size_t prompt_tokens = 16;
    std::uint64_t seed = 42;
    // The auto decoder of each batch size first serves one run untimed (on
    // other prompts), so that the rounds measure what it learned rather than
    // its warm-up steps (cf. RunChoices::learn_auto_first); every other
    // decoder serves one request per slot of it, so that no variant's timed
    // steps fault in the pages of its KV caches while auto's were faulted in
    // untimed (KvCache touches a page when a position is first written).
    bool learn_auto_first = true;
};

// What a step's policy chose: one length per request in the pass.
using PlannedLengths = std::vector<std::uint8_t>;

// The verification every request runs: "greedy" at T = 0, else the rule's name.
[[nodiscard]] inline const char* verification_name(const BatchSettings& settings) {
    if (settings.temperature == 0.0) return "greedy";
    switch (settings.rule) {
        case ChosenRule::Kind::block: return "block";
        case ChosenRule::Kind::coupled: return "coupled";
        case ChosenRule::Kind::tokenwise: break;
    }
    return "tokenwise";
}

// Requests in one run of a variant at batch size `batch`.
[[nodiscard]] inline std::size_t requests_per_run(const BatchSettings& settings, std::size_t batch) {
    return std::max(settings.waves * batch, settings.min_requests);
}

// One variant at one batch size, summed over the rounds.
struct BatchVariantResult {
    BatchVariantKind kind = BatchVariantKind::autoregressive;
    std::size_t draft_tokens = 0;  // fixed: k; auto: its cap; autoregressive: 0
    std::string auto_variant;      // auto with changed settings: the --auto-variant's name; else empty
    std::size_t rounds = 0;
    // The steps with every slot decoding (the steady state).
    std::size_t steps = 0;
    std::size_t tokens = 0;         // committed
    double seconds = 0.0;           // their time, the prefill of admitted prompts left out
    std::size_t target_tokens = 0;  // rows in the target passes
    std::size_t sequence_steps = 0; // sum over steps of the requests in it (= steps x B)
    std::size_t drafts = 0;         // proposed
    std::size_t draft_rounds = 0;   // draft passes
    std::vector<double> tokens_per_second_per_round;
    // Every request of every round: the seconds of its decoder's steps from
    // the one that admitted it (its prefill included) to its last token.
    std::size_t requests = 0;
    double latency_seconds = 0.0;
    // Chosen lengths: how many (request, step) pairs of the steady state got n drafts.
    std::vector<std::size_t> length_counts;
    // Each steady-state step's lengths in the last round (auto: what it chose).
    std::vector<PlannedLengths> last_round_lengths;
    // What the batch model (BatchModel, learning from this variant's own
    // steps) predicted before each steady-state step for the lengths it ran:
    // the sums of sum_i E_i(k_i) and of the step's price (step_seconds).
    double predicted_tokens = 0.0;
    double predicted_seconds = 0.0;
    // T = 0: did every request emit exactly the autoregressive variant's tokens?
    std::optional<bool> greedy_match;

    [[nodiscard]] std::string label() const {
        switch (kind) {
            case BatchVariantKind::autoregressive: return "AR";
            case BatchVariantKind::fixed: return "k=" + std::to_string(draft_tokens);
            case BatchVariantKind::automatic:
                return auto_variant.empty() ? "auto<=" + std::to_string(draft_tokens) : "auto:" + auto_variant;
        }
        return "?";
    }
    [[nodiscard]] double tokens_per_second() const { return seconds > 0.0 ? double(tokens) / seconds : 0.0; }
    [[nodiscard]] double predicted_tokens_per_second() const {
        return predicted_seconds > 0.0 ? predicted_tokens / predicted_seconds : 0.0;
    }
    [[nodiscard]] double efficiency() const {
        const double predicted = predicted_tokens_per_second();
        return predicted > 0.0 ? tokens_per_second() / predicted : 0.0;
    }
    [[nodiscard]] double mean_latency_seconds() const { return requests ? latency_seconds / double(requests) : 0.0; }
    [[nodiscard]] double mean_draft_length() const {
        return sequence_steps ? double(drafts) / double(sequence_steps) : 0.0;
    }
    // Tokens committed per request per step (1 for plain decoding).
    [[nodiscard]] double tokens_per_sequence_step() const {
        return sequence_steps ? double(tokens) / double(sequence_steps) : 0.0;
    }
    // accepted / proposed drafts (each request of a step emits its accepted drafts + 1).
    [[nodiscard]] double acceptance_rate() const {
        return drafts ? double(tokens - sequence_steps) / double(drafts) : 0.0;
    }
    // Steady-state steps in which no request drafted (auto: plain batched decoding).
    [[nodiscard]] std::size_t steps_without_drafts() const {
        std::size_t n = 0;
        for (const PlannedLengths& step : last_round_lengths)
            n += std::all_of(step.begin(), step.end(), [](std::uint8_t k) { return k == 0; }) ? 1 : 0;
        return n;
    }
};

// What the auto decoder of a batch size believed at the end (its policy's
// cost model, for the report).
struct LearnedBatchCosts {
    std::vector<std::pair<std::size_t, double>> target_pass_seconds;  // (tokens in the pass, V)
    std::vector<std::pair<std::size_t, double>> draft_round_seconds;  // (sequences in the round, D)
    std::vector<double> pooled_acceptance;                            // a_m, m = 0 .. cap - 1
    double request_prior_strength = 0.0;  // pseudo-samples of the pooled a_m in a request's own
    std::size_t plain_refreshes = 0;       // plain steps run to time a plain rate of the plan's own time
    std::size_t plain_probes_skipped = 0;  // plain probes left out while drafting clearly won
};

struct BatchSizeResult {
    std::size_t batch = 0;
    std::vector<BatchVariantResult> variants;  // autoregressive first, then the fixed k, auto, the auto variants
    LearnedBatchCosts auto_costs;

    [[nodiscard]] const BatchVariantResult& autoregressive() const { return variants.front(); }
    [[nodiscard]] const BatchVariantResult* automatic() const {
        for (const BatchVariantResult& v : variants)
            if (v.kind == BatchVariantKind::automatic && v.auto_variant.empty()) return &v;
        return nullptr;
    }
    // The fastest fixed-k variant, or nullptr.
    [[nodiscard]] const BatchVariantResult* best_fixed() const {
        const BatchVariantResult* best = nullptr;
        for (const BatchVariantResult& v : variants)
            if (v.kind == BatchVariantKind::fixed && (!best || v.tokens_per_second() > best->tokens_per_second())) best = &v;
        return best;
    }
    // The fastest of autoregressive and every fixed k (what a hand-picked
    // setting could have done at this batch size).
    [[nodiscard]] const BatchVariantResult& best_static() const {
        const BatchVariantResult* best = &autoregressive();
        if (const BatchVariantResult* fixed = best_fixed(); fixed && fixed->tokens_per_second() > best->tokens_per_second())
            best = fixed;
        return *best;
    }
    [[nodiscard]] double ratio_to_autoregressive(const BatchVariantResult& v) const {
        const double baseline = autoregressive().tokens_per_second();
        return baseline > 0.0 ? v.tokens_per_second() / baseline : 0.0;
    }
    [[nodiscard]] double predicted_ratio_to_autoregressive(const BatchVariantResult& v) const {
        const double baseline = autoregressive().predicted_tokens_per_second();
        return baseline > 0.0 ? v.predicted_tokens_per_second() / baseline : 0.0;
    }
};

struct BatchReport {
    MachineInfo machine;
    ModelInfo target;
    ModelInfo draft;
    BatchSettings settings;
    std::vector<BatchSizeResult> sizes;
    double wall_seconds = 0.0;

    // The smallest batch size at which no fixed k is faster than
    // autoregressive decoding (the best fixed k's ratio <= 1), if any.
    [[nodiscard]] std::optional<std::size_t> crossover() const {
        for (const BatchSizeResult& s : sizes) {
            const BatchVariantResult* best = s.best_fixed();
            if (best && s.ratio_to_autoregressive(*best) <= 1.0) return s.batch;
        }
        return std::nullopt;
    }
    [[nodiscard]] bool all_greedy_runs_match() const {
        for (const BatchSizeResult& s : sizes)
            for (const BatchVariantResult& v : s.variants)
                if (v.greedy_match && !*v.greedy_match) return false;
        return true;
    }
};

}  // namespace specdec::bench
