#pragma once
// Tree shape policies: which tree each step drafts. FixedTree always drafts one
// shape; AutoTree measures the target's cost per pass width, the draft's cost
// per pass and the acceptance by depth and sibling rank while generating, and
// drafts the shape that maximises expected tokens per second (the idea of
// Sequoia, Chen et al. 2024: the best tree depends on the hardware's cost
// curve). optimise_tree() is the optimiser both use for predictions.
//
// Exactness: a plan may depend on earlier steps' outcomes only, never on the
// randomness of the step it plans, so every shape keeps the output exact.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <sstream>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/acceptance_estimate.hpp"
#include "specdec/decoding/pass_costs.hpp"
#include "specdec/decoding/step_cost.hpp"
#include "specdec/decoding/tree_shape.hpp"

namespace specdec {

// What happened in one tree step, for policies that learn.
// Its timings are StepTimings' (target_width: pending tokens + nodes).
struct TreeStepOutcome : StepTimings {
    std::size_t nodes = 0;     // drafted nodes
    std::size_t depth = 0;     // depth of the drafted tree
    std::size_t accepted = 0;  // length of the accepted path
    // [d][r]: whether the sibling of rank r at depth d + 1 was tested / accepted in this step.
    std::vector<std::vector<std::size_t>> tested{}, accepted_at{};
};

// plan(max_depth, first_position): the shape of this step (deeper nodes than
// max_depth are dropped by the decoder); observe(outcome) after each step.
template <class P>
concept TreePolicy = requires(P& policy, std::size_t max_depth, std::uint64_t position, const TreeStepOutcome& outcome) {
    { policy.plan(max_depth, position) } -> std::convertible_to<TreeShape>;
    { policy.observe(outcome) };
};

// Always the same shape.
struct FixedTree {
    TreeShape shape;

    FixedTree() = default;
    FixedTree(TreeShape tree) : shape(std::move(tree)) {}  // implicit: a TreeShape is a policy
    const TreeShape& plan(std::size_t, std::uint64_t) const { return shape; }
    void observe(const TreeStepOutcome&) {}
};

// The costs the optimiser weighs, in any one unit (seconds, or relative to a
// one-token target pass): the parts of step_seconds(), a tree of depth D
// drafting in D rounds of one pass each.
struct TreeCosts {
    std::function<double(std::size_t)> target_pass;  // a target pass over n tokens (n >= 1)
    double draft_pass = 0.0;                         // one draft pass (one per depth of the tree)
    double per_step = 0.0;                           // everything else of a step
    double draft_overhead = 0.0;                     // once a step that drafts (its first pass runs cold)
    double per_row = 0.0;                            // acceptance work per verified row

