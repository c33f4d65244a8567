#pragma once
// What one specdec-bench run measured, and the quantities derived from it.
// Plain data: the runner fills it, the table/JSON/SVG writers read it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "cost_model.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/generation_result.hpp"

namespace specdec::bench {

// The prompt repetition r generates from: prompts[r % size()], or `prompt`
// when there are no per-repetition prompts (chain rows and tree rows alike).
[[nodiscard]] inline std::span<const Token> repetition_prompt(std::span<const std::vector<Token>> prompts,
                                                              std::span<const Token> prompt, std::size_t repetition) {
    if (prompts.empty()) return prompt;
    return prompts[repetition % prompts.size()];
}

struct MachineInfo {
    std::string cpu;
    std::size_t threads = 0;
    std::string backend;  // "cpu" or "cuda"
    std::string device;   // the accelerator, empty on the CPU backend
    double load_average = -1.0;  // 1-minute load average when the run started; < 0 unknown
    std::size_t hardware_threads = 0;
    double read_bandwidth = 0.0;  // host memory bytes/s with `threads` threads (CPU backend); 0 = not measured
};

struct ModelInfo {
    std::string name;
    std::string type;  // e.g. "llama F32", "llama Q4_0", "prompt-lookup"
    std::uint64_t parameters = 0;
    std::uint64_t bytes = 0;
    bool synthetic = false;
    std::uint64_t bytes_read_per_token = 0;  // weights a one-token forward streams (embedding rows excluded); 0 = unknown
};

// Prefill: the prompt fed in one pass from an empty cache, up to the first
// token's logits (the median of several passes): time to first token.
struct PrefillMeasurement {
    std::size_t tokens = 0;
    double seconds = 0.0;

    [[nodiscard]] double tokens_per_second() const { return seconds > 0.0 ? tokens / seconds : 0.0; }
};

// Timings of single forward passes, measured once per run with the prompt in
// the cache (medians of several calls): the c and v_k of the cost model.
struct CostMeasurement {
    double target_step_seconds = 0.0;  // target forward of 1 token
    double draft_step_seconds = 0.0;   // draft forward of 1 token (prompt lookup: one proposal)
    std::vector<std::size_t> verified_tokens;      // k + 1 for each measured k
    std::vector<double> verification_seconds;      // target forward of k + 1 tokens
    std::vector<PrefillMeasurement> prefill;       // target: the benchmark's prompt, then --prompt-tokens if given

    [[nodiscard]] double decode_tokens_per_second() const { return target_step_seconds > 0.0 ? 1.0 / target_step_seconds : 0.0; }

    [[nodiscard]] double cost_ratio() const {
        return target_step_seconds > 0.0 ? draft_step_seconds / target_step_seconds : 0.0;
    }
    [[nodiscard]] double verification_cost_ratio(std::size_t draft_tokens) const {
        for (std::size_t i = 0; i < verified_tokens.size(); ++i) {
            if (verified_tokens[i] == draft_tokens + 1 && target_step_seconds > 0.0)
                return verification_seconds[i] / target_step_seconds;
        }
        return 1.0;
    }
};

// One (temperature, draft length) configuration: `repetitions` speculative
// generations, each paired with the autoregressive generation of the same
// repetition and temperature (shared by the rows of that temperature), summed.
struct ConfigurationResult {
    double temperature = 0.0;
    std::size_t draft_tokens = 0;  // k; with auto_length the most drafts per step
    bool auto_length = false;      // AutoLength chose each step's length (<= draft_tokens)
    RuleChoice rule = RuleChoice::tokenwise;
    std::size_t repetitions = 0;

    // Both decoders' statistics summed over the repetitions.
    GenerationStats autoregressive;
    GenerationStats speculative;

    // Speedup of each repetition alone: their spread shows how noisy the machine (and the sample) was.
    std::vector<double> speedup_per_repetition;

    double cost_ratio = 0.0;               // c
    double verification_cost_ratio = 1.0;  // v_k
    // v_n for n = 0 .. draft_tokens (auto rows: the mixture over chosen lengths needs each).
    std::vector<double> verification_cost_ratio_by_length;
    double target_step_seconds = 0.0;      // one 1-token target forward (to express the model's step in seconds)

