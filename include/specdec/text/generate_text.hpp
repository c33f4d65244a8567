#pragma once
// Text generation over any decoder of the library (SpeculativeDecoder,
// AutoregressiveDecoder, TreeDecoder, ...), through its public generate():
// each committed token goes through a TextStream, whose verdict is the
// decoder's on_token result. A decoder emits the tokens of a step one at a
// time and commits only those it emitted, so a stop string that completes
// inside a step's accepted drafts ends generation exactly where
// autoregressive decoding would have ended it; the drafts after it are
// never emitted or streamed.
//
//   specdec::SpeculativeDecoder decoder(specdec::target(big), specdec::draft(small), options);
//   text::TextOptions text_options{.stop_strings = {"\nUser:"},
//                                  .end_of_generation = tokenizer.end_of_generation()};
//   text::TextResult result = text::generate_text(decoder, tokenizer, prompt, text_options,
//       [](const text::TextPiece& piece) { std::fwrite(piece.text.data(), 1, piece.text.size(), stdout); });
//
// After a stop string or an end-of-generation token the decoder is rolled
// back to prompt + result.tokens (a prefill of that prefix: its caches are
// truncated, no model pass runs), so that decoder.sequence() is the
// conversation so far and the next generate() from a longer prompt reuses it.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/types.hpp"
#include "specdec/decoding/generation_result.hpp"
#include "specdec/text/text_stream.hpp"
#include "specdec/text/vocabulary.hpp"

namespace specdec::text {

enum class TextStopReason {
    max_new_tokens,     // the decoder's options().max_new_tokens
    stop_string,        // TextOptions::stop_strings[TextResult::stop_string]
    end_of_generation,  // a token of TextOptions::end_of_generation
    stop_token,         // a token of the decoder's own DecodingOptions::stop_tokens (it is in the text)
    context_full,       // the target's context has no room left
    callback,           // on_piece returned false
};

[[nodiscard]] constexpr std::string_view to_string(TextStopReason reason) {
    switch (reason) {
        case TextStopReason::max_new_tokens: return "max_new_tokens";
        case TextStopReason::stop_string: return "stop_string";
        case TextStopReason::end_of_generation: return "end_of_generation";
        case TextStopReason::stop_token: return "stop_token";
        case TextStopReason::context_full: return "context_full";
        case TextStopReason::callback: return "callback";
    }
    return "unknown";
}

struct TextResult {
    std::string text;
    std::vector<Token> tokens;  // see TextStream: the tokens whose text starts in `text`
    TextStopReason stop_reason = TextStopReason::max_new_tokens;
    std::optional<std::size_t> stop_string{};  // which stop string, for stop_reason == stop_string
    // What the decoder generated: its tokens run on to the one that
    // completed the stop string (or the end-of-generation token).
    GenerationResult generation{};
};

// Generates from `prompt` with `decoder` until its own limits or a stop of
// `options`; on_piece(const TextPiece&) streams the text (see TextStream).
// Throws what decoder.generate() throws, and specdec::Error for an empty
// stop string or a token outside the vocabulary.
template <class Decoder, TextVocabulary Vocabulary, class OnPiece = IgnorePieces>
TextResult generate_text(Decoder& decoder, const Vocabulary& vocabulary, std::span<const Token> prompt,
                         TextOptions options, OnPiece&& on_piece = {}) {
    TextStream<Vocabulary> stream(vocabulary, std::move(options), prompt);
    TextResult result;
    result.generation = decoder.generate(prompt, [&](Token token) { return stream.push(token, on_piece); });
    stream.finish(on_piece);
    result.text = stream.text();
    result.tokens = stream.tokens();
    result.stop_string = stream.stop_string_index();
    switch (stream.end()) {
        case TextEnd::stop_string: result.stop_reason = TextStopReason::stop_string; break;
        case TextEnd::end_of_generation: result.stop_reason = TextStopReason::end_of_generation; break;
        case TextEnd::callback: result.stop_reason = TextStopReason::callback; break;
        case TextEnd::running:
        case TextEnd::finished:
            switch (result.generation.stop_reason) {
                case StopReason::stop_token: result.stop_reason = TextStopReason::stop_token; break;
                case StopReason::context_full: result.stop_reason = TextStopReason::context_full; break;
                case StopReason::callback: result.stop_reason = TextStopReason::callback; break;
                case StopReason::max_new_tokens: result.stop_reason = TextStopReason::max_new_tokens; break;
            }
            break;
    }
    if (result.tokens.size() != result.generation.tokens.size()) {
        std::vector<Token> kept(prompt.begin(), prompt.end());
        kept.insert(kept.end(), result.tokens.begin(), result.tokens.end());
        (void)decoder.prefill(kept);
    }
    return result;
}

}  // namespace specdec::text
