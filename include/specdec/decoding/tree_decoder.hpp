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
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/model_tree_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/tree_policy.hpp"
#include "specdec/decoding/tree_shape.hpp"
#include "specdec/sampling/tree_acceptance.hpp"

namespace specdec {

namespace detail {

// A TreeDrafter is used in place; a draft model is wrapped in a ModelTreeDrafter.
template <class Draft>
struct TreeDrafterFor {
    using type = ModelTreeDrafter<Draft>;
    static type make(Draft& draft) { return type(draft); }
};
template <class Draft>
    requires TreeDrafter<Draft>
struct TreeDrafterFor<Draft> {
    struct Reference {
        Draft* drafter;
        TreeProposal propose_tree(const TreeDraftRequest& request) { return drafter->propose_tree(request); }
        void reset() { drafter->reset(); }
        void prefill(std::span<const Token> history) {
            if constexpr (requires { drafter->prefill(history); }) drafter->prefill(history);
        }
    };
    using type = Reference;
    static type make(Draft& draft) { return type{&draft}; }
};

}  // namespace detail

// Target: a TreeLM whose distribution the output follows.
// Draft: a TreeDrafter, or a TreeLM draft model (wrapped in a ModelTreeDrafter).
// Policy: the shape of each step's tree (FixedTree, which a TreeShape converts
// to, or AutoTree). Rule: tree verification at temperature > 0 (temperature 0
// always follows the target's argmax).
template <CausalLM Target, class Draft, TreePolicy Policy = FixedTree, TreeAcceptanceRule Rule = RecursiveRejection>
class TreeSpeculativeDecoder
    : public detail::DecoderSession<TreeSpeculativeDecoder<Target, Draft, Policy, Rule>> {
    static_assert(TreeLM<Target>,
                  "TreeSpeculativeDecoder: the target has no tree pass (specdec::TreeLM: forward_tree and "
                  "commit_tree, see specdec/core/model_contract.hpp); a chain-only target (such as the CUDA "
                  "LlamaModel) works with SpeculativeDecoder");
    static_assert(TreeDrafter<Draft> || TreeLM<Draft>,
                  "TreeSpeculativeDecoder: the draft is neither a TreeDrafter (propose_tree, e.g. "
                  "PromptLookupDrafter) nor a draft model with the tree pass (specdec::TreeLM); a chain-only "
                  "draft works with SpeculativeDecoder");
    using Session = detail::DecoderSession<TreeSpeculativeDecoder<Target, Draft, Policy, Rule>>;

public:
    // Throws specdec::Error for invalid options or when a draft model's
    // vocabulary differs from the target's. Both models must outlive the decoder.
    TreeSpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options = {},
                           Policy policy = {}, Rule rule = {})
        : Session(std::move(options)),
          drafter_(detail::TreeDrafterFor<Draft>::make(draft.source)),
          target_(target.model),
          policy_(std::move(policy)),
          rule_(std::move(rule)) {
        validate(this->options_, /*speculative=*/true);
        detail::check_shared_vocabulary(draft.source, target.model);
    }

    // As SpeculativeDecoder::prefill. After the call: the target's cache holds
    // prompt[0 .. n - 1).
    GenerationStats prefill(std::span<const Token> prompt) {
        return this->prefill_target_and_drafter(target_, drafter_, prompt);
    }

    // One draft -> verify step: drafts the policy's tree (no deeper than
    // max_tokens - 1 allows, no larger than the free context holds), scores the pending token and every
    // node in one tree pass of the target, commits the accepted path plus one
    // token from the target. Emission, stop tokens and callbacks as
    // SpeculativeDecoder::step. After the call: the target's cache holds
    // sequence()[0 .. size - 1) (and, after a stop inside the accepted path,
    // the rest of the path, rolled back lazily by the next pass).
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        this->check_step(max_tokens);
        const auto start = detail::Clock::now();
        StepResult result;
        GenerationStats& stats = result.stats;
        std::vector<Token>& history = this->sequence_;
        Target& target = target_.model();
        const std::size_t committed = history.size();
        const std::size_t context = target.context_length();
        if (committed > context) {
            result.stop = StopReason::context_full;
            return result;
        }
        const DecodingOptions& options = this->options_;
        // The deepest node sits at position committed + depth - 1, a step
        // emits at most depth + 1 tokens, and the pass's pending nodes (the
        // uncached chain and the tree) must fit the target's free context.
        const std::size_t max_depth = std::min(context - committed, max_tokens - 1);
        const std::size_t max_nodes = context - committed;
        const CounterRng rng{options.seed};

        const auto draft_start = detail::Clock::now();
        const TreeShape shape = TreeShape(policy_.plan(max_depth, committed)).truncated(max_depth).first_nodes(max_nodes);
        TreeProposal tree;
        if (!shape.empty()) tree = drafter_.propose_tree(TreeDraftRequest{history, shape, options.sampling, rng});
        stats.draft_seconds = detail::seconds_since(draft_start);
        detail::check_tree(tree, target.vocab_size());
        index_.build(tree);
        if (tree.size() > shape.size() || index_.max_depth() > shape.depth()) {
            std::ostringstream message;
            message << "the tree drafter proposed " << tree.size() << " nodes of depth " << index_.max_depth()
                    << " when at most " << shape.size() << " nodes of depth " << shape.depth() << " were requested";
            throw Error(message.str());
        }
        const std::size_t depth = index_.max_depth();
        stats.draft_forward_passes = tree.forward_passes;
        stats.draft_tokens_proposed = tree.size();
        stats.proposed_at_position.assign(depth, 0);
        stats.accepted_at_position.assign(depth, 0);
        for (std::size_t i = 0; i < tree.size(); ++i) ++stats.proposed_at_position[index_.depth(static_cast<std::int32_t>(i)) - 1];