    // Temperature 0 only: did speculative decoding emit exactly the autoregressive tokens?
    std::optional<bool> greedy_match;
    std::optional<std::size_t> first_mismatch;  // index of the first differing token

    // Decoding speed: generated tokens per second of the steps after the
    // prompt. The prefill is left out of both (it is the same target pass for
    // both decoders, plus the draft's prompt for speculative decoding) and
    // measured on its own (CostMeasurement::prefill), as the cost model
    // describes the steps.
    [[nodiscard]] double autoregressive_tokens_per_second() const {
        return autoregressive.decode_tokens_per_second();
    }
    [[nodiscard]] double speculative_tokens_per_second() const {
        return speculative.decode_tokens_per_second();
    }
    [[nodiscard]] double speedup() const {
        const double baseline = autoregressive_tokens_per_second();
        return baseline > 0.0 ? speculative_tokens_per_second() / baseline : 0.0;
    }
    [[nodiscard]] double slowest_repetition_speedup() const {
        return speedup_per_repetition.empty() ? 0.0 : *std::min_element(speedup_per_repetition.begin(), speedup_per_repetition.end());
    }
    [[nodiscard]] double fastest_repetition_speedup() const {
        return speedup_per_repetition.empty() ? 0.0 : *std::max_element(speedup_per_repetition.begin(), speedup_per_repetition.end());
    }
    // The decoder's definition: accepted drafts / proposed drafts.
    [[nodiscard]] double acceptance_rate() const {
        return speculative.acceptance_rate();
    }
    // The cost model's alpha: accepted drafts / drafts that were actually tested.
    [[nodiscard]] double alpha() const { return per_token_acceptance(speculative.tested_at_position, speculative.accepted_at_position); }
    [[nodiscard]] double mean_accepted() const {
        const GenerationStats& s = speculative;
        return s.target_forward_passes == 0 ? 0.0 : static_cast<double>(s.draft_tokens_accepted) / s.target_forward_passes;
    }
    [[nodiscard]] double mean_tokens_per_target_pass() const {
        return speculative.mean_tokens_per_target_pass();
    }
    [[nodiscard]] std::vector<double> per_position_acceptance() const {
        std::vector<double> rates;
        const GenerationStats& s = speculative;
        for (std::size_t i = 0; i < s.proposed_at_position.size(); ++i)
            rates.push_back(s.proposed_at_position[i] == 0
                                ? 0.0
                                : static_cast<double>(s.accepted_at_position[i]) / s.proposed_at_position[i]);
        return rates;
    }
    [[nodiscard]] bool plotted_against_k() const { return !auto_length && rule == RuleChoice::tokenwise; }
    [[nodiscard]] std::string label() const {
        std::string text = auto_length ? "auto<=" + std::to_string(draft_tokens) : std::to_string(draft_tokens);
        if (rule != RuleChoice::tokenwise) text += " " + std::string(to_string(rule));
        return text;
    }
    // Mean drafts per step (the chosen lengths; k for a fixed chain).
    [[nodiscard]] double mean_draft_length() const {
        const auto& counts = speculative.draft_length_counts;
        double steps = 0.0, drafts = 0.0;
        for (std::size_t n = 0; n < counts.size(); ++n) steps += counts[n], drafts += double(n) * counts[n];
        return steps > 0.0 ? drafts / steps : static_cast<double>(draft_tokens);
    }
    // The cost model over the lengths actually drafted: sum_n f_n E(alpha, n) /
    // sum_n f_n (n c + v_n), f_n = steps with n drafts (a fixed chain: f_k = 1;
    // the last step of a run may be shorter).
    [[nodiscard]] double expected_tokens_per_pass() const {
        const auto& counts = speculative.draft_length_counts;
        double steps = 0.0, tokens = 0.0;
        for (std::size_t n = 0; n < counts.size(); ++n)
            steps += counts[n], tokens += counts[n] * bench::expected_tokens_per_pass(alpha(), n);
        return steps > 0.0 ? tokens / steps : bench::expected_tokens_per_pass(alpha(), draft_tokens);
    }
    [[nodiscard]] double predicted_step_cost() const {
        const auto& counts = speculative.draft_length_counts;
        double steps = 0.0, cost = 0.0;
        for (std::size_t n = 0; n < counts.size(); ++n)
            steps += counts[n], cost += counts[n] * (double(n) * cost_ratio + verification_ratio(n));
        return steps > 0.0 ? cost / steps : double(draft_tokens) * cost_ratio + verification_cost_ratio;
    }
    [[nodiscard]] double predicted_speedup() const {
        if (!auto_length) return bench::predicted_speedup(alpha(), draft_tokens, cost_ratio, verification_cost_ratio);
        const double cost = predicted_step_cost();
        return cost > 0.0 ? expected_tokens_per_pass() / cost : 0.0;
    }
    [[nodiscard]] double verification_ratio(std::size_t n) const {
        if (n < verification_cost_ratio_by_length.size()) return verification_cost_ratio_by_length[n];
        return n == draft_tokens ? verification_cost_ratio : 1.0;
    }
    // Seconds per step, measured: where the time goes beyond the model's k c + v_k.
    struct StepTimes {
        double draft = 0.0, target = 0.0, acceptance = 0.0, other = 0.0, predicted = 0.0;
    };
    [[nodiscard]] StepTimes step_times() const {
        const GenerationStats& s = speculative;
        StepTimes t;
        const double steps = static_cast<double>(s.target_forward_passes);
        if (steps <= 0.0) return t;
        t.draft = s.draft_seconds / steps;
        t.target = s.target_seconds / steps;
        t.acceptance = s.acceptance_seconds / steps;
        t.other = std::max(0.0, s.total_seconds - s.prefill_seconds - s.draft_seconds - s.target_seconds - s.acceptance_seconds) / steps;
        t.predicted = predicted_step_cost() * target_step_seconds;
        return t;
    }
    [[nodiscard]] double efficiency() const {
        const double predicted = predicted_speedup();
        return predicted > 0.0 ? speedup() / predicted : 0.0;
    }
};

// One token-tree configuration (--tree): like ConfigurationResult, with a
// TreeSpeculativeDecoder of a fixed shape or AutoTree.
struct TreeResult {
    double temperature = 0.0;
    std::string label;          // "auto" or the requested shape ("3x2x1")
    std::string shape;          // the shape drafted (auto: the policy's plan at the end)
    std::size_t repetitions = 0;
    GenerationStats autoregressive;
    GenerationStats speculative;
    std::vector<double> speedup_per_repetition;
    // Predicted speedup: for a fixed shape, E / (draft passes * c + v_n) with
    // E = 1 + sum over nodes of prod a(d, r) along the node's path, a(d, r) =
    // the measured acceptance of the rank-r sibling at depth d + 1 when tested,
    // and v_n the measured target pass over the shape's width; for auto, what
    // the policy's own cost model predicts for its plan.
    double predicted_speedup = 0.0;
    std::optional<bool> greedy_match;
    std::optional<std::size_t> first_mismatch;

