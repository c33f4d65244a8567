#pragma once
// The --tree rows of specdec-bench ("auto", "auto:NAME" for a
// --tree-auto-variant, or a fixed shape): rows of the runner like the chain
// rows (bench_runner.hpp), with a TreeSpeculativeDecoder, run in the same
// rounds and stepped in turn with them, so that a tree row and the best chain
// are compared through the same seconds of the machine.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

#include "bench_results.hpp"
#include "generation_steps.hpp"
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

// A token-tree row of the runner: its generator (a TreeSpeculativeDecoder of
// the row's shape or AutoTree, one policy over all of the row's repetitions)
// and, once the rounds are done, what the row drafted: the shape and, for
// AutoTree, the prediction of its own cost model.
struct TreeRow {
    RowGenerator generate;
    std::function<void(TreeResult&)> describe;
};

// label: "auto", "auto:NAME" (that --tree-auto-variant's settings) or a shape such as "3x2x1".
template <class Draft, CausalLM Target>
[[nodiscard]] TreeRow make_tree_row(Draft& draft, Target& target, const std::string& label, std::size_t tree_max_nodes,
                                    std::span<const TreeAutoVariant> auto_variants) {
    auto make = [&](auto policy, auto describe) {
        using Policy = decltype(policy);
        using Decoder = TreeSpeculativeDecoder<Target, Draft, RecursiveRejection, SharedTreePolicy<Policy>>;
        auto shared = std::make_shared<Policy>(std::move(policy));
        TreeRow row;
        row.generate = [&draft, &target, shared](const DecodingOptions& options, std::span<const Token> prompt) {
            return std::unique_ptr<detail::Generation>(std::make_unique<detail::DecoderGeneration<Decoder>>(
                prompt, specdec::target(target), specdec::draft(draft), options, SharedTreePolicy<Policy>{shared.get()}));
        };
        row.describe = [shared, describe](TreeResult& result) { describe(*shared, result); };
        return row;
    };
    if (!is_auto_tree(label)) {
        return make(FixedTree{TreeShape::parse(label)},
                    [](const FixedTree& policy, TreeResult& result) { result.shape = policy.shape.describe(); });
    }
    AutoTree::Options options{.max_nodes = tree_max_nodes};
    if (label.starts_with("auto:")) {  // that --tree-auto-variant's settings
        const auto variant = std::find_if(auto_variants.begin(), auto_variants.end(),
                                          [&](const TreeAutoVariant& v) { return label == "auto:" + v.name; });
        if (variant == auto_variants.end()) throw Error("no --tree-auto-variant named by tree row " + label);
        options = variant->options;
        if (!variant->max_nodes_given) options.max_nodes = tree_max_nodes;
    }
    return make(AutoTree(options), [](const AutoTree& policy, TreeResult& result) {
        result.shape = policy.current_plan().shape.describe();
        result.predicted_speedup = policy.predicted_speedup();
    });
}

// A fixed shape's predicted speedup from the run's final costs (an auto row
// carries its policy's own prediction). model_draft: the draft is a model
// (c per draft pass), not a drafter (one proposal, c, per step).
inline void apply_tree_costs(std::vector<TreeResult>& results, const CostMeasurement& costs, bool model_draft) {
    for (TreeResult& result : results) {
        if (is_auto_tree(result.label)) continue;
        const TreeShape shape = TreeShape::parse(result.label);
        const GenerationStats& s = result.speculative;
        const double passes =
            s.target_forward_passes == 0 ? 0.0 : static_cast<double>(s.draft_forward_passes) / s.target_forward_passes;
        const double draft_cost = (model_draft ? passes : 1.0) * costs.cost_ratio();
        result.predicted_speedup =
            predicted_tree_speedup(result, shape, draft_cost, costs.verification_cost_ratio(shape.size()));
    }
}

}  // namespace specdec::bench
