#pragma once
// What a generation returns: why it stopped, its counts and times, and how
// the results of single steps add up to a generation's. Shared by every
// decoder, so that a benchmark compares like with like. Kept apart from the
// options because the counters (chain and tree) grow with every decoder,
// while the options are the few knobs a user sets.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "specdec/core/logprobs.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

enum class StopReason {
    max_new_tokens,  // generated options.max_new_tokens tokens
    stop_token,      // emitted one of options.stop_tokens
    context_full,    // the target's KV cache has no room for another position
    callback,        // the on_token callback returned false
};

[[nodiscard]] inline std::string_view to_string(StopReason reason) {
    switch (reason) {
        case StopReason::max_new_tokens: return "max_new_tokens";
        case StopReason::stop_token: return "stop_token";
        case StopReason::context_full: return "context_full";
        case StopReason::callback: return "callback";
    }
    return "unknown";
}

struct GenerationStats {
    std::size_t prompt_tokens = 0;
    std::size_t generated_tokens = 0;
    // Prompt tokens the target actually ran in prefill (the rest were reused
    // from the KV cache of an earlier call sharing that prefix).
    std::size_t prefill_tokens = 0;
    // Every token fed to the target's forward passes, prefill included.
    std::size_t target_tokens = 0;
    std::size_t target_forward_passes = 0;
    std::size_t draft_forward_passes = 0;
    std::size_t draft_tokens_proposed = 0;
    // Drafts accepted *and emitted*: a stop token or a callback that ends
    // generation inside an accepted block leaves the rest uncounted.
    std::size_t draft_tokens_accepted = 0;
    // Steps whose acceptance ran inside the target (DeviceVerifyingLM).
    std::size_t device_verified_steps = 0;
    // Index i: how often a draft was proposed / accepted at draft position i of a step.
    std::vector<std::size_t> proposed_at_position;
    std::vector<std::size_t> accepted_at_position;
    // Chains: index i, how often draft i was tested (proposed, and drafts
    // 0..i-1 kept by the rule). With lengths that vary from step to step this
    // is not min(proposed[i], accepted[i - 1]): a step that kept all of a
    // short draft and one that lost the first of a long one would count as
    // a test of the long draft's later positions.
    std::vector<std::size_t> tested_at_position;
    // Index n: how many steps proposed exactly n drafts (the chosen lengths).
    std::vector<std::size_t> draft_length_counts;
    // Tree decoding: for a tree, proposed_at_position[d] counts the nodes at
    // depth d + 1 and accepted_at_position[d] the steps whose accepted path
    // reached depth d + 1. Index [d][r]: how often the sibling of rank r at
    // depth d + 1 was tested (its parent accepted, its earlier siblings
    // rejected) and accepted, as the verifier decided (before stop tokens).
    std::vector<std::vector<std::size_t>> tested_at_depth_rank;
    std::vector<std::vector<std::size_t>> accepted_at_depth_rank;
    double prefill_seconds = 0.0;     // prefill(): the target's (and draft's) prompt pass
    double draft_seconds = 0.0;       // inside the drafter
    double target_seconds = 0.0;      // inside target.forward (the verification pass)
    double acceptance_seconds = 0.0;  // logits processing and the acceptance rule
    double total_seconds = 0.0;       // the whole generate() call, prefill included

    // Fraction of proposed draft tokens that were accepted.
    [[nodiscard]] double acceptance_rate() const {
        return draft_tokens_proposed == 0 ? 0.0
                                          : static_cast<double>(draft_tokens_accepted) / draft_tokens_proposed;
    }
    // Emitted tokens per target forward pass after prefill (1 for autoregressive decoding).
    [[nodiscard]] double mean_tokens_per_target_pass() const {
        return target_forward_passes == 0 ? 0.0
                                          : static_cast<double>(generated_tokens) / target_forward_passes;
    }
    [[nodiscard]] double tokens_per_second() const {
        return total_seconds <= 0.0 ? 0.0 : static_cast<double>(generated_tokens) / total_seconds;
    }
    // Generation after the prompt: the time of the steps, without the prefill
    // (which the first token waits for; prefill_seconds times it).
    [[nodiscard]] double decode_seconds() const { return std::max(0.0, total_seconds - prefill_seconds); }
    [[nodiscard]] double decode_tokens_per_second() const {
        const double seconds = decode_seconds();
        return seconds <= 0.0 ? 0.0 : static_cast<double>(generated_tokens) / seconds;
    }