    // Decoding after the prompt, as the chain rows (ConfigurationResult): the
    // prefill is the same pass for both and would pull every ratio to 1.
    [[nodiscard]] double autoregressive_tokens_per_second() const { return autoregressive.decode_tokens_per_second(); }
    [[nodiscard]] double speculative_tokens_per_second() const { return speculative.decode_tokens_per_second(); }
    [[nodiscard]] double speedup() const {
        const double baseline = autoregressive_tokens_per_second();
        return baseline > 0.0 ? speculative_tokens_per_second() / baseline : 0.0;
    }
    [[nodiscard]] double slowest_repetition_speedup() const {
        return speedup_per_repetition.empty() ? 0.0 : *std::min_element(speedup_per_repetition.begin(), speedup_per_repetition.end());
    }
    [[nodiscard]] double fastest_repetition_speedup() const {
        return speedup_per_repetition.empty() ? 0.0 : *std::max_element(speedup_per_repetition.begin(), speedup_per_repetition.end());
    }
    [[nodiscard]] double nodes_per_pass() const { return speculative.mean_drafts_per_target_pass(); }
    [[nodiscard]] double tokens_per_pass() const { return speculative.mean_tokens_per_target_pass(); }
    [[nodiscard]] double accepted_per_pass() const {
        const GenerationStats& s = speculative;
        return s.target_forward_passes == 0 ? 0.0 : static_cast<double>(s.draft_tokens_accepted) / s.target_forward_passes;
    }
    [[nodiscard]] double efficiency() const { return predicted_speedup > 0.0 ? speedup() / predicted_speedup : 0.0; }
    // a(d, r) = accepted / tested, as measured.
    [[nodiscard]] double acceptance(std::size_t depth, std::size_t rank) const {
        const auto& tested = speculative.tested_at_depth_rank;
        const auto& accepted = speculative.accepted_at_depth_rank;
        if (depth >= tested.size() || rank >= tested[depth].size() || tested[depth][rank] == 0) return 0.0;
        const std::size_t a = depth < accepted.size() && rank < accepted[depth].size() ? accepted[depth][rank] : 0;
        return static_cast<double>(a) / static_cast<double>(tested[depth][rank]);
    }
};

namespace detail {

// Records the first repetition whose speculative tokens differ from the
// autoregressive ones (greedy decoding must reproduce them exactly); a later
// match does not hide an earlier mismatch. Result: ConfigurationResult or TreeResult.
template <class Result>
void check_greedy_match(Result& result, const std::vector<Token>& autoregressive, const std::vector<Token>& speculative) {
    if (result.greedy_match && !*result.greedy_match) return;
    const auto [ar_it, spec_it] = std::mismatch(autoregressive.begin(), autoregressive.end(), speculative.begin(), speculative.end());
    const bool equal = ar_it == autoregressive.end() && spec_it == speculative.end();
    result.greedy_match = equal;
    if (!equal) result.first_mismatch = static_cast<std::size_t>(ar_it - autoregressive.begin());
}

}  // namespace detail

struct BenchReport {
    MachineInfo machine;
    ModelInfo target;
    ModelInfo draft;
    std::size_t prompt_tokens = 0;
    std::optional<std::string> prompt_text;  // none for a seeded token prompt
    bool prompt_per_repetition = false;      // each repetition its own seeded prompt
    std::size_t new_tokens = 0;
    std::size_t repetitions = 0;        // rounds run
    std::size_t max_repetitions = 0;    // rounds asked for (the most, with a time budget)
    double time_budget_seconds = 0.0;   // > 0: the rounds ran while they fit in it
    bool interleaved_rows = false;      // each round's rows advanced step by step in turn (run_configurations)
    bool auto_learned_first = false;    // auto rows generated once, untimed, before the rounds
    std::uint64_t seed = 0;
    CostMeasurement costs;
    std::vector<ConfigurationResult> configurations;
    std::vector<TreeResult> trees;
    std::optional<std::string> trees_skipped;  // why --tree rows were not run
    double wall_seconds = 0.0;

    // Autoregressive tokens/s over every configuration, and the memory
    // roofline bandwidth / bytes-per-token it is measured against.
    [[nodiscard]] double autoregressive_tokens_per_second() const {
        GenerationStats all;
        for (const auto& c : configurations) all += c.autoregressive;
        return all.decode_tokens_per_second();
    }
    [[nodiscard]] double roofline_tokens_per_second() const {
        return machine.read_bandwidth > 0.0 && target.bytes_read_per_token > 0
                   ? machine.read_bandwidth / static_cast<double>(target.bytes_read_per_token)
                   : 0.0;
    }

    [[nodiscard]] bool all_greedy_runs_match() const {
        for (const auto& configuration : configurations)
            if (configuration.greedy_match && !*configuration.greedy_match) return false;
        return true;
    }
};

}  // namespace specdec::bench
