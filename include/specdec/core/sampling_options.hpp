#pragma once
// How logits become the distribution that tokens are drawn from. The same
// options are applied to draft and target rows at every position, so the
// exactness guarantee of speculative decoding is about this *processed*
// target distribution.
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

class TokenConstraint;  // sampling/token_constraint.hpp

// The stages of the sampler chain. The first two change logits and read the
// sequence the row is conditioned on; the other four choose and weigh
// candidates.
enum class SamplerStage : unsigned char {
    logit_bias,   // logits[token] += bias for each entry of logit_bias
    penalties,    // repetition, presence and frequency penalties over the last penalty_last_n tokens
    top_k,        // keep the top_k highest logits
    top_p,        // keep the shortest ranked prefix whose mass reaches top_p
    min_p,        // keep tokens with probability >= min_p * (the largest probability)
    temperature,  // divide the logits by the temperature
};

// The order the stages run in: each stage appears exactly once, and the two
// logit stages come before the four candidate stages.
using SamplerChain = std::array<SamplerStage, 6>;

// llama.cpp's order (common_sampler: logit bias, then penalties, top-k, top-p,
// min-p, temperature): the filters measure mass at temperature 1 and the
// temperature reshapes what they kept.
inline constexpr SamplerChain kLlamaCppChain{SamplerStage::logit_bias, SamplerStage::penalties, SamplerStage::top_k,
                                             SamplerStage::top_p,      SamplerStage::min_p,     SamplerStage::temperature};
// Hugging Face's (and vLLM's) order: the temperature first, so the filters
// measure mass at that temperature.
inline constexpr SamplerChain kHuggingFaceChain{SamplerStage::logit_bias, SamplerStage::penalties,
                                                SamplerStage::temperature, SamplerStage::top_k,
                                                SamplerStage::top_p,      SamplerStage::min_p};

[[nodiscard]] inline const char* stage_name(SamplerStage stage) {
    switch (stage) {
        case SamplerStage::logit_bias: return "logit_bias";
        case SamplerStage::penalties: return "penalties";
        case SamplerStage::top_k: return "top_k";
        case SamplerStage::top_p: return "top_p";
        case SamplerStage::min_p: return "min_p";
        case SamplerStage::temperature: return "temperature";
    }
    return "unknown";
}

// A fixed amount added to one token's logit; -infinity bans the token.
struct LogitBias {
    Token token = 0;
    float bias = 0.0f;
};

// penalty_last_n = kWholeSequence: every token of the sequence counts.
inline constexpr std::size_t kWholeSequence = std::numeric_limits<std::size_t>::max();

// The processed distribution of one row, predicting the token at position n
// of a sequence whose tokens before n (prompt, emitted tokens and, for a row
// that scores a draft, the drafts before it) are the row's history:
//  0. constraint (if set): tokens it does not allow at the state its history
//     leads to get logit -infinity, before every stage.
//  Then the stages in `chain` order:
//  - logit_bias: logits[token] += bias.
//  - penalties: over the last penalty_last_n tokens of the history (prompt
//    included; kWholeSequence = all of it), each token seen c > 0 times gets
//    logit / repeat_penalty if the logit is > 0, else logit * repeat_penalty
//    (llama.cpp and Hugging Face), then - c * frequency_penalty - presence_penalty.
//  - Candidates are ranked by decreasing logit, ties by increasing token id.
//    Probabilities below are softmax over the current candidates of the
//    logits scaled by 1 / T if the temperature stage already ran, else as they are.
//  - top_k: only the top_k first-ranked candidates remain.
//  - top_p: of the remaining candidates, the shortest ranked prefix whose
//    mass, renormalised over them, reaches top_p (cumulative >= top_p).
//  - min_p: the candidates with probability >= min_p * (the largest) remain.
//  - temperature: logits are divided by T.
//  Finally p = softmax over the remaining candidates (at temperature T).
// Temperature 0 is greedy decoding: a point mass on the argmax of the logits
// after the constraint and the logit stages, ties to the lowest id. Any finite
// T > 0 is valid: as T -> 0 (even when 1 / T overflows) p tends to the uniform
// distribution over the remaining tokens of maximal logit.
struct SamplingOptions {
    double temperature = 1.0;  // 0 means greedy (argmax, ties to the lowest id)
    std::size_t top_k = 0;     // keep the k most probable tokens; 0 (or >= vocab) = off
    double top_p = 1.0;        // keep the smallest set whose mass reaches top_p; 1 = off
    double min_p = 0.0;        // keep tokens with probability >= min_p * max probability; 0 = off
    SamplerChain chain = kLlamaCppChain;
    double repeat_penalty = 1.0;                 // > 0; 1 = off
    double presence_penalty = 0.0;               // subtracted once from every token in the window; 0 = off
    double frequency_penalty = 0.0;              // subtracted per occurrence in the window; 0 = off
    std::size_t penalty_last_n = 64;             // the window; 0 = none (penalties off)
    std::vector<LogitBias> logit_bias{};         // applied in order (a token may appear twice)
    TokenConstraint* constraint = nullptr;       // not owned; must outlive the decoder; one per sequence

