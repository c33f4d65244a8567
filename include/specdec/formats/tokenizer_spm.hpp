#pragma once
// SentencePiece-style tokenization as llama.cpp runs it for
// tokenizer.ggml.model = "llama": spaces become U+2581 ("▁"), an optional
// leading space marks the start of the text, characters merge pairwise by best
// piece score, and characters no piece covers fall back to <0xXX> byte tokens.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/tokenizer_merge.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/formats/tokenizer_vocab.hpp"

namespace specdec::detail {

inline constexpr std::string_view spm_space = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

inline std::string spm_escape_spaces(std::string_view text, bool add_space_prefix) {
    std::string escaped;
    escaped.reserve(text.size() + 3 * (add_space_prefix ? 1 : 0) + 8);
    if (add_space_prefix) escaped += spm_space;
    for (const char c : text) {
        if (c == ' ') {
            escaped += spm_space;
        } else {
            escaped += c;
        }
    }
    return escaped;
}

inline std::vector<SymbolSpan> utf8_characters(std::string_view text) {
    std::vector<SymbolSpan> characters;
    characters.reserve(text.size());
    for (std::size_t position = 0; position < text.size();) {
        const std::size_t length = next_utf8_char(text, position).length;
        characters.push_back({position, length});
        position += length;
    }
    return characters;
}

// Appends the tokens of `escaped` (text after spm_escape_spaces) to `out`.
// `unknown` is used for a character neither a piece nor byte tokens cover
// (-1: no unknown token, which makes such a character an Error).
inline void spm_encode(const Vocabulary& vocab, std::string_view escaped, Token unknown, std::vector<Token>& out) {
    const auto merged_score = [&](std::string_view left, std::string_view right) -> std::optional<double> {
        const auto token = vocab.find(std::string_view(left.data(), left.size() + right.size()));
        if (!token) return std::nullopt;
        return vocab.scores[static_cast<std::size_t>(*token)];
    };
    for (const SymbolSpan symbol : merge_symbols(escaped, utf8_characters(escaped), merged_score)) {
        const std::string_view piece = escaped.substr(symbol.begin, symbol.length);
        if (const auto token = vocab.find(piece)) {
            out.push_back(*token);
            continue;
        }
        // Only single characters can be missing: every merge produced a piece.
        bool covered = true;
        for (const char c : piece) covered = covered && vocab.byte_tokens[static_cast<unsigned char>(c)] >= 0;
        if (covered) {
            for (const char c : piece) out.push_back(vocab.byte_tokens[static_cast<unsigned char>(c)]);
        } else if (unknown >= 0) {
            out.push_back(unknown);
        } else {
            throw Error("tokenizer: cannot encode the character at byte " + std::to_string(symbol.begin) +
                        ": no piece, no byte tokens and no unknown token cover it");
        }
    }
}

}  // namespace specdec::detail
