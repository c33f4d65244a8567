#pragma once
// One decoding step's bookkeeping, shared by every decoder: the clock that
// times its phases, the record it fills (StepRecord), and the emission of its
// tokens to the caller's callback (emit_tokens), which decides how many of
// them are committed.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/types.hpp"
#include "specdec/decoding/generation_result.hpp"

namespace specdec::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `phase` and stores its duration in `seconds`; returns its value.
template <class Phase>
auto timed(double& seconds, Phase&& phase) {
    const auto start = Clock::now();
    auto value = phase();
    seconds = seconds_since(start);
    return value;
}

struct IgnoreTokens {
    void operator()(Token) const {}
};

// Streams `tokens` to the callback one at a time and appends them to
// `sequence` and `emitted`, stopping after a stop token or when the callback
// returns false. Callbacks may return void, or bool (false = stop). Returns the
// number of tokens emitted; `stop` is set when generation must end.
template <class OnToken>
std::size_t emit_tokens(std::span<const Token> tokens, const std::vector<Token>& stop_tokens, OnToken& on_token,
                        std::vector<Token>& sequence, std::vector<Token>& emitted, std::optional<StopReason>& stop) {
    std::size_t count = 0;
    for (const Token token : tokens) {
        sequence.push_back(token);
        emitted.push_back(token);
        ++count;
        bool keep_going = true;
        if constexpr (std::is_same_v<std::invoke_result_t<OnToken&, Token>, bool>) {
            keep_going = on_token(token);
        } else {
            on_token(token);
        }
        if (std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) {
            stop = StopReason::stop_token;
            break;
        }
        if (!keep_going) {
            stop = StopReason::callback;
            break;
        }
    }
    return count;
}

// What one step has decided so far. DecoderSession::begin_step opens it,
// the phases fill result.stats, DecoderSession::finish_step closes it.
struct StepRecord {
    Clock::time_point start = Clock::now();
    StepResult result;
    std::size_t committed = 0;  // the sequence's length when the step began: the first draft's position
    std::size_t room = 0;       // positions free in the target's cache (0 when result.stop is context_full)

    [[nodiscard]] GenerationStats& stats() { return result.stats; }
    [[nodiscard]] bool stopped() const { return result.stop.has_value(); }
};

}  // namespace specdec::detail
