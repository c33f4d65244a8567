#pragma once
// TreeSpeculativeDecoder: the drafter proposes a TREE of candidates (several
// per position), the target scores every node in ONE tree pass, tree
// verification accepts one root-to-node path and supplies one more token, and
// the target commits that path to its KV cache without recomputing it. The
// output has exactly the distribution of sampling from the processed target
// alone (at temperature 0: exactly the target's greedy output).
//
//   specdec::TreeSpeculativeDecoder decoder(specdec::target(big), specdec::draft(small), options,
//                                           specdec::TreeShape::from_branching({3, 2, 1}));
//   specdec::TreeSpeculativeDecoder tuned(specdec::target(big), specdec::draft(small), options,
//                                         specdec::AutoTree{});  // the shape learned from the hardware
//   // or (options, rule, policy), in SpeculativeDecoder's order:
//   specdec::TreeSpeculativeDecoder<Big, Small, specdec::RecursiveRejection, specdec::AutoTree> full(
//       specdec::target(big), specdec::draft(small), options, {}, specdec::AutoTree{});
//   auto result = decoder.generate(prompt);   // or prefill() + step(), as SpeculativeDecoder
//
// The target and a draft model must have the tree pass (specdec::TreeLM); a
// model-free TreeDrafter (PromptLookupDrafter) needs no draft model at all.
// options.draft_tokens is not used: the shape says what to draft.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <utility>
#include <ranges>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/model_tree_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/tree_policy.hpp"
#include "specdec/decoding/tree_pass.hpp"
#include "specdec/decoding/tree_shape.hpp"
#include "specdec/sampling/tree_acceptance.hpp"

namespace specdec {

// Target: a TreeLM whose distribution the output follows.
// Draft: a TreeDrafter, or a TreeLM draft model (wrapped in a ModelTreeDrafter).
// Rule: tree verification at temperature > 0 (sampling/tree_acceptance.hpp;
// temperature 0 always follows the target's argmax). Policy: the shape of each
// step's tree (FixedTree, which a TreeShape converts to, or AutoTree).
// Construction, prefill(), generate() and reset() are DecoderSession's.
template <CausalLM Target, class Draft, TreeAcceptanceRule Rule = RecursiveRejection, TreePolicy Policy = FixedTree>
class TreeSpeculativeDecoder
    : public detail::DecoderSession<TreeSpeculativeDecoder<Target, Draft, Rule, Policy>, Target,
                                    detail::DrafterFor<Draft, ModelTreeDrafter, TreeDrafter<Draft>>> {
    static_assert(TreeLM<Target>,
                  "TreeSpeculativeDecoder: the target has no tree pass (specdec::TreeLM: forward_tree and "
                  "commit_tree, see specdec/core/model_contract.hpp); a chain-only target (such as the CUDA "
                  "LlamaModel) works with SpeculativeDecoder");
    static_assert(TreeDrafter<Draft> || TreeLM<Draft>,
                  "TreeSpeculativeDecoder: the draft is neither a TreeDrafter (propose_tree, e.g. "
                  "PromptLookupDrafter) nor a draft model with the tree pass (specdec::TreeLM); a chain-only "
                  "draft works with SpeculativeDecoder");
    using Session =
        detail::DecoderSession<TreeSpeculativeDecoder, Target, detail::DrafterFor<Draft, ModelTreeDrafter, TreeDrafter<Draft>>>;
    using Session::drafter_, Session::feed_, Session::options_, Session::sequence_, Session::target_;

public:
    TreeSpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options = {},
                           Rule rule = {}, Policy policy = {})
        : Session(target, draft, std::move(options)), rule_(std::move(rule)), policy_(std::move(policy)) {
        refuse_unsupported(options_);
    }

    // The shape alone, the common case: (options, shape or policy), rule by default.
    TreeSpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options, Policy policy)
        : TreeSpeculativeDecoder(target, draft, std::move(options), Rule{}, std::move(policy)) {}

    // One draft -> verify step: drafts the policy's tree (no deeper than
    // max_tokens - 1 allows, no larger than the free context holds), scores the pending token and every
    // node in one tree pass of the target, commits the accepted path plus one
    // token from the target. Emission, stop tokens and callbacks as
    // SpeculativeDecoder::step. After the call: the target's cache holds
    // sequence()[0 .. size - 1) (and, after a stop inside the accepted path,
    // the rest of the path, rolled back lazily by the next pass).
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        detail::StepRecord step = this->begin_step(max_tokens);
        if (step.stopped()) return std::move(step.result);
        GenerationStats& stats = step.stats();
        const CounterRng rng{this->seed()};
        // The deepest node sits at position committed + depth - 1, a step
        // emits at most depth + 1 tokens, and the pass's pending nodes (the
        // uncached chain and the tree) must fit the target's free context.
        const std::size_t max_depth = std::min(step.room, max_tokens - 1);
        TreeShape shape;
        const TreeProposal tree = this->propose(step, [&] {
            shape = TreeShape(policy_.plan(max_depth, step.committed)).truncated(max_depth).first_nodes(step.room);
            if (options_.drafting == Drafting::off) shape = TreeShape();
            if (shape.empty()) return TreeProposal{};
            return drafter_.propose_tree(TreeDraftRequest{sequence_, shape, options_.sampling, rng});
        });
        check_proposal(tree, shape);
        count_proposal(stats, tree);

        // One tree pass: the uncached history as a chain, then the tree under
        // its last token. A chain-shaped tree is one causal pass (forward),
        // the cache then rolled back to the accepted path, as a chain step.
        const std::size_t chain = this->feed_pass(step, tree.tokens);
        const bool causal = detail::is_chain(tree);
        const LogitsView logits = detail::timed(stats.target_seconds, [&] {
            return causal ? target_.forward(feed_)
                          : target_.forward_tree(feed_, detail::tree_pass_parents(chain, tree, parents_));
        });
        const TreeVerdict verdict = detail::timed(stats.acceptance_seconds, [&] {
            rows_.reset(logits, chain - 1, index_, options_.sampling, step.committed);
            return options_.sampling.greedy() ? accept_tree_greedy(tree, rows_, index_) : rule_(tree, rows_, index_, rng);
        });
        detail::check_tree_path(verdict.path, tree);

        // Commit the uncached chain and the accepted path; the next token stays pending.
        if (causal) target_.truncate(step.committed + verdict.path.size());
        else target_.commit_tree(detail::tree_pass_commit(chain, verdict.path, commit_), feed_);
        const auto token_of = [&tree](std::int32_t node) { return tree.tokens[static_cast<std::size_t>(node)]; };
        this->emit(step, verdict.path | std::views::transform(token_of), verdict.next_token, on_token);
        count_tests(verdict.path, tree, stats);
        // {timings (finish_step fills them), nodes, depth, accepted, tested, accepted_at}
        return this->finish_step(step, policy_,
                                 TreeStepOutcome{{}, tree.size(), index_.max_depth(), verdict.path.size(),
                                                 stats.tested_at_depth_rank, stats.accepted_at_depth_rank});
    }

    // The shape policy (e.g. to read what AutoTree has learned).
    [[nodiscard]] const Policy& policy() const { return policy_; }

