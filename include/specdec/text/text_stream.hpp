#pragma once
// TextStream: committed tokens in, text pieces out, with stop strings and
// end-of-generation tokens. It knows nothing of decoders: feed it every
// token a generation commits, in order (from a decoder's on_token callback,
// or from an engine's own loop), and stop generating when push() returns
// false.
//
//   text::TextStream stream(tokenizer, {.stop_strings = {"\nUser:"},
//                                       .end_of_generation = tokenizer.end_of_generation()}, prompt);
//   for (each committed token t) if (!stream.push(t, on_piece)) break;
//   stream.finish(on_piece);   // end without a stop: shows what was held back
//
// on_piece(const TextPiece&) receives the text that can no longer be part
// of a stop string, with the ids of the tokens whose text starts in it; it
// may return void, or bool (false ends the generation there). Concatenated,
// the pieces are exactly text() and tokens(); nothing at or after a stop
// string (or an end-of-generation token) is ever passed on, unless
// include_stop asks for the stop itself.
//
// Where the text ends (a stop string of TextOptions::stop_strings): text()
// stops right before the first match (StopStrings: the first to complete),
// or right after it with include_stop. tokens() are the tokens whose text
// starts before that point: the last one may run on into the stop string,
// so text() is always a prefix of the tokens' decoded text. An
// end-of-generation token ends the text where it stands; it is in tokens()
// only with include_stop.
// Work per token: O(its text + longest stop string) per stop string.
#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/text/detokenizer.hpp"
#include "specdec/text/stop_strings.hpp"
#include "specdec/text/vocabulary.hpp"

namespace specdec::text {

struct TextOptions {
    std::vector<std::string> stop_strings{};  // generation ends at the first that appears in the text
    bool include_stop = false;                // the stop string (the EOG token) is part of the result
    std::vector<Token> end_of_generation{};   // tokens that end generation (Tokenizer::end_of_generation())
};

// Text released to the caller and the tokens whose text starts in it.
struct TextPiece {
    std::string_view text;
    std::span<const Token> tokens;
};

enum class TextEnd {
    running,            // still generating
    finished,           // finish() was called: the generation ended for another reason
    stop_string,        // a stop string appeared (stop_string_index() says which)
    end_of_generation,  // an end-of-generation token was committed
    callback,           // on_piece returned false
};

struct IgnorePieces {
    void operator()(const TextPiece&) const {}
};

template <TextVocabulary Vocabulary>
class TextStream {
public:
    // `context`: the tokens before the first pushed one (the prompt), for the
    // BOS space rule only. Throws specdec::Error for an empty stop string.
    // The vocabulary must outlive the stream.
    TextStream(const Vocabulary& vocabulary, TextOptions options, std::span<const Token> context = {})
        : detokenizer_(vocabulary),
          stops_(std::move(options.stop_strings)),
          end_of_generation_(std::move(options.end_of_generation)),
          include_stop_(options.include_stop) {
        std::sort(end_of_generation_.begin(), end_of_generation_.end());
        detokenizer_.continue_after(context);
    }

    // Adds the next committed token. Returns false when generation must end
    // here (stop string, end-of-generation token, on_piece returned false).
    // Throws specdec::Error when called after the stream has ended, or for
    // an id outside the vocabulary.
    template <class OnPiece = IgnorePieces>
    bool push(Token token, OnPiece&& on_piece = {}) {
        if (end_ != TextEnd::running) throw Error("TextStream::push after the text has ended");
        if (std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), token)) {
            end_ = TextEnd::end_of_generation;
            pending_ += detokenizer_.flush();
            if (include_stop_) pending_tokens_.push_back({token, text_.size() + pending_.size()});
            release(pending_.size(), true, on_piece);
            return false;
        }
        const std::size_t offset = text_.size() + pending_.size() + detokenizer_.held_bytes();
        const std::size_t fresh_from = pending_.size();
        pending_ += detokenizer_.push(token);
        pending_tokens_.push_back({token, offset});
        if (const std::optional<StopMatch> match = stops_.find(pending_, fresh_from)) {
            end_ = TextEnd::stop_string;
            stop_index_ = match->index;
            release(include_stop_ ? match->end : match->begin, include_stop_, on_piece);
            return false;
        }
        return release(pending_.size() - stops_.held_suffix(pending_), false, on_piece);
    }

    // The generation ended for a reason of its own (length, context, the
    // decoder's stop tokens): shows everything held back. Does nothing after
    // the stream has ended.
    template <class OnPiece = IgnorePieces>
    void finish(OnPiece&& on_piece = {}) {
        if (end_ != TextEnd::running) return;
        end_ = TextEnd::finished;
        pending_ += detokenizer_.flush();
        release(pending_.size(), true, on_piece);
    }

    [[nodiscard]] const std::string& text() const { return text_; }
    [[nodiscard]] const std::vector<Token>& tokens() const { return tokens_; }
    [[nodiscard]] TextEnd end() const { return end_; }
    [[nodiscard]] bool ended() const { return end_ != TextEnd::running; }
    // The stop string that ended the text (an index into TextOptions::stop_strings).
    [[nodiscard]] std::optional<std::size_t> stop_string_index() const { return stop_index_; }
    // Bytes decoded but not yet released (a possible stop string's start).
    [[nodiscard]] std::size_t held_bytes() const { return pending_.size() + detokenizer_.held_bytes(); }

private:
    struct PendingToken {
        Token token;
        std::size_t offset;  // of its first byte in the whole text
    };

    // Releases pending_[0 .. length) and the tokens starting before its end
    // (all of them when `all_tokens`); what is left after an ended stream is
    // dropped. Returns false when on_piece asked to stop.
    template <class OnPiece>
    bool release(std::size_t length, bool all_tokens, OnPiece& on_piece) {
        const std::size_t text_before = text_.size(), tokens_before = tokens_.size();
        text_.append(pending_, 0, length);
        while (!pending_tokens_.empty() && (all_tokens || pending_tokens_.front().offset < text_.size())) {
            tokens_.push_back(pending_tokens_.front().token);
            pending_tokens_.pop_front();
        }
        pending_.erase(0, length);
        if (end_ != TextEnd::running) {
            pending_.clear();
            pending_tokens_.clear();
        }
        if (text_.size() == text_before && tokens_.size() == tokens_before) return end_ == TextEnd::running;
        const TextPiece piece{std::string_view(text_).substr(text_before),
                              std::span<const Token>(tokens_).subspan(tokens_before)};
        if constexpr (std::is_same_v<std::invoke_result_t<OnPiece&, const TextPiece&>, bool>) {
            if (!on_piece(piece)) {
                if (end_ == TextEnd::running) {
                    end_ = TextEnd::callback;
                    pending_.clear();
                    pending_tokens_.clear();
                }
                return false;
            }
        } else {
            on_piece(piece);
        }
        return end_ == TextEnd::running;
    }

    Detokenizer<Vocabulary> detokenizer_;
    StopStrings stops_;
    std::vector<Token> end_of_generation_;
    bool include_stop_ = false;
    std::string text_;     // released
    std::string pending_;  // decoded, not yet released
    std::deque<PendingToken> pending_tokens_;
    std::vector<Token> tokens_;
    TextEnd end_ = TextEnd::running;
    std::optional<std::size_t> stop_index_;
};

}  // namespace specdec::text
