#pragma once
// The vocabulary both tokenizer models share: pieces, scores, token kinds
// (llama.cpp's token types), piece lookup and the <0xXX> byte tokens.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec {

// tokenizer.ggml.token_type values.
enum class TokenKind : std::int32_t {
    undefined = 0,  // treated as normal
    normal = 1,
    unknown = 2,
    control = 3,       // BOS, EOS, ...: never produced from text, decoded to nothing
    user_defined = 4,  // matched literally in the text before the model runs
    unused = 5,
    byte = 6,  // <0xXX>: one raw byte (SentencePiece byte fallback)
};

namespace detail {

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

template <class Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

struct Vocabulary {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<TokenKind> kinds;
    // Pieces the models may produce from text (normal, user-defined, unused;
    // not control, unknown or byte tokens). A duplicated piece maps to its
    // last id, as in llama.cpp.
    StringMap<Token> text_tokens;
    std::array<Token, 256> byte_tokens{};  // -1 where the vocabulary has no <0xXX> token
    // Pieces of user-defined tokens, bucketed by first byte and sorted longest
    // first, so that matching them in text costs one bucket scan per position.
    std::array<std::vector<std::string>, 256> user_defined_by_first_byte;
    bool has_user_defined = false;

    [[nodiscard]] std::size_t size() const { return pieces.size(); }

    [[nodiscard]] std::optional<Token> find(std::string_view piece) const {
        const auto found = text_tokens.find(piece);
        if (found == text_tokens.end()) return std::nullopt;
        return found->second;
    }
};

// The byte a "<0xXX>" piece stands for, if it is one.
inline std::optional<unsigned char> parse_byte_piece(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
    const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int high = hex(piece[3]);
    const int low = hex(piece[4]);
    if (high < 0 || low < 0) return std::nullopt;
    return static_cast<unsigned char>(high * 16 + low);
}

}  // namespace detail
}  // namespace specdec
