#pragma once
// The measurement loop: autoregressive and speculative generations of the
// same prompt with the same seed, round by round over every row, and within a
// round the rows step by step in turn (see run_configurations), so that slow
// drifts of the machine (frequency scaling, other processes) hit the rows
// alike; the autoregressive baseline runs whole beside them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <chrono>
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"

#include "bench_results.hpp"
#include "cost_measurement.hpp"
#include "generation_steps.hpp"
#include "tree_bench.hpp"

namespace specdec::bench {

// RunChoices (what to measure, bench_options.hpp) and what the runner needs besides.
struct RunSettings : RunChoices {
    RunSettings() = default;
    // The choices as given (BenchOptions: as the flags made them), the rest at their defaults.
    explicit RunSettings(const RunChoices& choices) : RunChoices(choices) {}

    std::size_t min_repetitions = 2;  // with a time budget, rounds run at least
    std::size_t warmup_tokens = 8;    // one untimed short generation per method first; 0 = none
    // The prompt of repetition r is repetition_prompts[r % size()]; empty:
    // every repetition generates from the benchmark's prompt. (Seeded token
    // prompts give each repetition its own: at T = 0 one prompt would make
    // every repetition the same sequence, and rows compared on one sequence
    // compare how their steps happen to line up with it.)
    std::vector<std::vector<Token>> repetition_prompts{};
};

struct ProgressStep {
    std::size_t step = 0;  // 1-based: one speculative generation of one row
    std::size_t steps = 0;
    double temperature = 0.0;
    std::size_t draft_tokens = 0;
    std::string label;           // "4", "auto<=8", "4 block"
    std::size_t repetition = 0;  // 1-based
    std::size_t repetitions = 0;       // the most (with a time budget: fewer if they do not fit)
    double time_budget_seconds = 0.0;  // RunSettings::time_budget_seconds
    // > 0: this row starts with the others of its temperature (this many
    // rows), all then advancing step by step in turn (the baseline runs whole).
    std::size_t rows_in_turn = 0;
};

using ProgressCallback = std::function<void(const ProgressStep&)>;

// One configuration the runner measures.
struct Configuration {
    double temperature = 0.0;
    std::size_t draft_tokens = 0;
    bool auto_length = false;
    RuleChoice rule = RuleChoice::tokenwise;
    std::string tree{};  // a token-tree row (RunChoices::trees); empty: a chain
};

// Every (temperature, rule, length) to run, in order; block and coupled only
// at T > 0. With `trees`, each temperature's tree rows after its chains.
[[nodiscard]] inline std::vector<Configuration> configurations_of(const RunSettings& settings, bool trees = false) {
    std::vector<Configuration> list;
    for (const double temperature : settings.temperatures) {
        for (const RuleChoice rule : settings.rules) {
            if (rule != RuleChoice::tokenwise && temperature == 0.0) continue;
            // With one draft, block verification is token-wise rejection: a
            // block row for k = 1 beside the token-wise one would only repeat it.
            const bool tokenwise_too =
                std::find(settings.rules.begin(), settings.rules.end(), RuleChoice::tokenwise) != settings.rules.end();
            for (const std::size_t k : settings.draft_tokens) {
                if (rule == RuleChoice::block && k == 1 && tokenwise_too) continue;
                list.push_back({temperature, k, false, rule});
            }
            if (settings.auto_length) list.push_back({temperature, settings.auto_max_draft_tokens, true, rule});
        }
        if (trees)
            for (const std::string& tree : settings.trees)
                list.push_back({temperature, DecodingOptions{}.draft_tokens, is_auto_tree(tree), RuleChoice::tokenwise, tree});
    }
    return list;
}

// A policy shared by the decoders of one configuration's repetitions, so
// that AutoLength keeps what it learned from one request to the next (as in a
// serving session) while each repetition gets a decoder with its own seed.
template <class Policy>
struct SharedPolicy {
    Policy* policy;
    DraftPlan plan(std::size_t cap, std::uint64_t position) { return policy->plan(cap, position); }
    void observe(const StepOutcome& outcome) { policy->observe(outcome); }
};

// Models that can run beside themselves: replica() is another instance over
// the same weights with a KV cache of its own (LlamaModel). A model-free
// drafter (prompt lookup) is simply copied.
template <class Model>
concept Replicable = requires(const Model& model) {
    { model.replica() } -> std::same_as<Model>;
};

template <class Draft>
concept ReplicableDraft = Replicable<Draft> || (!CausalLM<Draft> && std::copy_constructible<Draft>);

// Whether run_configurations can give every row models of its own and so
// advance all rows of a round step by step in turn (see there).
template <class Draft, class Target>
inline constexpr bool kInterleavable = Replicable<Target> && ReplicableDraft<Draft>;

namespace detail {

template <class Model>
[[nodiscard]] std::unique_ptr<Model> replica_of(const Model& model) {
    if constexpr (Replicable<Model>) return std::make_unique<Model>(model.replica());
    else return std::make_unique<Model>(model);
}

}  // namespace detail

template <class Draft, CausalLM Target>
[[nodiscard]] RowGenerator make_row_generator(Draft& draft, Target& target, const Configuration& configuration) {
    auto make = [&](auto rule, auto policy) -> RowGenerator {
        using Rule = decltype(rule);
        using Policy = decltype(policy);
        using Decoder = SpeculativeDecoder<Target, Draft, Rule, SharedPolicy<Policy>>;
        auto shared = std::make_shared<Policy>(std::move(policy));
        return [&draft, &target, rule, shared](const DecodingOptions& options, std::span<const Token> prompt) {
            return std::unique_ptr<detail::Generation>(std::make_unique<detail::DecoderGeneration<Decoder>>(
                prompt, specdec::target(target), specdec::draft(draft), options, rule, SharedPolicy<Policy>{shared.get()}));
        };
    };
    if (configuration.rule == RuleChoice::tokenwise) {
        if (configuration.auto_length) return make(TokenwiseRejection{}, AutoLength{});
        return make(TokenwiseRejection{}, FixedLength{});
    }
    if (configuration.rule == RuleChoice::coupled) {
        if (configuration.auto_length) return make(CoupledSampling{}, AutoLength{});
        return make(CoupledSampling{}, FixedLength{});
    }
    if (configuration.auto_length) return make(BlockVerification{}, AutoLength{});
    return make(BlockVerification{}, FixedLength{});
}

namespace detail {

// The rows of one run: each row's configuration, its result so far, the
// models it runs on and its generator. Row i runs on targets[i] and
// drafts[i]: replicas of its own when interleaved, the given models otherwise.
template <class Draft, CausalLM Target>
struct RowSet {
    std::vector<Configuration> configurations;
    std::vector<ConfigurationResult> results;
    std::vector<RowGenerator> generators;
    std::vector<std::function<void(TreeResult&)>> tree_describers;  // a tree row's (TreeRow::describe); empty for a chain
    std::vector<double> temperatures;  // in the order of the configurations
    bool interleaved = false;
    std::vector<std::unique_ptr<Target>> target_replicas;
    std::vector<std::unique_ptr<Draft>> draft_replicas;
    std::vector<Target*> targets;
    std::vector<Draft*> drafts;