    // Adds another call's or step's counts and times (prompt_tokens too).
    GenerationStats& operator+=(const GenerationStats& other) {
        prompt_tokens += other.prompt_tokens;
        generated_tokens += other.generated_tokens;
        prefill_tokens += other.prefill_tokens;
        target_tokens += other.target_tokens;
        target_forward_passes += other.target_forward_passes;
        draft_forward_passes += other.draft_forward_passes;
        draft_tokens_proposed += other.draft_tokens_proposed;
        draft_tokens_accepted += other.draft_tokens_accepted;
        device_verified_steps += other.device_verified_steps;
        add_counts(proposed_at_position, other.proposed_at_position);
        add_counts(accepted_at_position, other.accepted_at_position);
        add_counts(tested_at_position, other.tested_at_position);
        add_counts(draft_length_counts, other.draft_length_counts);
        add_tables(tested_at_depth_rank, other.tested_at_depth_rank);
        add_tables(accepted_at_depth_rank, other.accepted_at_depth_rank);
        prefill_seconds += other.prefill_seconds;
        draft_seconds += other.draft_seconds;
        target_seconds += other.target_seconds;
        acceptance_seconds += other.acceptance_seconds;
        total_seconds += other.total_seconds;
        return *this;
    }

    // Nodes each target pass verified (the draft tokens proposed per pass).
    [[nodiscard]] double mean_drafts_per_target_pass() const {
        return target_forward_passes == 0 ? 0.0
                                          : static_cast<double>(draft_tokens_proposed) / target_forward_passes;
    }

private:
    static void add_tables(std::vector<std::vector<std::size_t>>& into,
                           const std::vector<std::vector<std::size_t>>& from) {
        if (into.size() < from.size()) into.resize(from.size());
        for (std::size_t i = 0; i < from.size(); ++i) add_counts(into[i], from[i]);
    }
    static void add_counts(std::vector<std::size_t>& into, const std::vector<std::size_t>& from) {
        if (into.size() < from.size()) into.resize(from.size(), 0);
        for (std::size_t i = 0; i < from.size(); ++i) into[i] += from[i];
    }
};

struct GenerationResult {
    std::vector<Token> tokens;  // the generated tokens (prompt excluded)
    GenerationStats stats;
    StopReason stop_reason = StopReason::max_new_tokens;
    std::vector<TokenLogprob> logprobs{};  // one per token when DecodingOptions::logprobs.enabled
    std::uint64_t seed = 0;                // the seed the generation used (given or fresh)
};

// What one decoding step emitted.
struct StepResult {
    std::vector<Token> tokens;       // emitted tokens, in order (1 .. draft_tokens + 1 of them)
    std::optional<StopReason> stop;  // set when the step ended generation (stop token, callback, context full)
    GenerationStats stats;           // this step alone (generated_tokens == tokens.size())
    std::vector<TokenLogprob> logprobs{};  // one per token when DecodingOptions::logprobs.enabled
};

// Adds a step to a generation of at most max_new_tokens tokens: its tokens and
// stats (total_seconds is the caller's to set). Returns true when the
// generation has ended, with result.stop_reason set. generate() is prefill(),
// then step() and this until true; code that steps several generations in
// turn (specdec-bench) does the same, so its results equal generate()'s.
inline bool add_step(GenerationResult& result, const StepResult& step, std::size_t max_new_tokens) {
    result.tokens.insert(result.tokens.end(), step.tokens.begin(), step.tokens.end());
    result.logprobs.insert(result.logprobs.end(), step.logprobs.begin(), step.logprobs.end());
    result.stats += step.stats;
    if (step.stop) {
        result.stop_reason = *step.stop;
        return true;
    }
    if (result.tokens.size() >= max_new_tokens) {
        result.stop_reason = StopReason::max_new_tokens;
        return true;
    }
    return false;
}

}  // namespace specdec
