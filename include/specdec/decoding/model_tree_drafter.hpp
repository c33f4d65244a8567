#pragma once
// A draft *model* as a TreeDrafter: the root's children come from the draft's
// row after the committed sequence, the children of every other node from its
// own row, and the draft evaluates each depth of the tree in ONE forward_tree
// pass. Siblings are drawn without replacement from the processed q (at
// temperature 0: the top-n tokens of the draft's logits), which is what tree
// verification's recursive rejection sampling needs to be exact.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/decoding/draft_model_cache.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

template <CausalLM Model>
class ModelTreeDrafter : public detail::DraftModelCache<Model> {
    static_assert(TreeLM<Model>,
                  "ModelTreeDrafter: the draft model has no tree pass (specdec::TreeLM: forward_tree and "
                  "commit_tree); a chain-only draft model works with SpeculativeDecoder");

    using Cache = detail::DraftModelCache<Model>;
    using Cache::cache_;
    using Cache::check_vocab;

public:
    explicit ModelTreeDrafter(Model& model) : Cache(model) {}

    using Cache::vocab_size;

    // Fills request.shape as far as the draft's q allows (a sibling slot beyond
    // the number of tokens q can give is dropped with its subtree). The draft's
    // cache ends holding the whole history; the tree itself is discarded (the
    // accepted tokens are fed with the next step's first pass).
    TreeProposal propose_tree(const TreeDraftRequest& request) {
        TreeProposal proposal;
        const std::size_t vocab = vocab_size();
        proposal.vocab = vocab;
        const TreeShape& shape = request.shape;
        const std::size_t history = request.history.size();
        // Nodes up to depth D - 1 are evaluated, at positions history .. history + D - 2.
        const std::size_t context = cache_.model().context_length();
        const std::size_t room = context + 1 > history ? context + 1 - history : 0;
        const std::size_t max_depth = std::min(shape.depth(), room);
        if (max_depth == 0) return proposal;
        greedy_ = request.sampling.greedy();

        if (shape.is_chain()) return propose_chain(request, max_depth, std::move(proposal));

        shape_children_.assign(shape.size() + 1, 0);
        for (std::size_t s = 0; s < shape.size(); ++s) ++shape_children_[static_cast<std::size_t>(shape.parent(s) + 1)];

        // Catch up on what the last verification committed; the last row is the root's q.
        LogitsView logits = cache_.forward_last(cache_.uncached_suffix(request.history));
        ++proposal.forward_passes;
        check_vocab(logits);
        expansions_.assign(1, Expansion{});
        expand(expansions_[0], logits.last_row(), shape_children_[0], history, request.sampling, proposal);

        std::vector<std::int32_t> slot(shape.size(), -1);  // shape node -> proposal node
        std::vector<std::int32_t> shape_of;                // proposal node -> shape node
        std::vector<std::int32_t> pending;                 // proposal node -> pending-tree index, -1 if not evaluated
        std::vector<Token> level_tokens;
        std::vector<std::int32_t> level_parents, level_nodes;
        std::size_t next_shape = 0, pending_size = 0;
        bool tree_pass = false;
        for (std::size_t depth = 1; depth <= max_depth; ++depth) {
            const std::size_t level_begin = proposal.size();
            for (; next_shape < shape.size() && shape.depth_of(next_shape) == depth; ++next_shape) {
                const std::int32_t shape_parent = shape.parent(next_shape);
                const std::int32_t parent = shape_parent < 0 ? -1 : slot[static_cast<std::size_t>(shape_parent)];
                if (shape_parent >= 0 && (parent < 0 || pending[static_cast<std::size_t>(parent)] < 0)) continue;
                Expansion& expansion = expansions_[static_cast<std::size_t>(parent + 1)];
                const double u = request.rng.uniform(history, RandomPurpose::tree_draft,
                                                     static_cast<std::uint32_t>(next_shape));
                const std::optional<Token> token = draw(expansion, u, proposal);
                if (!token) continue;
                slot[next_shape] = static_cast<std::int32_t>(proposal.size());
                shape_of.push_back(static_cast<std::int32_t>(next_shape));
                pending.push_back(-1);
                proposal.tokens.push_back(*token);
                proposal.parents.push_back(parent);
                proposal.distribution_of.push_back(expansion.row);
            }
            if (depth == max_depth) break;
            // One pass over this depth's nodes that have children in the shape.
            level_tokens.clear();
            level_parents.clear();
            level_nodes.clear();
            for (std::size_t node = level_begin; node < proposal.size(); ++node) {
                if (shape_children_[static_cast<std::size_t>(shape_of[node] + 1)] == 0) continue;
                const std::int32_t parent = proposal.parents[node];
                level_tokens.push_back(proposal.tokens[node]);
                level_parents.push_back(parent < 0 ? -1 : pending[static_cast<std::size_t>(parent)]);
                level_nodes.push_back(static_cast<std::int32_t>(node));
            }
            // The pending tree must fit the draft's free context: nodes beyond it stay leaves.
            const std::size_t free = context > history ? context - history : 0;
            const std::size_t allowed = free > pending_size ? free - pending_size : 0;
            if (level_nodes.size() > allowed) {
                level_nodes.resize(allowed);
                level_tokens.resize(allowed);
                level_parents.resize(allowed);
            }
            if (level_nodes.empty()) break;
            logits = cache_.model().forward_tree(level_tokens, level_parents);
            tree_pass = true;
            ++proposal.forward_passes;
            check_rows(logits, level_tokens.size());
            expansions_.resize(proposal.size() + 1);
            for (std::size_t j = 0; j < level_nodes.size(); ++j) {
                const std::size_t node = static_cast<std::size_t>(level_nodes[j]);
                pending[node] = static_cast<std::int32_t>(pending_size++);
                expand(expansions_[node + 1], logits.row(j),
                       shape_children_[static_cast<std::size_t>(shape_of[node] + 1)], history + depth,
                       request.sampling, proposal);
            }
        }
        if (tree_pass) cache_.model().commit_tree(std::span<const std::int32_t>{});
        if (greedy_) proposal.distribution_of.clear();
        return proposal;
    }

private:
    // A chain drafts as ModelDrafter does: one pass a depth that appends its
    // token to the draft's cache, so the next step feeds only what the target
    // committed beyond the accepted drafts (a tree pass is discarded, and its
    // accepted path fed again). Tokens are drawn as for a tree of one child
    // per node.
    TreeProposal propose_chain(const TreeDraftRequest& request, std::size_t depth, TreeProposal proposal) {
        const std::size_t history = request.history.size();
        LogitsView logits = cache_.forward_last(cache_.uncached_suffix(request.history));
        expansions_.assign(1, Expansion{});
        for (std::size_t node = 0; node < depth; ++node) {
            if (node > 0) logits = cache_.forward(std::span<const Token>(proposal.tokens).subspan(node - 1, 1));
            ++proposal.forward_passes;
            check_vocab(logits);
            Expansion& expansion = expansions_[0];
            expand(expansion, logits.last_row(), 1, history + node, request.sampling, proposal);
            const double u = request.rng.uniform(history, RandomPurpose::tree_draft, static_cast<std::uint32_t>(node));
            const std::optional<Token> token = draw(expansion, u, proposal);
            if (!token) break;
            proposal.tokens.push_back(*token);
            proposal.parents.push_back(static_cast<std::int32_t>(node) - 1);
            proposal.distribution_of.push_back(expansion.row);
        }
        if (greedy_) proposal.distribution_of.clear();
        return proposal;
    }

