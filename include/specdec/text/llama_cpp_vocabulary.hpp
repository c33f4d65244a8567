#pragma once
// llama.cpp's vocabulary as a text::TextVocabulary, so that TextStream and
// generate_text stream llama.cpp models' text in O(1) work per token instead
// of detokenizing the whole sequence again for every token. Needs llama.h
// (the specdec::llama_cpp target).
//
// Each token's text is llama_token_to_piece(vocab, id, ..., lstrip = 0,
// special = false), read once at construction: control tokens give nothing,
// byte tokens their byte. The streamed text is what llama.cpp's own tools
// print token by token. It equals llama_detokenize(prompt + generated) minus
// llama_detokenize(prompt), except that llama_detokenize also removes the
// space before ? ! . , and some contractions ('s, 't, ...) in vocabularies
// that ask for that clean-up (tokenizers with GPT-2's rules). llama_detokenize
// strips a leading space only from the very first token of the sequence it
// is given, never after a BOS, and a generation is never a sequence's first
// token: so add_space_prefix() is false.
#include <cstddef>
#include <string>
#include <vector>

#include <llama.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec::text {

class LlamaCppVocabulary {
public:
    // Throws specdec::Error for a null vocabulary or a failing llama_token_to_piece.
    explicit LlamaCppVocabulary(const llama_vocab* vocab) {
        if (vocab == nullptr) throw Error("LlamaCppVocabulary: no vocabulary (null llama_vocab)");
        const llama_token size = llama_vocab_n_tokens(vocab);
        texts_.resize(static_cast<std::size_t>(size));
        std::vector<char> buffer(64);
        for (llama_token token = 0; token < size; ++token) {
            std::int32_t length = llama_token_to_piece(vocab, token, buffer.data(),
                                                       static_cast<std::int32_t>(buffer.size()), 0, false);
            if (length < 0) {
                buffer.resize(static_cast<std::size_t>(-length));
                length = llama_token_to_piece(vocab, token, buffer.data(), static_cast<std::int32_t>(buffer.size()), 0,
                                              false);
            }
            if (length < 0) throw Error("LlamaCppVocabulary: llama_token_to_piece failed for token " + std::to_string(token));
            texts_[static_cast<std::size_t>(token)].assign(buffer.data(), static_cast<std::size_t>(length));
        }
        const llama_token bos = llama_vocab_bos(vocab);
        bos_ = bos == LLAMA_TOKEN_NULL ? -1 : static_cast<Token>(bos);
    }

    [[nodiscard]] std::size_t vocab_size() const { return texts_.size(); }
    [[nodiscard]] const std::string& token_text(Token token) const {
        if (token < 0 || static_cast<std::size_t>(token) >= texts_.size()) {
            throw Error("token id " + std::to_string(token) + " is out of range (vocabulary of " +
                        std::to_string(texts_.size()) + " tokens)");
        }
        return texts_[static_cast<std::size_t>(token)];
    }
    [[nodiscard]] Token bos() const { return bos_; }
    [[nodiscard]] bool add_space_prefix() const { return false; }

private:
    std::vector<std::string> texts_;
    Token bos_ = -1;
};

}  // namespace specdec::text