    [[nodiscard]] std::size_t size() const { return configurations.size(); }
    // The rows of one temperature, in the order a repetition runs them:
    // forwards in even repetitions, backwards in odd ones.
    [[nodiscard]] std::vector<std::size_t> rows_at(double temperature, std::size_t repetition) const {
        std::vector<std::size_t> rows;
        for (std::size_t i = 0; i < size(); ++i)
            if (configurations[i].temperature == temperature) rows.push_back(i);
        if (repetition % 2 == 1) std::reverse(rows.begin(), rows.end());
        return rows;
    }
};

template <class Draft, CausalLM Target>
[[nodiscard]] RowSet<Draft, Target> make_row_set(Draft& draft, Target& target, const RunSettings& settings) {
    RowSet<Draft, Target> set;
    set.configurations = configurations_of(settings, kTreeCapable<Draft, Target>);
    const std::size_t total = set.size();
    set.interleaved = settings.interleave_rows && kInterleavable<Draft, Target>;
    set.targets.assign(total, &target);
    set.drafts.assign(total, &draft);
    if constexpr (kInterleavable<Draft, Target>) {
        if (set.interleaved) {
            for (std::size_t i = 0; i < total; ++i) {
                set.target_replicas.push_back(replica_of(target));
                set.draft_replicas.push_back(replica_of(draft));
                set.targets[i] = set.target_replicas.back().get();
                set.drafts[i] = set.draft_replicas.back().get();
            }
        }
    }
    set.results.resize(total);
    for (std::size_t i = 0; i < total; ++i) {
        const Configuration& configuration = set.configurations[i];
        ConfigurationResult& result = set.results[i];
        result.temperature = configuration.temperature;
        result.draft_tokens = configuration.draft_tokens;
        result.auto_length = configuration.auto_length;
        result.rule = configuration.rule;
        result.repetitions = settings.repetitions;
        set.tree_describers.emplace_back();
        if constexpr (kTreeCapable<Draft, Target>) {
            if (!configuration.tree.empty()) {
                TreeRow row = make_tree_row(*set.drafts[i], *set.targets[i], configuration.tree, settings.tree_max_nodes,
                                            settings.tree_auto_variants);
                set.generators.push_back(std::move(row.generate));
                set.tree_describers.back() = std::move(row.describe);
                continue;
            }
        }
        set.generators.push_back(make_row_generator(*set.drafts[i], *set.targets[i], configuration));
    }
    for (const Configuration& configuration : set.configurations)
        if (std::find(set.temperatures.begin(), set.temperatures.end(), configuration.temperature) == set.temperatures.end())
            set.temperatures.push_back(configuration.temperature);
    return set;
}

// The first generations pay one-time costs (first touch of the KV caches and
// scratch buffers, thread start-up): one short untimed generation keeps them
// out of the first round's numbers, on each row's own models when it has them.
template <class Draft, CausalLM Target>
void warm_up(RowSet<Draft, Target>& rows, Target& target, std::span<const Token> prompt, const RunSettings& settings) {
    if (settings.warmup_tokens == 0) return;
    const DecodingOptions warmup{.draft_tokens = rows.configurations.front().draft_tokens,
                                 .sampling = SamplingOptions{.temperature = rows.configurations.front().temperature},
                                 .seed = settings.seed,
                                 .max_new_tokens = std::min(settings.warmup_tokens, settings.new_tokens)};
    (void)AutoregressiveDecoder<Target>(target, warmup).generate(prompt);
    // Every pair of models the rows run on: the given pair, or each row's replicas.
    const std::size_t pairs = rows.interleaved ? rows.size() : 1;
    for (std::size_t i = 0; i < pairs; ++i)
        (void)SpeculativeDecoder<Target, Draft>(specdec::target(*rows.targets[i]), specdec::draft(*rows.drafts[i]), warmup)
            .generate(prompt);
}

// Each auto row generates once, untimed, on a prompt no round measures (the
// prompt reversed: as long as the measured ones, and none of them), so that
// the rounds measure the policy it learned (RunChoices::learn_auto_first).
template <class Draft, CausalLM Target>
void learn_auto(RowSet<Draft, Target>& rows, std::span<const Token> prompt, const RunSettings& settings) {
    const std::vector<Token> learning_prompt(prompt.rbegin(), prompt.rend());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (!rows.configurations[i].auto_length) continue;
        const DecodingOptions learning{.draft_tokens = rows.configurations[i].draft_tokens,
                                       .sampling = SamplingOptions{.temperature = rows.configurations[i].temperature},
                                       .seed = settings.seed ^ 0x1EA2'0000'0000'0000ull,
                                       .max_new_tokens = settings.new_tokens};
        (void)run_to_end(*rows.generators[i](learning, learning_prompt));
    }
}

// Adds one repetition of row i to its result: both decoders' statistics, the
// repetition's own speedup and, at T = 0, whether the tokens were the same.
inline void record_repetition(ConfigurationResult& result, const GenerationResult& baseline, const GenerationResult& fast) {
    result.autoregressive += baseline.stats;
    result.speculative += fast.stats;
    if (baseline.stats.decode_tokens_per_second() > 0.0)
        result.speedup_per_repetition.push_back(fast.stats.decode_tokens_per_second() /
                                                baseline.stats.decode_tokens_per_second());
    if (result.temperature == 0.0) check_greedy_match(result, baseline.tokens, fast.tokens);
}

// One temperature of one repetition: the autoregressive baseline and every
// row of that temperature, on the same prompt and seed (see run_configurations
// for the order), recorded into the rows' results.
template <class Draft, CausalLM Target>
void run_round(RowSet<Draft, Target>& set, Target& target, std::span<const Token> prompt, const RunSettings& settings,
               double temperature, std::size_t repetition, std::size_t& step, const ProgressCallback& progress) {
    const std::size_t total = set.size();
    const std::vector<std::size_t> rows = set.rows_at(temperature, repetition);
    // Each repetition is another sample (its own seed, so another prompt for
    // synthetic models and other random draws).
    const DecodingOptions baseline_options{.sampling = SamplingOptions{.temperature = temperature},
                                           .seed = settings.seed + repetition,
                                           .max_new_tokens = settings.new_tokens};
    const std::span<const Token> round_prompt = repetition_prompt(settings.repetition_prompts, prompt, repetition);
    auto start_row = [&](std::size_t i) {
        if (progress)
            progress(ProgressStep{++step, total * settings.repetitions, temperature, set.configurations[i].draft_tokens,
                                  set.configurations[i].tree.empty() ? set.results[i].label() : "tree " + set.configurations[i].tree,
                                  repetition + 1, settings.repetitions,
                                  settings.time_budget_seconds, set.interleaved ? rows.size() : 0});
        DecodingOptions options = baseline_options;
        options.draft_tokens = set.configurations[i].draft_tokens;
        return set.generators[i](options, round_prompt);
    };
    DecoderGeneration<AutoregressiveDecoder<Target>> autoregressive(round_prompt, target, baseline_options);
    GenerationResult baseline;
    std::vector<GenerationResult> fast(total);
    if (set.interleaved) {
        // The baseline runs whole, before the rows in even repetitions and
        // after them in odd ones: plain decoding's passes follow one another,
        // and the last cache contents of one pass help the next. Stepped in
        // turn with the rows, between their draft and verify passes, an
        // autoregressive token took 9-15% longer (a Zen 4 host, 100m pair),
        // which no user's plain decoding pays and which inflated every speedup
        // by as much; the rows' steps took the same time either way (a draft
        // pass always precedes their verify pass).
        const bool baseline_first = repetition % 2 == 0;
        if (baseline_first) baseline = run_to_end(autoregressive);
        std::vector<std::unique_ptr<Generation>> generations;
        std::vector<Generation*> running;
        for (const std::size_t i : rows) {
            generations.push_back(start_row(i));
            running.push_back(generations.back().get());
        }
        run_interleaved(running);
        if (!baseline_first) baseline = run_to_end(autoregressive);
        for (std::size_t r = 0; r < rows.size(); ++r) fast[rows[r]] = generations[r]->take();
    } else {
        baseline = run_to_end(autoregressive);
        for (const std::size_t i : rows) fast[i] = run_to_end(*start_row(i));
    }
    for (const std::size_t i : rows) record_repetition(set.results[i], baseline, fast[i]);
}

// With a time budget, after min_repetitions rounds: whether the next round,
// at the rounds' mean duration so far, would still end within the budget.
[[nodiscard]] inline bool next_round_fits(const RunSettings& settings, std::size_t repetition, std::size_t rounds,
                                          double rounds_seconds, Clock::time_point rounds_start) {
    if (settings.time_budget_seconds <= 0.0 || repetition < std::max<std::size_t>(1, settings.min_repetitions)) return true;
    const double elapsed = std::chrono::duration<double>(Clock::now() - rounds_start).count();
    return elapsed + rounds_seconds / static_cast<double>(rounds) <= settings.time_budget_seconds;
}

}  // namespace detail