    // The candidates of one expanded node: at T > 0 its q (row `row` of the
    // proposal) minus the tokens drawn so far; at T = 0 its top tokens.
    struct Expansion {
        std::int32_t row = -1;
        std::vector<float> left;
        std::size_t support = 0;
        std::vector<Token> order;
        std::size_t drawn = 0;
    };

    void expand(Expansion& expansion, std::span<const float> logits, std::size_t children, std::uint64_t position,
                const SamplingOptions& sampling, TreeProposal& proposal) {
        expansion = Expansion{};
        if (children == 0) return;
        const std::size_t vocab = logits.size();
        if (greedy_) {
            (void)greedy_token(logits, "draft model", position);  // checks the row
            // The `children` largest logits, ties to the lower id, in one pass
            // over the row (a node has a handful of children; sorting the
            // whole vocabulary cost more than the draft's own argmax).
            std::vector<Token>& order = expansion.order;
            order.reserve(children);
            for (std::size_t x = 0; x < vocab; ++x) {
                const float value = logits[x];
                if (!(value > -std::numeric_limits<float>::infinity())) continue;
                if (order.size() == children && !(value > logits[static_cast<std::size_t>(order.back())])) continue;
                if (order.size() == children) order.pop_back();
                // Insert after every kept token whose logit is >= value (those have lower ids).
                auto at = order.end();
                while (at != order.begin() && logits[static_cast<std::size_t>(*(at - 1))] < value) --at;
                order.insert(at, static_cast<Token>(x));
            }
            return;
        }
        expansion.row = static_cast<std::int32_t>(proposal.probabilities.size() / vocab);
        proposal.probabilities.resize(proposal.probabilities.size() + vocab);
        std::span<float> q{proposal.probabilities.data() + static_cast<std::size_t>(expansion.row) * vocab, vocab};
        logits_to_distribution(logits, sampling, q, "draft model", position);
        expansion.left.assign(q.begin(), q.end());
        for (const float value : q) expansion.support += value > 0.0f;
    }

    // The next sibling: drawn from q without the earlier siblings (T > 0), or
    // the next-ranked token (T = 0); nothing when the candidates are used up.
    std::optional<Token> draw(Expansion& expansion, double u, const TreeProposal&) {
        if (greedy_) {
            if (expansion.drawn >= expansion.order.size()) return std::nullopt;
            return expansion.order[expansion.drawn++];
        }
        if (expansion.drawn >= expansion.support) return std::nullopt;
        const Token token = sample_from_distribution(expansion.left, u);
        expansion.left[static_cast<std::size_t>(token)] = 0.0f;
        ++expansion.drawn;
        return token;
    }

    void check_rows(const LogitsView& logits, std::size_t nodes) const {
        if (logits.rows != nodes || logits.data == nullptr) {
            std::ostringstream message;
            message << "draft model forward_tree returned " << logits.rows << " logits rows for " << nodes
                    << " nodes: expected one row per node";
            throw Error(message.str());
        }
        check_vocab(logits);
    }

    bool greedy_ = false;
    std::vector<std::size_t> shape_children_;
    std::vector<Expansion> expansions_;
};

}  // namespace specdec