    [[nodiscard]] double pass_seconds(std::size_t n) const { return target_pass(n); }
    [[nodiscard]] double round_seconds(std::size_t) const { return draft_pass; }
    [[nodiscard]] double drafting_overhead_seconds() const { return draft_overhead; }
    [[nodiscard]] double row_seconds() const { return per_row; }
    [[nodiscard]] double other_seconds() const { return per_step; }
};

struct TreePlan {
    TreeShape shape;
    double expected_tokens = 1.0;  // tokens a step emits, in expectation
    double cost = 1.0;             // a step's cost
    [[nodiscard]] double rate() const { return expected_tokens / cost; }
};

// The tree of at most max_nodes nodes and max_depth depth that maximises
// expected tokens per cost, given acceptance(d, r) = the probability that the
// sibling of rank r at depth d + 1 is accepted when it is tested (its parent
// accepted, its earlier siblings rejected).
//
// A node's value is the probability that it is accepted,
//   f(node) = f(parent) * a(d, r) * prod_{s < r} (1 - a(d, s)),
// and a step emits E = 1 + sum f tokens. For each depth bound D the tree grows
// greedily by the candidate of largest marginal gain (every candidate costs the
// same one more target column, so gain per cost orders them alike; a deeper
// tree pays one more draft pass, which the bound D accounts for); every tree
// along the way is scored by E / step_seconds(D rounds, a pass of n + 1), and
// the best is returned. The empty tree (no drafting) competes too.
[[nodiscard]] inline TreePlan optimise_tree(const std::function<double(std::size_t, std::size_t)>& acceptance,
                                            const TreeCosts& costs, std::size_t max_nodes, std::size_t max_depth) {
    TreePlan best;
    SingleSequenceRounds rounds;
    best.cost = step_seconds(costs, rounds.of(0), 1);
    struct Node {
        std::int32_t parent;
        std::size_t depth, rank, children = 0;
        double value;
    };
    for (std::size_t bound = 1; bound <= max_depth; ++bound) {
        std::vector<Node> nodes;
        std::size_t root_children = 0;
        double expected = 1.0;
        std::size_t depth = 0;
        // P(rank r accepted | parent reached) at depth d.
        auto reach = [&](std::size_t d, std::size_t r) {
            double value = acceptance(d, r);
            for (std::size_t s = 0; s < r; ++s) value *= 1.0 - acceptance(d, s);
            return std::clamp(value, 0.0, 1.0);
        };
        while (nodes.size() < max_nodes) {
            // The best next child: the root's or a node's next rank.
            double gain = reach(0, root_children);
            std::int32_t parent = -1;
            for (std::size_t i = 0; i < nodes.size(); ++i) {
                if (nodes[i].depth >= bound) continue;
                const double candidate = nodes[i].value * reach(nodes[i].depth, nodes[i].children);
                if (candidate > gain) {
                    gain = candidate;
                    parent = static_cast<std::int32_t>(i);
                }
            }
            if (!(gain > 0.0)) break;
            Node node{parent, 1, 0, 0, gain};
            if (parent < 0) {
                node.rank = root_children++;
            } else {
                Node& p = nodes[static_cast<std::size_t>(parent)];
                node.depth = p.depth + 1;
                node.rank = p.children++;
            }
            nodes.push_back(node);
            expected += gain;
            depth = std::max(depth, node.depth);
            const double cost = step_seconds(costs, rounds.of(depth), nodes.size() + 1);
            if (expected / cost > best.rate()) {
                // Breadth first: by depth, then by the new index of the parent, then by rank.
                std::vector<std::int64_t> new_index(nodes.size(), -1);
                std::vector<std::int32_t> parents;
                for (std::size_t d = 1; d <= depth; ++d) {
                    std::vector<std::size_t> level;
                    for (std::size_t i = 0; i < nodes.size(); ++i)
                        if (nodes[i].depth == d) level.push_back(i);
                    std::sort(level.begin(), level.end(), [&](std::size_t a, std::size_t b) {
                        const std::int64_t pa = nodes[a].parent < 0 ? -1 : new_index[static_cast<std::size_t>(nodes[a].parent)];
                        const std::int64_t pb = nodes[b].parent < 0 ? -1 : new_index[static_cast<std::size_t>(nodes[b].parent)];
                        return pa < pb || (pa == pb && nodes[a].rank < nodes[b].rank);
                    });
                    for (const std::size_t i : level) {
                        new_index[i] = static_cast<std::int64_t>(parents.size());
                        parents.push_back(nodes[i].parent < 0
                                              ? -1
                                              : static_cast<std::int32_t>(new_index[static_cast<std::size_t>(nodes[i].parent)]));
                    }
                }
                best = TreePlan{TreeShape(std::move(parents)), expected, cost};
            }
        }
    }
    return best;
}

// Learns costs and acceptance online and drafts optimise_tree()'s shape:
//   a(d, r)  acceptance of the sibling of rank r at depth d + 1 when tested
//            (AcceptanceEstimate: decayed counts, shrunk towards a(d - 1, r)
//            for r = 0 and towards half of a(d, r - 1) for later ranks, so an
//            unmeasured slot is not promised more than its neighbours);
//   d, e, V(n)  the draft pass, a step's drafting overhead and the target
//            pass over n tokens (PassCosts: the same model as AutoLength's,
//            so a tree wider than any timed is priced as compute-bound);
//   r, o     acceptance work per verified row and the rest of a step
//            (a step priced by step_seconds(), as AutoLength's).
// The first warmup_steps steps draft the warmup shape and short chains in
// turn; then every step drafts the optimiser's tree, and one step in
// explore_every explores: in turn (deeper_chain_every) a chain one deeper
// than the plan, and a slightly larger tree (two more nodes, one more depth at most) chosen as if
// unmeasured slots had their neighbours' full acceptance, so that longer
// chains and wider, deeper trees keep being measured. The prices cannot see
// every cost of a tree step on every machine (a tree pass's attention, the
// draft's tree discarded and fed again), so each kind of step, branching or
// chain, carries a correction: its
// realised seconds over its predicted seconds (decayed sums). A branching plan
// runs only while its corrected rate beats its best chain's; one step in
// explore_every, half-way between explorations, drafts the rival (the chain
// while the tree runs, the tree while the chain does) so that both
// corrections stay current. While trees trail, each tree rival that still
// trails doubles the interval to the next (up to max_rival_every) and the
// explorations are deeper chains only: where trees do not pay (a CPU) the
// policy then runs chains nearly all the time, and a tree that starts to pay
// is still tried a few times per max_rival_every steps.
// Shapes depend on measured times, so two runs with one seed may draft
// differently (each run is still exact).
class AutoTree {
public:
    struct Options {
        std::size_t max_nodes = 24;
        std::size_t max_depth = 8;
        std::size_t warmup_steps = 4;
        TreeShape warmup = TreeShape::from_branching({2, 2, 1});
        std::size_t explore_every = 16;
        // Of the explorations, one in this many drafts a chain one deeper
        // than the plan; the others the optimistic tree (1: chains only).
        std::size_t deeper_chain_every = 2;
        double decay = 0.98;
        double prior_strength = 4.0;
        // Weight of a step's realised and predicted seconds after each later
        // step of its kind (branching or chain); 0 turns the correction off.
        double realised_decay = 0.9;
        // The longest interval between tree rivals while trees trail (see the
        // class comment); explore_every or less: no backing off.
        std::size_t max_rival_every = 256;
    };

