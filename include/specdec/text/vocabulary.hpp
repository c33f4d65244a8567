#pragma once
// What the text layer needs from a vocabulary: the bytes each token decodes
// to on its own, and the one context rule SentencePiece vocabularies add (the
// first text after BOS loses the space the encoder put in front of it).
// specdec::Tokenizer satisfies it as it is; an engine's vocabulary (e.g.
// llama.cpp's) does through a small wrapper that stores each token's piece.
//
//   token_text(t)       the token's bytes (byte-fallback tokens: their byte,
//                       control tokens: nothing); a reference or view that
//                       stays valid as long as the vocabulary. Throws
//                       specdec::Error for an id outside the vocabulary.
//   bos()               the BOS id, or -1 when there is none.
//   add_space_prefix()  whether one leading space of the first text after a
//                       BOS is dropped.
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/core/types.hpp"

namespace specdec::text {

template <class T>
concept StableTextRef = std::same_as<std::remove_cvref_t<T>, std::string_view> ||
                        (std::is_lvalue_reference_v<T> && std::same_as<std::remove_cvref_t<T>, std::string>);

template <class V>
concept TextVocabulary = requires(const V& vocab, Token token) {
    { vocab.vocab_size() } -> std::convertible_to<std::size_t>;
    { vocab.token_text(token) } -> StableTextRef;
    { vocab.bos() } -> std::convertible_to<Token>;
    { vocab.add_space_prefix() } -> std::convertible_to<bool>;
};

}  // namespace specdec::text