// What run_rows measured: the chain rows and the tree rows, in run order.
struct RowResults {
    std::vector<ConfigurationResult> chains;
    std::vector<TreeResult> trees;
};

// Draft: a CausalLM draft model or a Drafter (e.g. PromptLookupDrafter).
//
// Order: repetition by repetition, and within one temperature of a
// repetition, one autoregressive generation and every row's speculative
// generation of the same prompt and seed (the autoregressive tokens do not
// depend on the row, so one run serves them all; at T = 0 each row is checked
// against it).
//
// Interleaved (settings.interleave_rows, with models that have replica()):
// every row gets a target and a draft of its own (shared weights, own KV
// caches), and all rows of a temperature advance step by step in turn
// (detail::run_interleaved). The machine's speed drifts by ~5% over seconds
// on a shared host; one row run after another, each row's time carried its
// own share of that drift, and rows were compared with each other (auto
// against the best fixed k) through it. Step by step, every row runs through
// the same seconds. Each step is timed on its own, and the tokens are those
// of a sequential run: each decoder has its own caches and its random numbers
// are counters of its seed and position. The baseline runs whole, before the
// rows in even repetitions and after them in odd ones (why: see run_round).
//
// Sequential (models that cannot be replicated, e.g. the CUDA model): the
// baseline, then each row to its end; rows run forwards in even repetitions
// and backwards in odd ones, so that no row always sits next to the baseline.
//
// Tree rows (settings.trees, when the pair has a tree pass) are rows like the
// others: in the same rounds, stepped in turn with the chains of their
// temperature, an auto tree learning first as an auto chain does.
template <class Draft, CausalLM Target>
[[nodiscard]] RowResults run_rows(Draft& draft, Target& target, std::span<const Token> prompt, const RunSettings& settings,
                                  const ProgressCallback& progress = {}, const std::function<void()>& after_round = {}) {
    detail::RowSet<Draft, Target> rows = detail::make_row_set(draft, target, settings);
    if (rows.size() == 0) return {};
    detail::warm_up(rows, target, prompt, settings);
    if (settings.learn_auto_first) detail::learn_auto(rows, prompt, settings);
    std::size_t step = 0, rounds = 0;
    const auto rounds_start = detail::Clock::now();
    double rounds_seconds = 0.0;
    for (std::size_t repetition = 0; repetition < settings.repetitions; ++repetition) {
        if (!detail::next_round_fits(settings, repetition, rounds, rounds_seconds, rounds_start)) break;
        const auto round_start = detail::Clock::now();
        for (const double temperature : rows.temperatures) {
            detail::run_round(rows, target, prompt, settings, temperature, repetition, step, progress);
            if (after_round) after_round();
        }
        ++rounds;
        rounds_seconds += std::chrono::duration<double>(detail::Clock::now() - round_start).count();
    }
    RowResults results;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        ConfigurationResult& row = rows.results[i];
        row.repetitions = rounds;
        if (rows.configurations[i].tree.empty()) {
            results.chains.push_back(std::move(row));
            continue;
        }
        TreeResult tree;
        tree.temperature = row.temperature;
        tree.label = rows.configurations[i].tree;
        tree.repetitions = rounds;
        tree.autoregressive = row.autoregressive;
        tree.speculative = row.speculative;
        tree.speedup_per_repetition = std::move(row.speedup_per_repetition);
        tree.greedy_match = row.greedy_match;
        tree.first_mismatch = row.first_mismatch;
        rows.tree_describers[i](tree);
        results.trees.push_back(std::move(tree));
    }
    return results;
}