    AutoTree() : AutoTree(Options{}) {}
    explicit AutoTree(Options options)
        : options_(std::move(options)), acceptance_(options_.decay, options_.prior_strength) {
        if (!(options_.decay > 0.0 && options_.decay <= 1.0)) {
            std::ostringstream message;
            message << "invalid AutoTree decay = " << options_.decay << ": expected a value in (0, 1]";
            throw Error(message.str());
        }
        if (!(options_.realised_decay >= 0.0 && options_.realised_decay < 1.0)) {
            std::ostringstream message;
            message << "invalid AutoTree realised_decay = " << options_.realised_decay << ": expected a value in [0, 1)";
            throw Error(message.str());
        }
        if (options_.deeper_chain_every == 0) throw Error("invalid AutoTree deeper_chain_every = 0: expected >= 1");
        if (options_.max_depth == 0 || options_.max_nodes == 0) {
            std::ostringstream message;
            message << "invalid AutoTree bounds max_nodes = " << options_.max_nodes << ", max_depth = "
                    << options_.max_depth << ": expected both >= 1";
            throw Error(message.str());
        }
    }

    TreeShape plan(std::size_t max_depth, std::uint64_t) {
        // Warm-up: the warmup shape alternating with short chains (1, 2, ...),
        // so that the cost model starts from several pass widths: from the
        // warmup's width alone every narrower tree would cost as much (the
        // cost model's bound below the narrowest width) and never be timed.
        planned_seconds_ = 0.0;  // warm-up shapes are not priced
        if (steps_ < options_.warmup_steps)
            return (steps_ % 2 == 0 ? options_.warmup : TreeShape::chain(1 + steps_ / 2)).truncated(max_depth);
        const std::size_t depth = std::min(max_depth, options_.max_depth);
        const Contest contest = contest_for(depth);
        last_plan_ = contest.trees_trail ? contest.chain : contest.tree;
        const std::size_t every = options_.explore_every;
        // Half-way between explorations, a branching plan's rival runs (the
        // best chain, or the tree while chains lead), so that both
        // corrections stay current.
        if (!contest.trees_trail) rival_interval_ = next_tree_rival_ = 0;
        if (every > 0 && steps_ % every == every / 2 && !contest.tree.shape.is_chain()) {
            if (!contest.trees_trail) return priced(contest.chain);
            if (steps_ >= next_tree_rival_) {
                const std::size_t longest = std::max(every, options_.max_rival_every);
                rival_interval_ = rival_interval_ == 0 ? every : std::min(2 * rival_interval_, longest);
                next_tree_rival_ = steps_ + rival_interval_;
                return priced(contest.tree);
            }
        }
        if (every == 0 || steps_ % every != 0) return priced(last_plan_);
        // Explorations alternate. A chain one deeper than the plan: the
        // prices learn from chains only, and a width never timed is priced as
        // compute-bound, so the next width must be timed on purpose. Then a
        // little beyond the plan (two more nodes, one more depth), where
        // unmeasured slots are promised their neighbours' full acceptance:
        // adjacent widths and ranks get measured without paying for a far
        // larger pass.
        const TreeShape& planned = last_plan_.shape;
        const std::size_t deeper = std::min(depth, planned.depth() + 1);
        if (explorations_++ % options_.deeper_chain_every == 0 || contest.trees_trail) {
            const TreeShape chain = TreeShape::chain(deeper);
            return priced(TreePlan{chain, 1.0, step_seconds(costs_, SingleSequenceRounds{}.of(deeper), deeper + 1)});
        }
        return priced(optimise(deeper, planned.size() + 2, true));
    }

