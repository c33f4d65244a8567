#pragma once
// Options, statistics and results shared by the speculative and the
// autoregressive decoder, so that a benchmark compares like with like.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <type_traits>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

struct DecodingOptions {
    std::size_t draft_tokens = 4;      // k: tokens proposed per target pass (speculative only)
    SamplingOptions sampling{};        // applied identically to draft and target
    std::uint64_t seed = 0;            // all randomness derives from it
    std::size_t max_new_tokens = 128;  // generation stops after this many tokens
    std::vector<Token> stop_tokens{};  // generation stops after emitting one of these (it is included)
};

inline void validate(const DecodingOptions& options, bool speculative) {
    validate(options.sampling);
    if (speculative && options.draft_tokens == 0)
        throw Error("invalid decoding option draft_tokens = 0: expected at least 1 draft token per step");
    if (options.max_new_tokens == 0)
        throw Error("invalid decoding option max_new_tokens = 0: expected at least 1");
}

enum class StopReason {
    max_new_tokens,  // generated options.max_new_tokens tokens
    stop_token,      // emitted one of options.stop_tokens
    context_full,    // the target's KV cache has no room for another position
    callback,        // the on_token callback returned false
};

[[nodiscard]] inline std::string_view to_string(StopReason reason) {
    switch (reason) {
        case StopReason::max_new_tokens: return "max_new_tokens";
        case StopReason::stop_token: return "stop_token";
        case StopReason::context_full: return "context_full";
        case StopReason::callback: return "callback";
    }
    return "unknown";
}

struct GenerationStats {
    std::size_t prompt_tokens = 0;
    std::size_t generated_tokens = 0;
    std::size_t target_forward_passes = 0;
    std::size_t draft_forward_passes = 0;
    std::size_t draft_tokens_proposed = 0;
    std::size_t draft_tokens_accepted = 0;
    // Index i: how often a draft was proposed / accepted at draft position i of a step.
    std::vector<std::size_t> proposed_at_position;
    std::vector<std::size_t> accepted_at_position;
    double draft_seconds = 0.0;       // inside the drafter
    double target_seconds = 0.0;      // inside target.forward (the verification pass)
    double acceptance_seconds = 0.0;  // logits processing and the acceptance rule
    double total_seconds = 0.0;       // the whole generate() call

    // Fraction of proposed draft tokens that were accepted.
    [[nodiscard]] double acceptance_rate() const {
        return draft_tokens_proposed == 0 ? 0.0
                                          : static_cast<double>(draft_tokens_accepted) / draft_tokens_proposed;
    }
    // Emitted tokens per target forward pass (1 for autoregressive decoding).
    [[nodiscard]] double mean_tokens_per_target_pass() const {
        return target_forward_passes == 0 ? 0.0
                                          : static_cast<double>(generated_tokens) / target_forward_passes;
    }
    [[nodiscard]] double tokens_per_second() const {
        return total_seconds <= 0.0 ? 0.0 : static_cast<double>(generated_tokens) / total_seconds;
    }
};

struct GenerationResult {
    std::vector<Token> tokens;  // the generated tokens (prompt excluded)
    GenerationStats stats;
    StopReason stop_reason = StopReason::max_new_tokens;
};

namespace detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

inline void check_prompt(std::span<const Token> prompt, std::size_t vocab, std::size_t context_length) {
    if (prompt.empty()) throw Error("the prompt is empty: expected at least one token (e.g. BOS)");
    if (prompt.size() > context_length) {
        std::ostringstream message;
        message << "the prompt has " << prompt.size() << " tokens but the target's context holds only "
                << context_length;
        throw Error(message.str());
    }
    for (std::size_t i = 0; i < prompt.size(); ++i) {
        if (prompt[i] < 0 || static_cast<std::size_t>(prompt[i]) >= vocab) {
            std::ostringstream message;
            message << "prompt token " << i << " has id " << prompt[i] << ", outside the vocabulary [0, " << vocab
                    << ")";
            throw Error(message.str());
        }
    }
}

// Appends emitted tokens, streams them to the callback and decides when to
// stop. Callbacks may return void, or bool (false = stop).
template <class OnToken>
class TokenSink {
public:
    TokenSink(const DecodingOptions& options, OnToken& on_token, GenerationResult& result)
        : options_(options), on_token_(on_token), result_(result) {}

    // Returns false once generation must stop; the reason is in result.stop_reason.
    bool emit(Token token) {
        result_.tokens.push_back(token);
        bool keep_going = true;
        if constexpr (std::is_same_v<std::invoke_result_t<OnToken&, Token>, bool>) {
            keep_going = on_token_(token);
        } else {
            on_token_(token);
        }
        for (const Token stop : options_.stop_tokens) {
            if (token == stop) return finish(StopReason::stop_token);
        }
        if (!keep_going) return finish(StopReason::callback);
        if (result_.tokens.size() >= options_.max_new_tokens) return finish(StopReason::max_new_tokens);
        return true;
    }

    bool finish(StopReason reason) {
        result_.stop_reason = reason;
        return false;
    }

    [[nodiscard]] std::size_t remaining() const { return options_.max_new_tokens - result_.tokens.size(); }

private:
    const DecodingOptions& options_;
    OnToken& on_token_;
    GenerationResult& result_;
};

struct IgnoreTokens {
    void operator()(Token) const {}
};

}  // namespace detail
}  // namespace specdec
