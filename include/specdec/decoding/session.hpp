#pragma once
// What the decoders share: the committed token sequence of a session,
// generate() built on prefill() + step(), the prefill of a target and a
// drafter, and the check that a draft model shares the target's vocabulary.
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/kv_sync.hpp"

namespace specdec::detail {

template <class D>
concept HasVocabSize = requires(const D& d) {
    { d.vocab_size() } -> std::convertible_to<std::size_t>;
};

// A draft that numbers its tokens (a draft model) must number them as the
// target does; a model-free drafter (prompt lookup) proposes the target's own ids.
template <class Draft, class Target>
void check_shared_vocabulary(const Draft& draft, const Target& target) {
    if constexpr (HasVocabSize<Draft>) {
        if (draft.vocab_size() != target.vocab_size()) {
            throw Error("vocabulary mismatch: the draft has " + std::to_string(draft.vocab_size()) +
                        " tokens, the target has " + std::to_string(target.vocab_size()) +
                        "; draft and target must share one tokenizer");
        }
    }
}

// Decoder provides
//   GenerationStats prefill(std::span<const Token> prompt);
//   StepResult step(std::size_t max_tokens, OnToken& on_token);
template <class Decoder>
class DecoderSession {
public:
    [[nodiscard]] const DecodingOptions& options() const { return options_; }

    // The committed sequence: the last prompt given to prefill()/generate() and
    // every token emitted since.
    [[nodiscard]] std::span<const Token> sequence() const { return sequence_; }

    // prefill(prompt), then step() until options().max_new_tokens tokens were
    // emitted, a stop token was emitted (it is included), on_token returned
    // false, or the target's context is full. on_token(Token) is called for each
    // token as it is committed; it returns void, or bool where false stops.
    //
    // KV caches: both models keep the longest common prefix of the new prompt
    // and the previous sequence, and only the rest of the prompt is computed; a
    // chat that sends the whole conversation each turn runs each token once.
    // After the call the target's cache holds sequence()[0 .. size - 1): the
    // last emitted token is pending and is fed by the next pass. If an exception
    // escapes (bad prompt, model error), the caches are consistent with the
    // models' cached_tokens() but may hold less than before; the next call
    // recomputes what is missing.
    template <class OnToken = IgnoreTokens>
    GenerationResult generate(std::span<const Token> prompt, OnToken&& on_token = {}) {
        const auto start = Clock::now();
        GenerationResult result;
        result.stats = self().prefill(prompt);
        const std::size_t most = options_.max_new_tokens;
        while (!add_step(result, self().step(most - result.tokens.size(), on_token), most)) {
        }
        result.stats.total_seconds = seconds_since(start);
        return result;
    }

protected:
    explicit DecoderSession(DecodingOptions options) : options_(std::move(options)) {}

    static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

    // Validates a prompt, makes it the committed sequence and runs the target
    // over it but its last token, reusing the longest common prefix already
    // in the target's cache. The returned stats count what was computed.
    template <class Model>
    GenerationStats prefill_target(KvSync<Model>& target, std::span<const Token> prompt) {
        const auto start = Clock::now();
        check_prompt(prompt, target.model().vocab_size(), target.model().context_length());
        sequence_.assign(prompt.begin(), prompt.end());
        GenerationStats stats;
        stats.prompt_tokens = prompt.size();
        const std::span<const Token> uncached = target.uncached_suffix(sequence_);
        if (uncached.size() > 1) {
            target.prefill(uncached.first(uncached.size() - 1));
            stats.prefill_tokens = stats.target_tokens = uncached.size() - 1;
        }
        stats.prefill_seconds = seconds_since(start);
        return stats;
    }

    // prefill_target, then the drafter over the committed sequence (a draft
    // model catches its cache up the same way); the stats time both.
    template <class Model, class Drafter>
    GenerationStats prefill_target_and_drafter(KvSync<Model>& target, Drafter& drafter, std::span<const Token> prompt) {
        const auto start = Clock::now();
        GenerationStats stats = prefill_target(target, prompt);
        drafter.prefill(sequence_);
        stats.prefill_seconds = seconds_since(start);
        return stats;
    }

    void check_step(std::size_t max_tokens) const {
        if (sequence_.empty()) throw Error("step() has no sequence to extend: call prefill(prompt) first");
        if (max_tokens == 0) throw Error("step(max_tokens = 0): expected at least 1 token to emit");
    }

    DecodingOptions options_;
    std::vector<Token> sequence_;

private:
    Decoder& self() { return static_cast<Decoder&>(*this); }
};

}  // namespace specdec::detail
