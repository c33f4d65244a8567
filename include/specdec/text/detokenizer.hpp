#pragma once
// Incremental detokenization for streaming: push() one token at a time and
// get back the text that is now complete. Each push costs O(the token's text
// + 3 bytes), whatever the length of the stream, and touches nothing of the
// earlier text.
//
// Contract, for any token sequence s:
//   concat(push(s[0]), ..., push(s[n-1]), flush())  ==  decode(s)
// where decode is the vocabulary's own full detokenization (for
// specdec::Tokenizer: Tokenizer::decode): token texts concatenated, and with
// add_space_prefix() one leading space dropped from the first non-empty text
// after a BOS (control tokens in between keep that rule pending).
// A UTF-8 character split over several tokens (byte-fallback tokens <0xNN>,
// byte-level BPE pieces) is held back until its last byte arrives, so no
// piece ends inside a character. Bytes that can never become valid UTF-8
// are passed through as they are, as decode() does.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "specdec/core/types.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/text/vocabulary.hpp"

namespace specdec::text {

template <TextVocabulary Vocabulary>
class Detokenizer {
public:
    // The vocabulary must outlive the detokenizer.
    explicit Detokenizer(const Vocabulary& vocabulary) : vocabulary_(&vocabulary) {}

    // The text that became complete with `token`; the view stays valid until
    // the next call. Throws specdec::Error for an id outside the vocabulary.
    std::string_view push(Token token) {
        out_.clear();
        if (token >= 0 && token == vocabulary_->bos()) {
            after_bos_ = static_cast<bool>(vocabulary_->add_space_prefix());
            return out_;
        }
        std::string_view text = vocabulary_->token_text(token);
        if (text.empty()) return out_;
        if (after_bos_ && text.front() == ' ') text.remove_prefix(1);
        after_bos_ = false;
        bytes_copied_ += held_.size() + text.size();
        out_.append(held_);
        out_.append(text);
        const std::size_t held = detail::incomplete_utf8_suffix(out_);
        held_.assign(out_, out_.size() - held, held);
        out_.resize(out_.size() - held);
        return out_;
    }

    // Whatever is held back (an incomplete character at the end of the
    // stream); the detokenizer then starts afresh on the held bytes. The view
    // stays valid until the next call.
    std::string_view flush() {
        out_.swap(held_);
        held_.clear();
        return out_;
    }

    // Continue a stream whose earlier tokens are `context` (a prompt) without
    // printing them: only the BOS rule carries over (a prompt of just BOS makes
    // the first generated word lose its leading space, as decode() of the whole
    // sequence would). Bytes held before are dropped.
    void continue_after(std::span<const Token> context) {
        held_.clear();
        after_bos_ = false;
        for (auto it = context.rbegin(); it != context.rend(); ++it) {
            if (*it >= 0 && *it == vocabulary_->bos()) {
                after_bos_ = static_cast<bool>(vocabulary_->add_space_prefix());
                break;
            }
            if (!vocabulary_->token_text(*it).empty()) break;
        }
    }

    // Back to the state of a new detokenizer.
    void reset() {
        held_.clear();
        out_.clear();
        after_bos_ = false;
    }

    // Bytes held back: at most 3 (the start of a 4-byte character).
    [[nodiscard]] std::size_t held_bytes() const { return held_.size(); }
    // Work counter: bytes copied by all push() calls so far. Each push copies
    // the held bytes (< 4) and the token's text, nothing else.
    [[nodiscard]] std::size_t bytes_copied() const { return bytes_copied_; }

private:
    const Vocabulary* vocabulary_;
    std::string held_;
    std::string out_;
    bool after_bos_ = false;
    std::size_t bytes_copied_ = 0;
};

}  // namespace specdec::text
