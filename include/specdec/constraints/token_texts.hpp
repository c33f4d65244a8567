#pragma once
// What each token of a vocabulary decodes to: the token_texts a
// RegexConstraint (or any text-level constraint) is built over.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// From a tokenizer: anything with vocab_size() and token_text(Token) returning
// the bytes a token decodes to on its own (specdec::Tokenizer; control tokens
// decode to nothing there, so a constraint never allows them).
template <class Vocabulary>
[[nodiscard]] std::vector<std::string> vocabulary_token_texts(const Vocabulary& vocabulary) {
    std::vector<std::string> texts(vocabulary.vocab_size());
    for (std::size_t token = 0; token < texts.size(); ++token)
        texts[token] = std::string(vocabulary.token_text(static_cast<Token>(token)));
    return texts;
}

inline constexpr char kSyntheticPieceAlphabet[] =
    "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789012345678901234567890123456789"
    "      ,.:;\"'{}[]()-_!?/=+*#@&%<>";

// Texts for a model without a tokenizer (the synthetic family), so that a
// text constraint can run on it. Ids below `control_tokens` (0, 1, 2 by
// default: Llama's <unk>, <s>, </s>) are control tokens with no text; the
// next 95 are the printable ASCII characters ' ' to '~', one each, so every
// printable text can be spelled; every other id is a piece of 2 to 4
// characters drawn, from (seed, id) alone, from kSyntheticPieceAlphabet
// (letters weighted most, then digits, spaces and JSON punctuation).
[[nodiscard]] inline std::vector<std::string> synthetic_token_texts(std::size_t vocab_size, std::uint64_t seed = 1,
                                                                    std::size_t control_tokens = 3) {
    constexpr std::size_t printable = '~' - ' ' + 1;
    if (vocab_size < control_tokens + printable)
        throw Error("synthetic_token_texts: a vocabulary of " + std::to_string(vocab_size) + " tokens has no room for " +
                    std::to_string(control_tokens) + " control tokens and the " + std::to_string(printable) +
                    " printable characters");
    // splitmix64: a well-mixed 64-bit hash of (seed, id, draw)
    auto mix = [](std::uint64_t x) {
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return x ^ (x >> 31);
    };
    constexpr std::size_t alphabet = sizeof(kSyntheticPieceAlphabet) - 1;
    std::vector<std::string> texts(vocab_size);
    for (std::size_t c = 0; c < printable; ++c) texts[control_tokens + c] = std::string(1, static_cast<char>(' ' + c));
    for (std::size_t id = control_tokens + printable; id < vocab_size; ++id) {
        const std::uint64_t base = mix(seed ^ mix(id));
        const std::size_t length = 2 + static_cast<std::size_t>(base % 3);
        std::string piece(length, ' ');
        for (std::size_t i = 0; i < length; ++i) piece[i] = kSyntheticPieceAlphabet[mix(base + i + 1) % alphabet];
        texts[id] = std::move(piece);
    }
    return texts;
}

}  // namespace specdec
