#pragma once
// The --tree rows of specdec-bench: for each temperature and tree ("auto",
// "auto:NAME" for a --tree-auto-variant, or a fixed shape), interleaved autoregressive / tree-speculative generations of
// the same prompt and seed, as run_configurations() does for chains.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

#include "bench_results.hpp"
#include "tree_auto_variants.hpp"

namespace specdec::bench {

// A tree policy shared by the decoders of one configuration's repetitions, so
// that AutoTree keeps what it learned from one request to the next.
template <class Policy>
struct SharedTreePolicy {
    Policy* policy;
    TreeShape plan(std::size_t max_depth, std::uint64_t position) { return TreeShape(policy->plan(max_depth, position)); }
    void observe(const TreeStepOutcome& outcome) { policy->observe(outcome); }
};

// Whether a (draft, target) pair can run token trees.
template <class Draft, class Target>
inline constexpr bool kTreeCapable = TreeLM<Target> && (TreeLM<Draft> || TreeDrafter<Draft>);

// The predicted speedup of a fixed shape from its measured acceptance by depth
// and rank: E = 1 + sum over nodes of the product, along the node's path, of
// P(rank r accepted | parent reached) = a(d, r) prod_{s<r} (1 - a(d, s)),
// over (draft passes per step * c + v of the shape's width).
[[nodiscard]] inline double predicted_tree_speedup(const TreeResult& result, const TreeShape& shape,
                                                   double draft_cost_per_step, double verification_ratio) {
    std::vector<double> value(shape.size(), 0.0);
    double expected = 1.0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const std::size_t d = shape.depth_of(i) - 1, r = shape.rank_of(i);
        double v = result.acceptance(d, r);
        for (std::size_t s = 0; s < r; ++s) v *= 1.0 - result.acceptance(d, s);
        const std::int32_t parent = shape.parent(i);
        value[i] = v * (parent < 0 ? 1.0 : value[static_cast<std::size_t>(parent)]);
        expected += value[i];
    }
    const double cost = draft_cost_per_step + verification_ratio;
    return cost > 0.0 ? expected / cost : 0.0;
}

template <class Draft, CausalLM Target>
[[nodiscard]] std::vector<TreeResult> run_tree_configurations(Draft& draft, Target& target, std::span<const Token> prompt,
                                                              const std::vector<std::string>& trees,
                                                              std::size_t tree_max_nodes,
                                                              const std::vector<double>& temperatures,
                                                              std::size_t new_tokens, std::size_t repetitions,
                                                              std::uint64_t seed, const CostMeasurement& costs,
                                                              std::span<const std::vector<Token>> repetition_prompts = {},
                                                              std::span<const TreeAutoVariant> auto_variants = {}) {
    std::vector<TreeResult> results;
    if constexpr (kTreeCapable<Draft, Target>) {
        for (const double temperature : temperatures) {
            for (const std::string& tree : trees) {
                TreeResult result;
                result.temperature = temperature;
                result.label = tree;
                result.repetitions = repetitions;
                const bool automatic = is_auto_tree(tree);
                AutoTree::Options auto_options{.max_nodes = tree_max_nodes};
                if (tree.starts_with("auto:")) {  // that --tree-auto-variant's settings
                    const auto variant = std::find_if(auto_variants.begin(), auto_variants.end(), [&](const TreeAutoVariant& v) {
                        return tree == "auto:" + v.name;
                    });
                    if (variant == auto_variants.end()) throw Error("no --tree-auto-variant named by tree row " + tree);
                    auto_options = variant->options;
                    if (!variant->max_nodes_given) auto_options.max_nodes = tree_max_nodes;
                }
                AutoTree auto_policy(auto_options);
                FixedTree fixed_policy{automatic ? TreeShape() : TreeShape::parse(tree)};
                auto run = [&](auto& policy) {
                    using Policy = std::remove_reference_t<decltype(policy)>;
                    for (std::size_t repetition = 0; repetition < repetitions; ++repetition) {
                        const DecodingOptions options{.sampling = SamplingOptions{.temperature = temperature},
                                                      .seed = seed + repetition,
                                                      .max_new_tokens = new_tokens};
                        AutoregressiveDecoder<Target> autoregressive(target, options);
                        TreeSpeculativeDecoder<Target, Draft, RecursiveRejection, SharedTreePolicy<Policy>> speculative(
                            specdec::target(target), specdec::draft(draft), options, SharedTreePolicy<Policy>{&policy});
                        const std::span<const Token> round_prompt = repetition_prompt(repetition_prompts, prompt, repetition);
                        autoregressive.reset();
                        const GenerationResult baseline = autoregressive.generate(round_prompt);
                        result.autoregressive += baseline.stats;
                        speculative.reset();
                        const GenerationResult fast = speculative.generate(round_prompt);
                        result.speculative += fast.stats;
                        if (baseline.stats.decode_tokens_per_second() > 0.0)
                            result.speedup_per_repetition.push_back(fast.stats.decode_tokens_per_second() /
                                                                    baseline.stats.decode_tokens_per_second());
                        if (temperature == 0.0) detail::check_greedy_match(result, baseline.tokens, fast.tokens);
                    }
                };
                if (automatic) {
                    run(auto_policy);
                    result.shape = auto_policy.current_plan().shape.describe();
                    result.predicted_speedup = auto_policy.predicted_speedup();
                } else {
                    run(fixed_policy);
                    const TreeShape& shape = fixed_policy.shape;
                    result.shape = shape.describe();
                    const GenerationStats& s = result.speculative;
                    const double passes = s.target_forward_passes == 0
                                              ? 0.0
                                              : static_cast<double>(s.draft_forward_passes) / s.target_forward_passes;
                    // A model draft pays c per pass; prompt lookup one proposal (c) per step.
                    const double draft_cost = (CausalLM<Draft> ? passes : 1.0) * costs.cost_ratio();
                    result.predicted_speedup =
                        predicted_tree_speedup(result, shape, draft_cost, costs.verification_cost_ratio(shape.size()));
                }
                results.push_back(std::move(result));
            }
        }
    }
    return results;
}

}  // namespace specdec::bench
