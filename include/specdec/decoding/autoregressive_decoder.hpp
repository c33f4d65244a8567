#pragma once
// Plain token-by-token decoding with the same options, session API, sampling
// code and statistics as SpeculativeDecoder: the baseline every speedup is
// measured against.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

template <CausalLM Target>
class AutoregressiveDecoder : public detail::DecoderSession<AutoregressiveDecoder<Target>> {
    using Session = detail::DecoderSession<AutoregressiveDecoder<Target>>;

public:
    // Throws specdec::Error for invalid options. The model must outlive the decoder.
    explicit AutoregressiveDecoder(Target& target, DecodingOptions options = {})
        : Session(std::move(options)), target_(target) {
        validate(this->options_, /*speculative=*/false);
    }

    // As SpeculativeDecoder::prefill: the target keeps the longest common
    // prefix of its cache and the prompt and computes the rest but the last
    // token. After the call: the target's cache holds prompt[0 .. n - 1).
    GenerationStats prefill(std::span<const Token> prompt) { return this->prefill_target(target_, prompt); }

    // One target pass over the pending token; samples and commits one token.
    // Returns stop = context_full (and no token) when the cache has no room,
    // stop_token / callback as SpeculativeDecoder::step does.
    // After the call: the target's cache holds sequence()[0 .. size - 1).
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        this->check_step(max_tokens);
        const auto start = detail::Clock::now();
        StepResult result;
        std::vector<Token>& history = this->sequence_;
        if (history.size() > target_.model().context_length()) {
            result.stop = StopReason::context_full;
            return result;
        }
        auto forward_start = detail::Clock::now();
        const std::span<const Token> feed = target_.uncached_suffix(history);
        result.stats.target_tokens = feed.size();
        const LogitsView logits = target_.forward(feed);
        result.stats.target_seconds = detail::seconds_since(forward_start);
        result.stats.target_forward_passes = 1;

        auto sample_start = detail::Clock::now();
        const CounterRng rng{this->options_.seed};
        const Token token =
            detail::sample_next_on_host(logits.last_row(), this->options_.sampling, rng, history.size(), scratch_);
        result.stats.acceptance_seconds = detail::seconds_since(sample_start);

        result.stats.generated_tokens = detail::emit_tokens(std::span<const Token>(&token, 1),
                                                            this->options_.stop_tokens, on_token, history,
                                                            result.tokens, result.stop);
        result.stats.total_seconds = detail::seconds_since(start);
        return result;
    }

    // Empties the KV cache and the committed sequence.
    void reset() {
        target_.reset();
        this->sequence_.clear();
    }

private:
    detail::KvSync<Target> target_;
    std::vector<float> scratch_;
};

}  // namespace specdec