// The chain rows of run_rows (settings.trees is not run).
template <class Draft, CausalLM Target>
[[nodiscard]] std::vector<ConfigurationResult> run_configurations(Draft& draft, Target& target,
                                                                  std::span<const Token> prompt,
                                                                  const RunSettings& settings,
                                                                  const ProgressCallback& progress = {},
                                                                  const std::function<void()>& after_round = {}) {
    RunSettings chains = settings;
    chains.trees.clear();
    return run_rows(draft, target, prompt, chains, progress, after_round).chains;
}

// The cost model's inputs of each row (c, v_k, v_n), from the final costs.
inline void apply_costs(std::vector<ConfigurationResult>& results, const CostMeasurement& costs) {
    for (ConfigurationResult& result : results) {
        const std::size_t k = result.draft_tokens;
        result.cost_ratio = costs.cost_ratio();
        result.verification_cost_ratio = costs.verification_cost_ratio(k);
        result.target_step_seconds = costs.target_step_seconds;
        result.verification_cost_ratio_by_length.clear();
        for (std::size_t n = 0; n <= k; ++n) result.verification_cost_ratio_by_length.push_back(costs.verification_cost_ratio(n));
    }
}

// Everything a report needs besides the measurements.
struct BenchInputs {
    MachineInfo machine;
    ModelInfo target;
    ModelInfo draft;
    std::vector<Token> prompt;
    std::optional<std::string> prompt_text;  // none for a token prompt
    RunSettings settings;
    CostMeasurementSettings cost_settings{};
};

