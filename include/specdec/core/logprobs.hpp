#pragma once
// What a caller asks of logprobs (LogprobOptions, in DecodingOptions) and what
// it gets back per emitted token (TokenLogprob, in GenerationResult). Plain
// data below both sampling/ (which computes them) and decoding/ (which
// reports them).
#include <cstddef>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec {

// Which distribution a token's logprob is read from.
enum class LogprobSource : unsigned char {
    processed,  // the distribution the token was drawn from: after the whole chain (greedy: the point mass)
    raw,        // log-softmax of the model's logits, nothing applied
};

// Logprobs of each emitted token, and of the top_n most probable tokens of
// its row, reported with the tokens (GenerationResult::logprobs). Under
// speculation they are read from the target's verification rows, which are
// the rows autoregressive decoding would have sampled from.
struct LogprobOptions {
    bool enabled = false;
    std::size_t top_n = 0;
    LogprobSource source = LogprobSource::processed;
};

// One alternative of a token's row and its logprob.
struct TopLogprob {
    Token token = 0;
    float logprob = 0.0f;
};

// An emitted token's logprob (DecodingOptions::logprobs), and its row's
// top_n tokens, most probable first (ties to the lowest id). -infinity for a
// token its row cannot produce.
struct TokenLogprob {
    Token token = 0;
    float logprob = 0.0f;
    std::vector<TopLogprob> top{};
};

}  // namespace specdec
