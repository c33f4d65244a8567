#pragma once
// --batch: batched decoding of many requests per target pass (BatchedDecoder),
// per batch size B, measured side by side in one process:
//   autoregressive  BatchedDecoder with NoDrafts (batched plain decoding)
//   k = 1, 2, ...   every request drafts k tokens a step (FixedBatchLength)
//   auto            AutoBatchLength chooses every request's length each step
//   auto:NAME       AutoBatchLength with some settings changed (--auto-variant)
// Each (B, variant) has its own decoder over its own models of B cache slots
// (sharing the weights), kept from round to round, as a serving process keeps
// its decoder. A round runs every variant once per batch size, all of them
// advancing one step in turn (who steps first rotates from round to round),
// so that a slow moment of the machine falls on every variant alike.
//
// What one run of a variant measures: waves x B requests, at least
// min_requests (their own seeded prompts and seeds, the same for every
// variant of a round) go to a decoder of B slots; each finished request is
// replaced by a waiting one. Counted are the steps in which all B slots
// decode (steady state): from the first step
// until the last request is admitted, i.e. without the tail in which fewer
// and fewer requests remain. A step's prefill of newly admitted prompts is
// left out of its time (the same target pass for every variant, measured by
// the single-sequence report instead).
//
// The sweep in phases (run_batch_benchmark): make one decoder per (batch
// size, variant); let the autos learn untimed while the others warm their caches;
// run the rounds, every variant stepping in turn; read what auto learned.
// batch_results.hpp holds what is reported, batch_runner.hpp one decoder's runs.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"

#include "batch_results.hpp"
#include "batch_runner.hpp"

