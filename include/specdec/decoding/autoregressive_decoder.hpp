#pragma once
// Plain token-by-token decoding with the same options, sampling code and
// statistics as SpeculativeDecoder: the baseline every speedup is measured against.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

template <CausalLM Target>
class AutoregressiveDecoder {
public:
    explicit AutoregressiveDecoder(Target& target, DecodingOptions options = {})
        : target_(target), options_(std::move(options)) {
        validate(options_, /*speculative=*/false);
    }

    [[nodiscard]] const DecodingOptions& options() const { return options_; }

    template <class OnToken = detail::IgnoreTokens>
    GenerationResult generate(std::span<const Token> prompt, OnToken&& on_token = {}) {
        const auto start = detail::Clock::now();
        Target& model = target_.model();
        detail::check_prompt(prompt, model.vocab_size(), model.context_length());
        GenerationResult result;
        result.stats.prompt_tokens = prompt.size();
        detail::TokenSink sink(options_, on_token, result);
        const CounterRng rng{options_.seed};
        std::vector<Token> history(prompt.begin(), prompt.end());
        target_.reset();

        while (true) {
            if (history.size() > model.context_length()) {
                sink.finish(StopReason::context_full);
                break;
            }
            auto forward_start = detail::Clock::now();
            const LogitsView logits = target_.forward(target_.uncached_suffix(history));
            result.stats.target_seconds += detail::seconds_since(forward_start);
            ++result.stats.target_forward_passes;

            auto sample_start = detail::Clock::now();
            const Token token = detail::sample_next_on_host(logits.last_row(), options_.sampling, rng, history.size(), scratch_);
            result.stats.acceptance_seconds += detail::seconds_since(sample_start);

            history.push_back(token);
            if (!sink.emit(token)) break;
        }
        result.stats.generated_tokens = result.tokens.size();
        result.stats.total_seconds = detail::seconds_since(start);
        return result;
    }

private:
    detail::KvSync<Target> target_;
    DecodingOptions options_;
    std::vector<float> scratch_;
};

}  // namespace specdec