    [[nodiscard]] bool greedy() const { return temperature == 0.0; }
    [[nodiscard]] bool penalises() const {
        return penalty_last_n > 0 && (repeat_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0);
    }
    // Whether any stage reads more than the row itself (the history, a bias
    // list or a constraint): such rows are adjusted before the candidate stages.
    [[nodiscard]] bool adjusts_logits() const { return penalises() || !logit_bias.empty() || constraint != nullptr; }
};

namespace detail {

[[noreturn]] inline void fail_option(const char* name, double value, const char* expected) {
    std::ostringstream message;
    message << "invalid sampling option " << name << " = " << value << ": expected " << expected;
    throw Error(message.str());
}

inline void validate_chain(const SamplerChain& chain) {
    std::array<int, 6> seen{};
    std::size_t candidate_stages = 0;
    for (const SamplerStage stage : chain) {
        const auto index = static_cast<std::size_t>(stage);
        if (index >= seen.size()) throw Error("invalid sampling option chain: a stage outside SamplerStage");
        if (++seen[index] > 1)
            throw Error(std::string("invalid sampling option chain: stage ") + stage_name(stage) +
                        " appears twice; expected each stage once");
        const bool logit_stage = stage == SamplerStage::logit_bias || stage == SamplerStage::penalties;
        if (logit_stage && candidate_stages > 0)
            throw Error(std::string("invalid sampling option chain: ") + stage_name(stage) +
                        " comes after a candidate stage; expected logit_bias and penalties before top_k, top_p, "
                        "min_p and temperature");
        if (!logit_stage) ++candidate_stages;
    }
}

}  // namespace detail

// Throws specdec::Error naming the first nonsensical option.
inline void validate(const SamplingOptions& options) {
    using detail::fail_option;
    if (!std::isfinite(options.temperature) || options.temperature < 0.0)
        fail_option("temperature", options.temperature, "a finite value >= 0 (0 = greedy)");
    if (!(options.top_p > 0.0 && options.top_p <= 1.0)) fail_option("top_p", options.top_p, "a value in (0, 1]");
    if (!(options.min_p >= 0.0 && options.min_p <= 1.0)) fail_option("min_p", options.min_p, "a value in [0, 1]");
    if (!(std::isfinite(options.repeat_penalty) && options.repeat_penalty > 0.0))
        fail_option("repeat_penalty", options.repeat_penalty, "a finite value > 0 (1 = off; below 1 favours repeats)");
    if (!std::isfinite(options.presence_penalty))
        fail_option("presence_penalty", options.presence_penalty, "a finite value (0 = off)");
    if (!std::isfinite(options.frequency_penalty))
        fail_option("frequency_penalty", options.frequency_penalty, "a finite value (0 = off)");
    for (std::size_t i = 0; i < options.logit_bias.size(); ++i) {
        const LogitBias& entry = options.logit_bias[i];
        if (entry.token < 0) {
            std::ostringstream message;
            message << "invalid sampling option logit_bias[" << i << "]: token id " << entry.token << " is negative";
            throw Error(message.str());
        }
        if (std::isnan(entry.bias) || entry.bias == std::numeric_limits<float>::infinity()) {
            std::ostringstream message;
            message << "invalid sampling option logit_bias[" << i << "] = " << entry.bias << " for token "
                    << entry.token << ": expected a finite bias or -infinity (a ban)";
            throw Error(message.str());
        }
    }
    detail::validate_chain(options.chain);
}

// validate(options), and every logit_bias token inside a vocabulary of `vocab`.
inline void validate(const SamplingOptions& options, std::size_t vocab) {
    validate(options);
    for (std::size_t i = 0; i < options.logit_bias.size(); ++i) {
        const Token token = options.logit_bias[i].token;
        if (static_cast<std::size_t>(token) >= vocab) {
            std::ostringstream message;
            message << "invalid sampling option logit_bias[" << i << "]: token id " << token
                    << " is outside the vocabulary [0, " << vocab << ")";
            throw Error(message.str());
        }
    }
}

}  // namespace specdec