namespace specdec::bench {

// The sweep the flags ask for (parse_options has applied --batch's defaults).
[[nodiscard]] inline BatchSettings batch_settings_of(const BenchOptions& options) {
    BatchSettings settings;
    settings.batch_sizes = options.batch_sizes;
    settings.fixed_lengths = options.draft_tokens;
    settings.auto_max_draft_tokens = options.auto_max_draft_tokens;
    settings.auto_variants = options.auto_variants;
    settings.temperature = options.temperatures.empty() ? 0.0 : options.temperatures.front();
    const RuleChoice rule = options.rules.empty() ? RuleChoice::tokenwise : options.rules.front();
    settings.rule = rule == RuleChoice::block     ? ChosenRule::Kind::block
                    : rule == RuleChoice::coupled ? ChosenRule::Kind::coupled
                                                  : ChosenRule::Kind::tokenwise;
    settings.new_tokens = options.new_tokens;
    settings.rounds = options.repetitions;
    settings.seed = options.seed;
    settings.learn_auto_first = options.learn_auto_first;
    return settings;
}

// Progress: batch size, variant label, round (1-based) of rounds.
using BatchProgress = std::function<void(std::size_t batch, const std::string& label, std::size_t round, std::size_t rounds)>;

// Makes the models of one decoder: a target and a draft of `slots` cache slots each.
template <class Target, class Draft>
struct BatchModelFactory {
    std::function<std::unique_ptr<Target>(std::size_t slots)> target;
    std::function<std::unique_ptr<Draft>(std::size_t slots)> draft;
};

namespace detail {

// One variant of the sweep.
struct BatchVariant {
    BatchVariantKind kind;
    std::size_t draft_tokens;
    const AutoVariant* auto_variant = nullptr;  // auto with changed settings; nullptr: the defaults
};
using BatchRunnerRow = std::vector<std::unique_ptr<BatchVariantRunner>>;  // one batch size's decoders, by variant
using PromptMaker = std::function<std::vector<Token>(std::uint64_t, std::size_t, std::size_t)>;

[[nodiscard]] inline std::vector<BatchVariant> batch_variants(const BatchSettings& settings) {
    std::vector<BatchVariant> variants{{BatchVariantKind::autoregressive, 0}};
    for (const std::size_t k : settings.fixed_lengths) variants.push_back({BatchVariantKind::fixed, k});
    variants.push_back({BatchVariantKind::automatic, settings.auto_max_draft_tokens});
    for (const AutoVariant& tuned : settings.auto_variants)
        variants.push_back({BatchVariantKind::automatic, settings.auto_max_draft_tokens, &tuned});
    return variants;
}

// Phase 1: one decoder per variant at `batch` (kept across rounds), and its
// empty result.
template <class Target, class Draft>
BatchRunnerRow make_runners(const BatchModelFactory<Target, Draft>& models, std::size_t batch,
                            std::span<const BatchVariant> variants, BatchSizeResult& size) {
    BatchRunnerRow row;
    size.batch = batch;
    for (const BatchVariant& v : variants) {
        BatchVariantResult result;
        result.kind = v.kind;
        result.draft_tokens = v.draft_tokens;
        if (v.auto_variant) result.auto_variant = v.auto_variant->name;
        size.variants.push_back(result);
        switch (v.kind) {
            case BatchVariantKind::autoregressive: {
                using Runner = BatchVariantRunnerOf<Target, NoDrafts, MeasuredBatchLength<FixedBatchLength>>;
                row.push_back(std::make_unique<Runner>(models.target(batch), std::make_unique<NoDrafts>(), batch, 0));
                break;
            }
            case BatchVariantKind::fixed: {
                using Runner = BatchVariantRunnerOf<Target, Draft, MeasuredBatchLength<FixedBatchLength>>;
                row.push_back(std::make_unique<Runner>(models.target(batch), models.draft(batch), batch, v.draft_tokens));
                break;
            }
            case BatchVariantKind::automatic: {
                using Policy = MeasuredBatchLength<AutoBatchLength>;
                using Runner = BatchVariantRunnerOf<Target, Draft, Policy>;
                const AutoBatchOptions options = v.auto_variant ? v.auto_variant->options : AutoBatchOptions{};
                row.push_back(std::make_unique<Runner>(models.target(batch), models.draft(batch), batch, v.draft_tokens,
                                                       Policy(AutoBatchLength(options))));
                break;
            }
        }
    }
    return row;
}

// Phase 2: each auto decoder serves one run untimed; every other decoder
// serves one request per slot, writing every slot's positions up to where a
// timed request reaches.
inline void learn_untimed(BatchRunnerRow& row, std::span<const BatchRequest> requests, std::size_t batch,
                          const BatchSettings& settings) {
    const auto one_wave = requests.first(std::min(batch, requests.size()));
    for (const std::unique_ptr<BatchVariantRunner>& runner : row)
        (void)runner->run(runner->auto_policy() != nullptr ? requests : one_wave, settings);
}

// The decoder of the auto variant with the default settings.
[[nodiscard]] inline const BatchVariantRunner& default_auto(const BatchRunnerRow& row, std::span<const BatchVariant> variants) {
    for (std::size_t v = 0; v < variants.size(); ++v)
        if (variants[v].kind == BatchVariantKind::automatic && variants[v].auto_variant == nullptr) return *row[v];
    throw Error("batch sweep: no auto variant");
}

// Phase 3: one timed round at one batch size. Every variant's run advances
// one step in turn (who steps first rotates with the round), so that all of
// them run through the same seconds of a machine whose speed drifts.
inline void run_round(BatchRunnerRow& row, std::span<const BatchVariant> variants, std::span<const BatchRequest> requests,
                      std::size_t round, const BatchSettings& settings, BatchSizeResult& size) {
    for (std::size_t v = 0; v < variants.size(); ++v) row[v]->start(requests, settings);
    for (bool any = true; any;) {
        any = false;
        for (std::size_t i = 0; i < variants.size(); ++i) any = row[(i + round) % variants.size()]->step() || any;
    }
    std::vector<BatchRunOutcome> outcomes;
    for (std::size_t v = 0; v < variants.size(); ++v) outcomes.push_back(row[v]->finish());
    const std::vector<std::vector<Token>>& autoregressive = outcomes.front().outputs;  // variant 0
    for (std::size_t v = 0; v < variants.size(); ++v) {
        BatchVariantResult& result = size.variants[v];
        add_run(result, outcomes[v]);
        if (settings.temperature == 0.0 && v != 0)
            result.greedy_match = result.greedy_match.value_or(true) && outcomes[v].outputs == autoregressive;
    }
}

// Phase 4: what auto's model believed at the end, for the report.
inline void read_learned(const AutoBatchLength* auto_policy, std::size_t batch, const BatchSettings& settings,
                         LearnedBatchCosts& costs) {
    if (auto_policy == nullptr) return;
    const AutoBatchLength& policy = *auto_policy;
    for (std::size_t n = batch; n <= batch * (settings.auto_max_draft_tokens + 1); n += batch)
        if (const double v = policy.target_pass_seconds(n); v >= 0.0) costs.target_pass_seconds.emplace_back(n, v);
    for (std::size_t b = 1; b <= batch; b *= 2)
        if (const double d = policy.draft_round_seconds(b); d >= 0.0) costs.draft_round_seconds.emplace_back(b, d);
    for (std::size_t m = 0; m < settings.auto_max_draft_tokens; ++m) costs.pooled_acceptance.push_back(policy.pooled_acceptance(m));
    costs.request_prior_strength = policy.request_prior_strength();
    costs.plain_refreshes = policy.plain_refreshes();
    costs.plain_probes_skipped = policy.plain_probes_skipped();
}

}  // namespace detail

// Runs every variant at every batch size, in rounds. `make_prompt(seed,
// vocab, tokens)` gives a request's prompt (the bench's seeded prompts).
template <class Target, class Draft>
[[nodiscard]] BatchReport run_batch_benchmark(const BatchModelFactory<Target, Draft>& models, std::size_t vocab,
                                              const BatchSettings& settings, const detail::PromptMaker& make_prompt,
                                              const BatchProgress& progress = {}) {
    if (settings.batch_sizes.empty()) throw Error("run_batch_benchmark: no batch sizes");
    if (settings.rounds == 0 || settings.waves == 0 || settings.new_tokens == 0)
        throw Error("run_batch_benchmark: rounds, waves and new tokens must be at least 1");
    const auto start = detail::BatchClock::now();
    BatchReport report;
    report.settings = settings;
    const std::vector<detail::BatchVariant> variants = detail::batch_variants(settings);
    const std::size_t sizes = settings.batch_sizes.size();

    std::vector<detail::BatchRunnerRow> runners;  // runners[s][v]
    for (const std::size_t batch : settings.batch_sizes) {
        report.sizes.emplace_back();
        runners.push_back(detail::make_runners(models, batch, variants, report.sizes.back()));
    }
    // Requests of round r at batch size s: seeds from a range of their own;
    // the untimed learning run takes the range after the last round's.
    const std::uint64_t stride = 1'000'003;
    const auto requests_of = [&](std::size_t s, std::size_t round) {
        return detail::batch_requests(settings.seed + (round * sizes + s) * stride,
                                      requests_per_run(settings, settings.batch_sizes[s]), vocab, settings.prompt_tokens,
                                      make_prompt);
    };
    if (settings.learn_auto_first) {
        for (std::size_t s = 0; s < sizes; ++s) {
            if (progress) progress(settings.batch_sizes[s], "auto learning, the others warming up (untimed)", 0, settings.rounds);
            detail::learn_untimed(runners[s], requests_of(s, settings.rounds), settings.batch_sizes[s], settings);
        }
    }
    for (std::size_t round = 0; round < settings.rounds; ++round) {
        for (std::size_t s = 0; s < sizes; ++s) {
            if (progress)
                progress(settings.batch_sizes[s], std::to_string(variants.size()) + " variants step by step in turn",
                         round + 1, settings.rounds);
            detail::run_round(runners[s], variants, requests_of(s, round), round, settings, report.sizes[s]);
        }
    }
    for (std::size_t s = 0; s < sizes; ++s)
        detail::read_learned(detail::default_auto(runners[s], variants).auto_policy(), settings.batch_sizes[s], settings,
                             report.sizes[s].auto_costs);
    report.wall_seconds = std::chrono::duration<double>(detail::BatchClock::now() - start).count();
    return report;
}

}  // namespace specdec::bench