private:
    // Tree verification reads every node's row with one history per path;
    // the logit stages and logprobs are the chain decoders' for now.
    static void refuse_unsupported(const DecodingOptions& options) {
        const SamplingOptions& sampling = options.sampling;
        const char* option = sampling.penalises()              ? "penalties"
                             : !sampling.logit_bias.empty()    ? "logit_bias"
                             : sampling.constraint != nullptr  ? "constraint"
                             : options.logprobs.enabled        ? "logprobs"
                                                               : nullptr;
        if (option != nullptr) {
            throw Error(std::string("TreeSpeculativeDecoder does not support the sampling option ") + option +
                        "; SpeculativeDecoder, AutoregressiveDecoder and BatchedDecoder do");
        }
        if (options.drafting == Drafting::fixed) {
            throw Error("TreeSpeculativeDecoder: drafting = Drafting::fixed fixes a chain's length; a tree's shape comes "
                        "from its policy (a FixedTree for a fixed shape)");
        }
    }

    // Ids in the vocabulary, parents before children, and no larger or deeper
    // than the shape asked for; builds index_ over the tree.
    void check_proposal(const TreeProposal& tree, const TreeShape& shape) {
        detail::check_tree(tree, target_.model().vocab_size());
        index_.build(tree);
        if (tree.size() > shape.size() || index_.max_depth() > shape.depth()) {
            std::ostringstream message;
            message << "the tree drafter proposed " << tree.size() << " nodes of depth " << index_.max_depth()
                    << " when at most " << shape.size() << " nodes of depth " << shape.depth() << " were requested";
            throw Error(message.str());
        }
    }

    // Nodes proposed per depth; accepted counts sized to the tree's depth.
    void count_proposal(GenerationStats& stats, const TreeProposal& tree) const {
        stats.proposed_at_position.assign(index_.max_depth(), 0);
        stats.accepted_at_position.assign(index_.max_depth(), 0);
        for (std::size_t i = 0; i < tree.size(); ++i)
            ++stats.proposed_at_position[index_.depth(static_cast<std::int32_t>(i)) - 1];
    }

    // Tested / accepted counts by depth and sibling rank, as the verifier
    // decided: along the path each accepted node's earlier siblings were
    // rejected; at the path's end every child was rejected.
    void count_tests(const std::vector<std::int32_t>& path, const TreeProposal& tree, GenerationStats& stats) const {
        auto& tested = stats.tested_at_depth_rank;
        auto& accepted = stats.accepted_at_depth_rank;
        auto bump = [](std::vector<std::vector<std::size_t>>& table, std::size_t d, std::size_t r) {
            if (table.size() <= d) table.resize(d + 1);
            if (table[d].size() <= r) table[d].resize(r + 1, 0);
            ++table[d][r];
        };
        std::int32_t node = -1;
        for (std::size_t d = 0; d < path.size(); ++d) {
            const std::size_t rank = index_.rank(path[d], tree);
            for (std::size_t r = 0; r <= rank; ++r) bump(tested, d, r);
            bump(accepted, d, rank);
            node = path[d];
        }
        const std::size_t children = index_.children(node).size();
        for (std::size_t r = 0; r < children; ++r) bump(tested, path.size(), r);
        if (accepted.size() < tested.size()) accepted.resize(tested.size());
        for (std::size_t d = 0; d < tested.size(); ++d) accepted[d].resize(tested[d].size(), 0);
    }

    Rule rule_;
    Policy policy_;
    detail::TreeIndex index_;
    TreeDistributions rows_;
    std::vector<std::int32_t> parents_, commit_;
};

// A TreeShape as the policy: TreeSpeculativeDecoder(target(t), draft(d), options, shape).
template <class Target, class Draft>
TreeSpeculativeDecoder(TargetRole<Target>, DraftRole<Draft>, DecodingOptions, TreeShape)
    -> TreeSpeculativeDecoder<Target, Draft, RecursiveRejection, FixedTree>;

}  // namespace specdec