        // One target pass: the uncached history as a chain, then the tree under its last token.
        const std::span<const Token> uncached = target_.uncached_suffix(history);
        const std::size_t chain = uncached.size();
        feed_.assign(uncached.begin(), uncached.end());
        feed_.insert(feed_.end(), tree.tokens.begin(), tree.tokens.end());
        parents_.clear();
        for (std::size_t i = 0; i < chain; ++i) parents_.push_back(static_cast<std::int32_t>(i) - 1);
        for (const std::int32_t parent : tree.parents)
            parents_.push_back(parent < 0 ? static_cast<std::int32_t>(chain) - 1 : parent + static_cast<std::int32_t>(chain));
        stats.target_tokens = feed_.size();
        const auto forward_start = detail::Clock::now();
        const LogitsView logits = target_.forward_tree(feed_, parents_);
        stats.target_seconds = detail::seconds_since(forward_start);
        stats.target_forward_passes = 1;

        const auto accept_start = detail::Clock::now();
        rows_.reset(logits, chain - 1, index_, options.sampling, committed);
        TreeVerdict verdict =
            options.sampling.greedy() ? accept_tree_greedy(tree, rows_, index_) : rule_(tree, rows_, index_, rng);
        stats.acceptance_seconds = detail::seconds_since(accept_start);
        check_path(verdict.path, tree);

        // Commit the uncached chain and the accepted path; the next token stays pending.
        commit_.clear();
        for (std::size_t i = 0; i < chain; ++i) commit_.push_back(static_cast<std::int32_t>(i));
        for (const std::int32_t node : verdict.path) commit_.push_back(node + static_cast<std::int32_t>(chain));
        target_.commit_tree(commit_, feed_);

        step_tokens_.clear();
        for (const std::int32_t node : verdict.path) step_tokens_.push_back(tree.tokens[static_cast<std::size_t>(node)]);
        step_tokens_.push_back(verdict.next_token);
        const std::size_t emitted = detail::emit_tokens(std::span<const Token>(step_tokens_), options.stop_tokens,
                                                        on_token, history, result.tokens, result.stop);
        const std::size_t accepted_emitted = std::min(emitted, verdict.path.size());
        stats.draft_tokens_accepted = accepted_emitted;
        for (std::size_t i = 0; i < accepted_emitted; ++i) ++stats.accepted_at_position[i];
        stats.generated_tokens = emitted;
        count_tests(verdict.path, tree, stats);
        stats.total_seconds = detail::seconds_since(start);

        TreeStepOutcome outcome{.nodes = tree.size(),
                                .depth = depth,
                                .accepted = verdict.path.size(),
                                .draft_passes = tree.forward_passes,
                                .verified_tokens = feed_.size(),
                                .tested = stats.tested_at_depth_rank,
                                .accepted_at = stats.accepted_at_depth_rank,
                                .draft_seconds = stats.draft_seconds,
                                .target_seconds = stats.target_seconds,
                                .acceptance_seconds = stats.acceptance_seconds,
                                .total_seconds = stats.total_seconds};
        policy_.observe(outcome);
        return result;
    }

    // The shape policy (e.g. to read what AutoTree has learned).
    [[nodiscard]] const Policy& policy() const { return policy_; }

    // Empties both KV caches and the committed sequence.
    void reset() {
        target_.reset();
        drafter_.reset();
        this->sequence_.clear();
    }

private:
    void check_path(const std::vector<std::int32_t>& path, const TreeProposal& tree) const {
        std::int32_t parent = -1;
        for (const std::int32_t node : path) {
            if (node < 0 || static_cast<std::size_t>(node) >= tree.size() ||
                tree.parents[static_cast<std::size_t>(node)] != parent) {
                std::ostringstream message;
                message << "tree acceptance rule returned node " << node
                        << " in its path; expected a child of the path's previous node (" << parent << ")";
                throw Error(message.str());
            }
            parent = node;
        }
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

    typename detail::TreeDrafterFor<Draft>::type drafter_;
    detail::KvSync<Target> target_;
    Policy policy_;
    Rule rule_;
    detail::TreeIndex index_;
    TreeDistributions rows_;
    std::vector<Token> feed_, step_tokens_;
    std::vector<std::int32_t> parents_, commit_;
};

// A TreeShape as the policy: TreeSpeculativeDecoder(target(t), draft(d), options, shape).
template <class Target, class Draft>
TreeSpeculativeDecoder(TargetRole<Target>, DraftRole<Draft>, DecodingOptions, TreeShape)
    -> TreeSpeculativeDecoder<Target, Draft, FixedTree>;

}  // namespace specdec
