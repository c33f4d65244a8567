#pragma once
// Tree verification alone, for an engine that drafts token trees by itself
// (its own tree drafter, Medusa-style heads, an n-gram tree) and wants only
// an exact verifier: the verification step of TreeSpeculativeDecoder, reached
// without the decoder (the same processing of the target's rows, the same
// tree rule, the same random streams). Given the same rows, tree and seed,
// verify_tree returns what TreeSpeculativeDecoder::step accepts and emits.
//
//   // the engine's own tree pass gave the target's row after the last
//   // committed token (row 0) and one row per node (row 1 + i for node i):
//   const specdec::TreeVerifyResult verdict =
//       specdec::verify_tree(rows, tree, sampling, specdec::CounterRng{seed}, /*first_position=*/n);
//   commit(verdict.tokens);   // the accepted path's tokens, then the target's next token
//
//   // or let the call run the target's tree pass (TreeLM) and commit the path:
//   const auto verdict = specdec::verify_tree(target_model, pending, tree, sampling, rng);
//
// The caller's part of the contract is verify_drafts' (verify_only.hpp), per
// sibling group: a group drawn from q was drawn from q WITHOUT replacement in
// rank order (node index), every node of the group naming that q
// (TreeProposal::distribution_of); point-mass nodes are deterministic given
// the context; the tree's randomness is independent of the verifier's
// (never the accept_test / target_sample streams of the same CounterRng);
// first_position is the committed length, the position of the tree's first
// level.
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/tree_pass.hpp"
#include "specdec/decoding/verify_only.hpp"
#include "specdec/sampling/tree_acceptance.hpp"

namespace specdec {

// What tree verification decided.
struct TreeVerifyResult {
    std::vector<std::int32_t> path;  // the accepted nodes, path[0] a child of the committed sequence
    Token next_token = 0;            // the target's token after them
    std::vector<Token> tokens;       // what to commit, in order: the path's tokens, then next_token
};

namespace detail {

// Everything about a tree that can be checked without the target's rows.
inline void check_verify_tree(const TreeProposal& tree, std::size_t vocab, const SamplingOptions& sampling) {
    validate(sampling);
    refuse_logit_stages(sampling, "verify_tree");
    check_tree(tree, vocab);
}

}  // namespace detail

// Verifies `tree` against the target's tree.size() + 1 rows (`target_rows`:
// row 0 after the last committed token, row 1 + i after node i) with `rule`
// at temperature > 0 (the target's argmax path at 0). Throws specdec::Error
// for another number of rows, a proposal that is not a tree over the rows'
// vocabulary (check_tree), a NaN or +inf logit in a row it reads, or invalid
// options.
template <TreeAcceptanceRule Rule = RecursiveRejection>
[[nodiscard]] TreeVerifyResult verify_tree(const LogitsView& target_rows, const TreeProposal& tree,
                                           const SamplingOptions& sampling, const CounterRng& rng,
                                           std::uint64_t first_position, const Rule& rule = {}) {
    detail::check_logits_shape(target_rows, tree.size() + 1, 0, "verify_tree: the target's pass",
                               "a tree of " + std::to_string(tree.size()) + " nodes",
                               std::to_string(tree.size() + 1) +
                                   " rows (row 0 after the committed sequence, row 1 + i after node i)");
    detail::check_verify_tree(tree, target_rows.vocab, sampling);
    // The index and the rows' processing buffers are reused between calls of a thread.
    thread_local detail::TreeIndex index;
    thread_local TreeDistributions rows;
    index.build(tree);
    rows.reset(target_rows, 0, index, sampling, first_position);
    const TreeVerdict verdict = sampling.greedy() ? accept_tree_greedy(tree, rows, index) : rule(tree, rows, index, rng);
    detail::check_tree_path(verdict.path, tree);
    TreeVerifyResult result;
    for (const std::int32_t node : verdict.path) result.tokens.push_back(tree.tokens[static_cast<std::size_t>(node)]);
    result.path = verdict.path;
    result.next_token = verdict.next_token;
    result.tokens.push_back(verdict.next_token);
    return result;
}

// Runs the target's tree pass itself: feeds `pending` (the committed tokens
// its cache does not hold yet, at least the last one, whose row scores the
// tree's first level) as a chain and the tree under its last token in ONE
// forward_tree(), verifies as above with first_position = the cache's length
// before the call + pending.size(), and commits pending and the accepted path
// (commit_tree): next_token is not fed (feed it first in the next call, as
// the decoders do). The tree is checked before the pass; if verification
// fails after it, the pending tree is discarded and the cache is where it was.
template <TreeLM Model, TreeAcceptanceRule Rule = RecursiveRejection>
[[nodiscard]] TreeVerifyResult verify_tree(Model& target, std::span<const Token> pending, const TreeProposal& tree,
                                           const SamplingOptions& sampling, const CounterRng& rng, const Rule& rule = {}) {
    const std::size_t vocab = target.vocab_size();
    detail::check_pending(pending, vocab, "verify_tree", "the tree's first level");
    detail::check_verify_tree(tree, vocab, sampling);
    const std::size_t before = target.cached_tokens();
    const std::size_t chain = pending.size();
    std::vector<Token> feed(pending.begin(), pending.end());
    feed.insert(feed.end(), tree.tokens.begin(), tree.tokens.end());
    std::vector<std::int32_t> nodes;
    const LogitsView all = target.forward_tree(std::span<const Token>(feed), detail::tree_pass_parents(chain, tree, nodes));
    detail::check_cache_grew(target, before, 0, "target", "forward_tree (which must not grow the cache)");
    TreeVerifyResult result;
    try {
        detail::check_logits_shape(all, feed.size(), vocab, "verify_tree: the target's forward_tree",
                                   std::to_string(feed.size()) + " nodes", "one row per node");
        const LogitsView rows{all.data + (chain - 1) * all.row_stride, tree.size() + 1, all.vocab, all.row_stride};
        result = verify_tree(rows, tree, sampling, rng, before + chain, rule);
    } catch (const Error&) {
        target.commit_tree(std::span<const std::int32_t>{});
        throw;
    }
    target.commit_tree(detail::tree_pass_commit(chain, result.path, nodes));
    detail::check_cache_grew(target, before, chain + result.path.size(), "target", "commit_tree");
    return result;
}

}  // namespace specdec
