#pragma once
// The contract between the decoders and a model. Any type that satisfies
// CausalLM can be a target or a draft: the reference CPU and CUDA models,
// a llama.cpp wrapper, a test double.
#include <concepts>
#include <cstddef>
#include <span>

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
//                     an id is out of range.
//  truncate(n)        rolls the cache back to its first n positions (n <= cached_tokens()).
template <class Model>
concept CausalLM = requires(Model& model, const Model& const_model, std::span<const Token> tokens, std::size_t n) {
    { const_model.vocab_size() } -> std::convertible_to<std::size_t>;
    { const_model.context_length() } -> std::convertible_to<std::size_t>;
    { const_model.cached_tokens() } -> std::convertible_to<std::size_t>;
    { model.forward(tokens) } -> std::convertible_to<LogitsView>;
    { model.truncate(n) };
};

}  // namespace specdec