    void observe(const TreeStepOutcome& outcome) {
        ++steps_;
        acceptance_.age();
        for (std::size_t d = 0; d < outcome.tested.size(); ++d) {
            for (std::size_t r = 0; r < outcome.tested[d].size(); ++r) {
                const bool has_accepted = d < outcome.accepted_at.size() && r < outcome.accepted_at[d].size();
                acceptance_.count(d, r, static_cast<double>(outcome.tested[d][r]),
                                  has_accepted ? static_cast<double>(outcome.accepted_at[d][r]) : 0.0);
            }
        }
        // The prices are learned from chain steps only (causal passes, drafts
        // kept in the draft's cache); what a branching step costs beyond its
        // price is its kind's correction.
        const bool chain = outcome.nodes == outcome.depth;  // no node has a sibling (or no drafts)
        if (chain || options_.realised_decay == 0.0) costs_.observe(outcome, options_.decay);
        if (planned_seconds_ > 0.0 && outcome.total_seconds > 0.0)
            (chain ? chain_cost_ : tree_cost_).add(outcome.total_seconds, planned_seconds_, options_.realised_decay);
    }

    // What the policy currently believes (for reports).
    [[nodiscard]] double acceptance_at(std::size_t depth, std::size_t rank) const {
        return acceptance_.at(depth, rank, kSiblingPrior);
    }
    [[nodiscard]] std::size_t steps_observed() const { return steps_; }
    // The optimiser's plan for an unbounded step, from what was measured so far.
    [[nodiscard]] TreePlan current_plan() const {
        const Contest contest = contest_for(options_.max_depth);
        return contest.trees_trail ? contest.chain : contest.tree;
    }
    // Whether the optimiser's tree, its price corrected by what branching
    // steps realised, is slower than its best chain (which then runs instead).
    [[nodiscard]] bool trees_trail_chains() const { return contest_for(options_.max_depth).trees_trail; }
    // Realised over predicted seconds of branching and of chain steps (1 before any).
    [[nodiscard]] double tree_cost_correction() const { return tree_cost_.value(); }
    [[nodiscard]] double chain_cost_correction() const { return chain_cost_.value(); }
    // Its predicted tokens per second relative to autoregressive decoding.
    [[nodiscard]] double predicted_speedup() const {
        const TreePlan plan = current_plan();
        return plan.rate() * step_seconds(costs_, {}, 1);
    }

private:
    static constexpr double kSiblingPrior = 0.5;  // a later sibling: half the one before it, until measured

