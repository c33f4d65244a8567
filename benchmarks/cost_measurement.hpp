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
// follows itself in plain decoding, is timed right after another one.
//
// The passes are sampled in rounds (one of each per round) rather than one
// quantity after the other: c and v_k are ratios, and a machine whose speed
// drifts between the first and the last quantity would otherwise skew them.
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

[[nodiscard]] inline double median(std::vector<double> values) {  // by value: sorts a copy
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

// Times one call of f.
template <class F>
[[nodiscard]] double seconds_of(F&& f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// model.forward(feed) after the cached prompt, then back to the prompt.
template <CausalLM Model>
void forward_after_prompt(Model& model, std::span<const Token> feed, std::size_t prompt_tokens) {
    (void)model.forward(feed);
    model.truncate(prompt_tokens);
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

}  // namespace detail

struct CostMeasurementSettings {
    // Rounds over every timed pass (target 1 token, draft, each verification
    // width) until min_seconds of timed passes, within the sample limits.
    detail::SamplingBudget rounds{.min_samples = 9, .max_samples = 80, .min_seconds = 1.5};
    detail::SamplingBudget prefill{.min_samples = 3, .max_samples = 50, .min_seconds = 0.5};  // whole prompts
    std::size_t long_prompt_tokens = 0;  // > 0: also time the prefill of a prompt this long (the prompt's ids, cycled)
};

// Samples the passes of the cost model in rounds (one of each per round):
// the one-token target pass right after another, a draft pass right after a
// target pass, and each verification width right after a draft pass. The
// benchmark runs one round per round of generations, so that the medians
// span the same minutes as the speeds they explain.
template <class Draft, CausalLM Target>
class CostSampler {
public:
    CostSampler(Draft& draft, Target& target, std::span<const Token> prompt, std::span<const std::size_t> draft_lengths)
        : draft_(draft), target_(target), prompt_(prompt.begin(), prompt.end()), one_(detail::filler_tokens(prompt, 1)) {
        for (const std::size_t k : draft_lengths) {
            if (prompt.size() + k + 1 > target.context_length()) continue;  // cannot be verified in this context anyway
            widths_.push_back(k + 1);
            feeds_.push_back(detail::filler_tokens(prompt, k + 1));
        }
        verification_.resize(widths_.size());
    }

    // One sample of every pass; both models hold nothing afterwards.
    void round() {
        target_.truncate(0);
        (void)target_.forward(prompt_);
        if constexpr (CausalLM<Draft>) {
            draft_.truncate(0);
            (void)draft_.forward(prompt_);
        } else {
            draft_.reset();
        }
        if (!warm_) {  // the first passes touch cold weights and caches
            target_pass(one_);
            draft_pass();
            for (const std::vector<Token>& feed : feeds_) target_pass(feed);
            warm_ = true;
        }
        target_pass(one_);
        step_.push_back(detail::seconds_of([&] { target_pass(one_); }));
        drafting_.push_back(detail::seconds_of([&] { draft_pass(); }));
        seconds_ += step_.back() + drafting_.back();
        for (std::size_t i = 0; i < feeds_.size(); ++i) {
            draft_pass();
            verification_[i].push_back(detail::seconds_of([&] { target_pass(feeds_[i]); }));
            seconds_ += verification_[i].back();
        }
        target_.truncate(0);
        if constexpr (CausalLM<Draft>) draft_.truncate(0);
        else draft_.reset();
    }

    // Rounds until the budget is met (counting the rounds already run).
    void rounds(const detail::SamplingBudget& budget) {
        while (step_.size() < budget.max_samples && (step_.size() < budget.min_samples || seconds_ < budget.min_seconds))
            round();
    }

    // Medians so far; `into` keeps its prefill measurements.
    void write(CostMeasurement& into) const {
        into.target_step_seconds = detail::median(step_);
        into.draft_step_seconds = detail::median(drafting_);
        into.verified_tokens = widths_;
        into.verification_seconds.clear();
        for (const std::vector<double>& samples : verification_) into.verification_seconds.push_back(detail::median(samples));
    }

private:
    // Every pass appends its tokens after the cached prompt and is truncated back.
    void target_pass(std::span<const Token> feed) { detail::forward_after_prompt(target_, feed, prompt_.size()); }
    void draft_pass() {
        if constexpr (CausalLM<Draft>) {
            detail::forward_after_prompt(draft_, one_, prompt_.size());
        } else {  // a model-free drafter: its step cost is one proposal
            const DraftProposal proposal = draft_.propose(DraftRequest{prompt_, 1, SamplingOptions{}, CounterRng{0}});
            (void)proposal;
        }
    }

    Draft& draft_;
    Target& target_;
    std::vector<Token> prompt_;
    std::vector<Token> one_;
    std::vector<std::size_t> widths_;
    std::vector<std::vector<Token>> feeds_;
    bool warm_ = false;
    std::vector<double> step_, drafting_;
    std::vector<std::vector<double>> verification_;
    double seconds_ = 0.0;
};

// The prompt's prefill (and --prompt-tokens'), timed on their own.
template <CausalLM Target>
void measure_prefill(Target& target, std::span<const Token> prompt, const CostMeasurementSettings& settings,
                     CostMeasurement& into) {
    into.prefill.push_back({prompt.size(), detail::time_prefill(target, prompt, settings.prefill)});
    if (settings.long_prompt_tokens > 0) {
        if (settings.long_prompt_tokens > target.context_length()) {
            throw Error("--prompt-tokens " + std::to_string(settings.long_prompt_tokens) + " exceeds the target's context of " +
                        std::to_string(target.context_length()) + " positions");
        }
        const std::vector<Token> long_prompt = detail::filler_tokens(prompt, settings.long_prompt_tokens);
        into.prefill.push_back({long_prompt.size(), detail::time_prefill(target, long_prompt, settings.prefill)});
    }
}

// Everything at once: the prefill, then rounds until settings.rounds is met.
template <class Draft, CausalLM Target>
[[nodiscard]] CostMeasurement measure_costs(Draft& draft, Target& target, std::span<const Token> prompt,
                                            std::span<const std::size_t> draft_lengths,
                                            const CostMeasurementSettings& settings = {}) {
    CostMeasurement costs;
    measure_prefill(target, prompt, settings, costs);
    CostSampler<Draft, Target> sampler(draft, target, prompt, draft_lengths);
    sampler.rounds(settings.rounds);
    sampler.write(costs);
    return costs;
}

}  // namespace specdec::bench