// Measures c and v_k, then runs every configuration: one complete report.
template <class Draft, CausalLM Target>
[[nodiscard]] BenchReport run_benchmark(Draft& draft, Target& target, const BenchInputs& inputs,
                                        const ProgressCallback& progress = {}) {
    const auto start = detail::Clock::now();
    BenchReport report;
    report.machine = inputs.machine;
    report.target = inputs.target;
    report.draft = inputs.draft;
    report.prompt_tokens = inputs.prompt.size();
    report.prompt_text = inputs.prompt_text;
    report.prompt_per_repetition = !inputs.settings.repetition_prompts.empty();
    report.new_tokens = inputs.settings.new_tokens;
    report.seed = inputs.settings.seed;
    std::vector<std::size_t> lengths = inputs.settings.draft_tokens;
    if (inputs.settings.auto_length)  // the auto rows' model needs v_n for every length they may choose
        for (std::size_t n = 1; n <= inputs.settings.auto_max_draft_tokens; ++n) lengths.push_back(n);
    const bool trees = !inputs.settings.trees.empty() && kTreeCapable<Draft, Target>;
    if (trees)  // a fixed shape's prediction needs v of its width (a chain pass of as many tokens)
        for (const std::string& tree : inputs.settings.trees)
            if (!is_auto_tree(tree)) lengths.push_back(TreeShape::parse(tree).size());
    std::sort(lengths.begin(), lengths.end());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    // c and v_k: one round of cost samples after each round of generations
    // (topped up to the budget at the end), so that the prediction's costs
    // come from the same minutes as the speeds they are compared with.
    measure_prefill(target, inputs.prompt, inputs.cost_settings, report.costs);
    CostSampler<Draft, Target> costs(draft, target, inputs.prompt, lengths);
    RowResults rows = run_rows(draft, target, inputs.prompt, inputs.settings, progress, [&] { costs.round(); });
    report.configurations = std::move(rows.chains);
    report.repetitions =
        report.configurations.empty() ? inputs.settings.repetitions : report.configurations.front().repetitions;
    report.max_repetitions = inputs.settings.repetitions;
    report.time_budget_seconds = inputs.settings.time_budget_seconds;
    report.interleaved_rows = inputs.settings.interleave_rows && kInterleavable<Draft, Target>;
    report.auto_learned_first = inputs.settings.learn_auto_first;
    costs.rounds(inputs.cost_settings.rounds);
    costs.write(report.costs);
    apply_costs(report.configurations, report.costs);
    if (trees) {
        report.trees = std::move(rows.trees);
        apply_tree_costs(report.trees, report.costs, CausalLM<Draft>);
    } else if (!inputs.settings.trees.empty()) {
        report.trees_skipped = "the target or the draft has no tree pass (specdec::TreeLM)";
    }
    report.wall_seconds = std::chrono::duration<double>(detail::Clock::now() - start).count();
    return report;
}

}  // namespace specdec::bench
