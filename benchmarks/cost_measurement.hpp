#pragma once
// Measures the cost model's c and v_k directly: single forward passes of the
// target and the draft with the prompt already in the cache, timed on the same
// machine in the same process as the generations they explain.
//
// A speculative step alternates the models: the draft's passes follow a
// target pass that streamed the target's weights through the caches, and the
// verification pass follows draft passes. Timing a model's passes back to
// back instead lets a small draft run from a warm cache (and a warm thread
// pool), which makes c look smaller than any step will see it. So the draft's
// passes and the verification passes are timed each right after a pass of
// the other model, as in a step; the autoregressive one-token pass, which
// follows itself in plain decoding, is timed back to back.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

#include "bench_results.hpp"

namespace specdec::bench {

namespace detail {

using Clock = std::chrono::steady_clock;

[[nodiscard]] inline double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const std::size_t middle = values.size() / 2;
    return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

// Tokens to feed after the prompt: the prompt's own ids, cycled (always valid ids).
[[nodiscard]] inline std::vector<Token> filler_tokens(std::span<const Token> prompt, std::size_t count) {
    std::vector<Token> tokens(count);
    for (std::size_t i = 0; i < count; ++i) tokens[i] = prompt[i % prompt.size()];
    return tokens;
}

// Keeps sampling a cheap call until `min_seconds` of samples are collected
// (at most max_samples): a 1 ms forward pass needs many samples for a stable
// median on a shared machine, a 50 ms one does not.
struct SamplingBudget {
    std::size_t min_samples = 5;
    std::size_t max_samples = 200;
    double min_seconds = 0.1;
};

struct NothingBefore {
    void operator()() const {}
};

// Median seconds of model.forward(`tokens` tokens) appended after the prompt,
// each sample right after an untimed call of `before` (the other model's
// pass, or nothing). One untimed call first: the first pass touches cold
// weights and caches.
template <CausalLM Model, class Before = NothingBefore>
[[nodiscard]] double time_forward(Model& model, std::span<const Token> prompt, std::size_t tokens, const SamplingBudget& budget,
                                  Before&& before = {}) {
    model.truncate(0);
    (void)model.forward(prompt);
    const std::vector<Token> feed = filler_tokens(prompt, tokens);
    (void)model.forward(feed);
    model.truncate(prompt.size());
    std::vector<double> seconds;
    double total = 0.0;
    while (seconds.size() < budget.max_samples && (seconds.size() < budget.min_samples || total < budget.min_seconds)) {
        before();
        const auto start = Clock::now();
        (void)model.forward(feed);
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        seconds.push_back(elapsed);
        total += elapsed;
        model.truncate(prompt.size());
    }
    model.truncate(0);
    return median(std::move(seconds));
}

// Median seconds of prefilling `prompt` from an empty cache, up to the last
// token's logits (forward_last where the model has it: only that row goes
// through the output head).
template <CausalLM Model>
[[nodiscard]] double time_prefill(Model& model, std::span<const Token> prompt, const SamplingBudget& budget) {
    auto prefill = [&] {
        model.truncate(0);
        if constexpr (requires { model.forward_last(prompt); }) (void)model.forward_last(prompt);
        else (void)model.forward(prompt);
    };
    prefill();
    std::vector<double> seconds;
    double total = 0.0;
    while (seconds.size() < budget.max_samples && (seconds.size() < budget.min_samples || total < budget.min_seconds)) {
        const auto start = Clock::now();
        prefill();
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        seconds.push_back(elapsed);
        total += elapsed;
    }
    model.truncate(0);
    return median(std::move(seconds));
}

// A model-free drafter has no forward pass: its step cost is one proposal.
template <Drafter D>
[[nodiscard]] double time_proposal(D& drafter, std::span<const Token> prompt, const SamplingBudget& budget) {
    const SamplingOptions sampling{};
    const CounterRng rng{0};
    std::vector<double> seconds;
    double total = 0.0;
    drafter.reset();
    while (seconds.size() < budget.max_samples && (seconds.size() < budget.min_samples || total < budget.min_seconds)) {
        const auto start = Clock::now();
        const DraftProposal proposal = drafter.propose(DraftRequest{prompt, 1, sampling, rng});
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        (void)proposal;
        seconds.push_back(elapsed);
        total += elapsed;
    }
    return median(std::move(seconds));
}

}  // namespace detail

struct CostMeasurementSettings {
    detail::SamplingBudget step{.min_samples = 5, .max_samples = 300, .min_seconds = 0.3};          // 1-token forwards
    detail::SamplingBudget verification{.min_samples = 5, .max_samples = 200, .min_seconds = 0.3};  // (k+1)-token forwards
    // Passes timed right after the other model's pass (draft after target,
    // verification after draft): each sample also pays that untimed pass.
    detail::SamplingBudget interleaved{.min_samples = 9, .max_samples = 40, .min_seconds = 0.15};
    detail::SamplingBudget prefill{.min_samples = 3, .max_samples = 50, .min_seconds = 0.5};        // whole prompts
    std::size_t long_prompt_tokens = 0;  // > 0: also time the prefill of a prompt this long (the prompt's ids, cycled)
};

template <class Draft, CausalLM Target>
[[nodiscard]] CostMeasurement measure_costs(Draft& draft, Target& target, std::span<const Token> prompt,
                                            std::span<const std::size_t> draft_lengths,
                                            const CostMeasurementSettings& settings = {}) {
    CostMeasurement costs;
    costs.target_step_seconds = detail::time_forward(target, prompt, 1, settings.step);
    // One untimed one-token pass of `model`: what a step runs before the pass being timed.
    auto one_pass_of = [&prompt](auto& model) {
        return [&model, &prompt] {
            model.truncate(0);
            (void)model.forward(prompt.first(1));
            model.truncate(0);
        };
    };
    if constexpr (CausalLM<Draft>) {
        costs.draft_step_seconds = detail::time_forward(draft, prompt, 1, settings.interleaved, one_pass_of(target));
    } else {
        costs.draft_step_seconds = detail::time_proposal(draft, prompt, settings.step);
    }
    costs.prefill.push_back({prompt.size(), detail::time_prefill(target, prompt, settings.prefill)});
    if (settings.long_prompt_tokens > 0) {
        if (settings.long_prompt_tokens > target.context_length()) {
            throw Error("--prompt-tokens " + std::to_string(settings.long_prompt_tokens) + " exceeds the target's context of " +
                        std::to_string(target.context_length()) + " positions");
        }
        const std::vector<Token> long_prompt = detail::filler_tokens(prompt, settings.long_prompt_tokens);
        costs.prefill.push_back({long_prompt.size(), detail::time_prefill(target, long_prompt, settings.prefill)});
    }
    for (const std::size_t k : draft_lengths) {
        if (prompt.size() + k + 1 > target.context_length()) continue;  // cannot be verified in this context anyway
        costs.verified_tokens.push_back(k + 1);
        if constexpr (CausalLM<Draft>) {
            costs.verification_seconds.push_back(
                detail::time_forward(target, prompt, k + 1, settings.interleaved, one_pass_of(draft)));
        } else {
            costs.verification_seconds.push_back(detail::time_forward(target, prompt, k + 1, settings.verification));
        }
    }
    return costs;
}

}  // namespace specdec::bench
