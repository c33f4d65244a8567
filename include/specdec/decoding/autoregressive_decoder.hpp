#pragma once
// Plain token-by-token decoding with the same options, session API, sampling
// code and statistics as SpeculativeDecoder: the baseline every speedup is
// measured against.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

// Construction, prefill(), generate() and reset() are DecoderSession's.
template <CausalLM Target>
class AutoregressiveDecoder : public detail::DecoderSession<AutoregressiveDecoder<Target>, Target> {
    using Session = detail::DecoderSession<AutoregressiveDecoder, Target>;
    using Session::feed_, Session::options_, Session::sequence_, Session::target_;

public:
    explicit AutoregressiveDecoder(Target& target, DecodingOptions options = {}) : Session(target, std::move(options)) {}

    // One target pass over the pending token; samples and commits one token.
    // Returns stop = context_full (and no token) when the cache has no room,
    // stop_token / callback as SpeculativeDecoder::step does.
    // After the call: the target's cache holds sequence()[0 .. size - 1).
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        detail::StepRecord step = this->begin_step(max_tokens);
        if (step.stopped()) return std::move(step.result);
        GenerationStats& stats = step.stats();
        this->feed_pass(step, {});
        const LogitsView logits = detail::timed(stats.target_seconds, [&] { return target_.forward(feed_); });
        LogitsView processed;
        const AcceptanceResult verdict = this->sample_plain(step, logits, processed);
        this->commit(step, std::span<const Token>{}, verdict, on_token, logits, processed);
        return this->finish_step(step);
    }
};

}  // namespace specdec
