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

}  // namespace specdec
