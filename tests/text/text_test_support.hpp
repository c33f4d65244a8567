#pragma once
// Shared by the text-layer tests: the tokenizers of every committed model
// file (the repository's fixtures and, when present, ../shared/fixtures),
// UTF-8 validity, and a small engine-neutral vocabulary given as a list of
// token texts (the shape an engine wrapper has).
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/text/text_stream.hpp"
#include "support/fixtures.hpp"

namespace specdec::test {

struct NamedTokenizer {
    std::string name;
    Tokenizer tokenizer;
};

// Every fixture tokenizer that is present; `missing` names the absent ones.
inline std::vector<NamedTokenizer> fixture_tokenizers(std::vector<std::string>& missing) {
    std::vector<NamedTokenizer> found;
    for (const char* name : {"llama3-f32.gguf", "qwen2-f32.gguf", "mistral-f32.gguf", "llama-gqa-f32.gguf"}) {
        const std::filesystem::path path = std::filesystem::path(SPECDEC_REPO_FIXTURES) / name;
        if (!std::filesystem::exists(path)) {
            missing.emplace_back(name);
            continue;
        }
        found.push_back({name, Tokenizer::from_gguf(gguf::File::open(path))});
    }
    for (const char* name : {"stories260K.gguf", "stories260K-q8_0.gguf", "stories260K-q4_0.gguf"}) {
        const std::optional<std::filesystem::path> path = fixture_path(name);
        if (!path) {
            missing.emplace_back(name);
            continue;
        }
        found.push_back({name, Tokenizer::from_gguf(gguf::File::open(*path))});
    }
    return found;
}

inline bool valid_utf8(std::string_view text) {
    for (std::size_t i = 0; i < text.size();) {
        const specdec::detail::Utf8Char c = specdec::detail::next_utf8_char(text, i);
        if (!c.valid) return false;
        i += c.length;
    }
    return true;
}

// Collects what a TextStream streams: the pieces' text and tokens.
struct PieceRecorder {
    std::string text;
    std::vector<Token> tokens;
    std::vector<std::string> pieces;
    void operator()(const text::TextPiece& piece) {
        text += piece.text;
        tokens.insert(tokens.end(), piece.tokens.begin(), piece.tokens.end());
        pieces.emplace_back(piece.text);
    }
};

// A vocabulary given as token texts, with an optional BOS and space rule.
class ListVocabulary {
public:
    explicit ListVocabulary(std::vector<std::string> texts, Token bos = -1, bool space_prefix = false)
        : texts_(std::move(texts)), bos_(bos), space_prefix_(space_prefix) {}
    [[nodiscard]] std::size_t vocab_size() const { return texts_.size(); }
    [[nodiscard]] const std::string& token_text(Token token) const {
        if (token < 0 || static_cast<std::size_t>(token) >= texts_.size())
            throw Error("ListVocabulary: token id " + std::to_string(token) + " is out of range");
        return texts_[static_cast<std::size_t>(token)];
    }
    [[nodiscard]] Token bos() const { return bos_; }
    [[nodiscard]] bool add_space_prefix() const { return space_prefix_; }
    [[nodiscard]] std::string decode(std::span<const Token> tokens) const {
        std::string out;
        for (const Token t : tokens) out += token_text(t);
        return out;
    }

private:
    std::vector<std::string> texts_;
    Token bos_;
    bool space_prefix_;
};

}  // namespace specdec::test