    // Decayed sums of one kind of step's realised and predicted seconds.
    struct CostCorrection {
        double realised = 0.0, predicted = 0.0;
        void add(double realised_seconds, double predicted_seconds, double decay) {
            realised = decay * realised + realised_seconds;
            predicted = decay * predicted + predicted_seconds;
        }
        [[nodiscard]] double value() const { return predicted > 0.0 ? realised / predicted : 1.0; }
    };

    // Returns plan's shape, remembering its price for observe().
    TreeShape priced(const TreePlan& plan) {
        planned_seconds_ = plan.cost;
        return plan.shape;
    }

    // The optimiser's tree and, when it branches, its best chain, and whether
    // the tree's rate trails the chain's once each is priced with the
    // correction of its kind.
    struct Contest {
        TreePlan tree, chain;
        bool trees_trail = false;
    };
    [[nodiscard]] Contest contest_for(std::size_t max_depth) const {
        Contest contest;
        contest.tree = optimise(max_depth, options_.max_nodes, false);
        if (contest.tree.shape.is_chain()) {
            contest.chain = contest.tree;
            return contest;
        }
        contest.chain = optimise(max_depth, options_.max_nodes, false, true);
        contest.trees_trail = options_.realised_decay > 0.0 &&
                              contest.tree.rate() / tree_cost_.value() < contest.chain.rate() / chain_cost_.value();
        return contest;
    }

    // chain_only: every sibling after the first is priced as never accepted.
    [[nodiscard]] TreePlan optimise(std::size_t max_depth, std::size_t max_nodes, bool optimistic,
                                    bool chain_only = false) const {
        // Memoised estimates: the optimiser asks for the same slots many times.
        const std::size_t ranks = max_nodes;
        const double sibling_prior = optimistic ? 1.0 : kSiblingPrior;
        std::vector<double> table((max_depth + 1) * (ranks + 1), -1.0);
        auto acceptance = [&](std::size_t d, std::size_t r) {
            if (chain_only && r > 0) return 0.0;
            if (d > max_depth || r > ranks) return acceptance_.at(d, r, sibling_prior);
            double& slot = table[d * (ranks + 1) + r];
            if (slot < 0.0) slot = acceptance_.at(d, r, sibling_prior);
            return slot;
        };
        TreeCosts costs{[this](std::size_t n) { return costs_.pass_seconds(n); }, costs_.draft_pass(),
                        costs_.other_seconds(), costs_.drafting_overhead_seconds(), costs_.row_seconds()};
        return optimise_tree(acceptance, costs, max_nodes, max_depth);
    }

    Options options_;
    std::size_t steps_ = 0;
    AcceptanceEstimate acceptance_;
    PassCosts costs_;
    TreePlan last_plan_;
    CostCorrection chain_cost_, tree_cost_;
    double planned_seconds_ = 0.0;  // the price of the shape plan() last returned (0: unpriced)
    std::size_t explorations_ = 0;
    // While trees trail: the interval to the next tree rival (0: none ran
    // yet) and the step from which it may run.
    std::size_t rival_interval_ = 0, next_tree_rival_ = 0;
};

}  // namespace specdec
