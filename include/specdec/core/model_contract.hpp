#pragma once
// The contract between the decoders and a model, in one place. Any type that
// satisfies CausalLM can be a target or a draft: the reference CPU and CUDA
// models, a llama.cpp wrapper, a test double. The optional extensions below let
// a model do more of the step itself; the decoder uses them when present and
// the plain CausalLM path otherwise.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// A causal language model with a KV cache.
//
//  vocab_size()       number of logits per row.
//  context_length()   the most positions the cache can hold.
//  cached_tokens()    positions currently in the cache.
//  forward(tokens)    appends tokens at positions cached_tokens() .. +tokens.size()
//                     in one batched pass, returns one logits row per token
//                     (row i predicts the token after tokens[i]). Must throw
//                     specdec::Error if the tokens would overflow the context or
//                     an id is out of range; the cache is then unchanged.
//  truncate(n)        rolls the cache back to its first n positions (n <= cached_tokens()).
template <class Model>
concept CausalLM = requires(Model& model, const Model& const_model, std::span<const Token> tokens, std::size_t n) {
    { const_model.vocab_size() } -> std::convertible_to<std::size_t>;
    { const_model.context_length() } -> std::convertible_to<std::size_t>;
    { const_model.cached_tokens() } -> std::convertible_to<std::size_t>;
    { model.forward(tokens) } -> std::convertible_to<LogitsView>;
    { model.truncate(n) };
};

// Extension: a model that can append tokens to its cache and return only the
// last token's logits row (forward_last), skipping the output head for the
// other rows. The decoders prefill prompts through it when it is there.
template <class Model>
concept LastRowLM = CausalLM<Model> && requires(Model& model, std::span<const Token> tokens) {
    { model.forward_last(tokens) } -> std::convertible_to<LogitsView>;
};

// Extension: a model that scores a token tree in one pass (tree verification,
// tree drafting). Nodes are numbered in the order they are given, across all
// forward_tree calls since the last commit_tree (the "pending tree").
//
//  forward_tree(tokens, parents)
//      scores tokens.size() new nodes in one batched pass and returns one
//      logits row per new node (row i predicts the token after node i).
//      parents[i] is the index of node i's parent in the pending tree: an
//      earlier node of this call or of an earlier call, or -1 for a node that
//      follows the last cached position. A node at depth d (a child of the
//      cache has depth 1) sits at position cached_tokens() + d - 1 and attends
//      to the cache and to its own ancestors only, so every root-to-node path
//      is scored exactly as forward() would score it as a chain. The cache
//      itself does not grow: cached_tokens() is unchanged until commit_tree.
//      Throws specdec::Error (and leaves the cache and the pending tree as
//      they were) for an id out of range, a parent that is not an earlier
//      node, a tree deeper than the free context, or a pending tree of more
//      nodes than the free context holds (context_length() - cached_tokens()):
//      a model may keep the pending nodes in its free cache slots.
//  commit_tree(path)
//      appends the nodes of `path` to the cache, in order, without
//      recomputing them, and empties the pending tree. path[0] must have
//      parent -1 and each later node must be a child of the one before it;
//      an empty path only discards the pending tree. Any other call
//      (forward, forward_last, truncate) also discards the pending tree.
template <class Model>
concept TreeLM = CausalLM<Model> && requires(Model& model, std::span<const Token> tokens,
                                             std::span<const std::int32_t> nodes) {
    { model.forward_tree(tokens, nodes) } -> std::convertible_to<LogitsView>;
    { model.commit_tree(nodes) };
};

// Extension: a target that runs the verification pass *and* the acceptance
// rule `Rule` itself (e.g. on a GPU, so that no logits row is copied back).
//
//   forward_and_verify(tokens, draft, sampling, rng, first_position, rule)
//
// appends `tokens` to the cache like forward() (the last draft.size() of them
// are the drafts, at positions first_position..), processes the last k + 1
// rows with `sampling`, and returns exactly what `rule` would return on the
// host for those rows (greedy verification when sampling.greedy()). The rule is
// part of the signature so that a model states which rules it runs: for any
// other rule the decoder verifies on the host, and GenerationStats says which
// path ran (verified_on_device).
template <class Model, class Rule>
concept DeviceVerifyingLM =
    CausalLM<Model> && requires(Model& model, std::span<const Token> tokens, const DraftProposal& draft,
                                const SamplingOptions& sampling, const CounterRng& rng, std::uint64_t position,
                                const Rule& rule) {
        { model.forward_and_verify(tokens, draft, sampling, rng, position, rule) } -> std::same_as<AcceptanceResult>;
    };

// One sequence's part of a multi-sequence pass (MultiSequenceLM::forward_batch).
struct SequenceFeed {
    std::size_t slot = 0;              // the sequence's cache slot, in [0, sequence_slots())
    std::span<const Token> tokens;     // appended to that slot's cache, in order
    bool last_row_only = false;        // return only the last token's row (a prompt's prefill)
};

// Extension: several independent sequences, each in a cache slot of its own,
// scored in ONE pass (continuous batching). The slots are allocated when the
// model is constructed; slot 0 is the cache that forward(), forward_last(),
// truncate() and cached_tokens() use.
//
//  sequence_slots()         the number of slots (>= 1).
//  cached_tokens(slot)      positions cached in that slot.
//  forward_batch(feeds)     one pass over the tokens of every feed, a flat
//                           ragged batch (no padding): feed i's tokens go to
//                           the positions cached_tokens(slot) .. + size of its
//                           slot and attend to that slot's cache only. Returns
//                           the rows of feed 0, then feed 1, ...: one row per
//                           token (row j predicts the token after tokens[j]),
//                           or only the last token's row for last_row_only.
//                           Slots must be distinct and each feed non-empty;
//                           no feeds at all is a pass of 0 rows that changes
//                           nothing. Throws specdec::Error for a slot out of
//                           range or repeated, an empty feed, an id out of
//                           range, or a feed that would overflow its slot's
//                           context; every cache is then unchanged (validation
//                           comes first, detail::check_sequence_feeds).
//                           After the call: each fed slot holds its old
//                           positions plus its feed; other slots are untouched.
//                           A feed to slot 0 discards a pending tree (TreeLM),
//                           as forward() does; feeds to other slots keep it.
//  truncate(slot, n)        rolls that slot back to its first n positions
//                           (n <= cached_tokens(slot)); the others are untouched.
//                           truncate(slot, 0) frees the slot for a new sequence.
//                           truncate(slot, n) and cached_tokens(slot) throw
//                           specdec::Error for a slot out of range.
//
// Each row must not depend on the other feeds of the pass: a sequence's
// logits are the same (bitwise on the CPU model; up to rounding on the GPU,
// where the product's algorithm may change with the width) whatever its
// batch mates, and the same as forward() on slot 0 gives for a cache built by
// the same calls.
// A model without this extension still serves the batched decoder: its
// sequences then run one after another, each through forward().
template <class Model>
concept MultiSequenceLM = CausalLM<Model> && requires(Model& model, const Model& const_model,
                                                      std::span<const SequenceFeed> feeds, std::size_t slot,
                                                      std::size_t n) {
    { const_model.sequence_slots() } -> std::convertible_to<std::size_t>;
    { const_model.cached_tokens(slot) } -> std::convertible_to<std::size_t>;
    { model.forward_batch(feeds) } -> std::convertible_to<LogitsView>;
    { model.truncate(slot, n) };
};

}  // namespace specdec
