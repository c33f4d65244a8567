#pragma once
// The options every decoder takes, and their validation. What a generation
// returns is in generation_result.hpp; how a step emits and times its tokens
// is in step_record.hpp.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/logprobs.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

// Forced drafts (forced_drafts.hpp): where sampling.constraint allows exactly
// one token at a draft position, a model drafter proposes that token with
// q = 1 and spends no draft pass on it (the target's masked p is 1 there too,
// so it is always accepted). Forced tokens do not count against draft_tokens;
// at most max_tokens of them lengthen a step beyond it, within the target's
// free context and the tokens the step may emit.
struct ForcedDraftOptions {
    bool enabled = true;          // off: forced tokens are drafted like any other
    std::size_t max_tokens = 32;  // the most forced tokens a step adds beyond draft_tokens
};

// Who sets each step's draft length: the decoder's length policy; always
// draft_tokens (so that a seeded run at temperature > 0 repeats bit for bit
// under an adaptive policy, whose lengths follow measured timings, with a
// rule whose tokens depend on the lengths: all but CoupledSampling); or
// nobody (plain decoding, one target pass a token). SpeculativeDecoder and
// BatchedDecoder (per request) honour all three; TreeSpeculativeDecoder takes
// policy and off.
enum class Drafting : unsigned char { policy, fixed, off };

struct DecodingOptions {
    // k: with the default AutoLength, the most drafts a step proposes; with
    // FixedLength, every step's count. 4: the best fixed k measured on CPU
    // pairs is 3-4 (so a fixed length keeps a good default), and a cap of 8
    // made AutoLength no faster there beyond the noise (docs/usage.md); GPU
    // targets pay for longer drafts (up to 8).
    std::size_t draft_tokens = 4;
    SamplingOptions sampling{};        // applied identically to draft and target
    // All randomness derives from it: a request's tokens depend only on its
    // seed, prompt and options. Unset: a fresh seed per generation (reported
    // in GenerationResult::seed), so unseeded requests never share a stream.
    std::optional<std::uint64_t> seed{};
    std::size_t max_new_tokens = 128;  // generation stops after this many tokens
    std::vector<Token> stop_tokens{};  // generation stops after emitting one of these (it is included)
    LogprobOptions logprobs{};
    ForcedDraftOptions forced_drafts{};  // used only when sampling.constraint is set
    Drafting drafting = Drafting::policy;
};

// A seed for a generation that was given none: from the system's entropy
// source, mixed with a process-wide counter so that two generations started
// together still differ.
[[nodiscard]] inline std::uint64_t fresh_seed() {
    static std::atomic<std::uint64_t> counter{0};
    thread_local std::random_device entropy;
    std::uint64_t z = (static_cast<std::uint64_t>(entropy()) << 32 ^ entropy()) +
                      0x9E3779B97F4A7C15ull * (counter.fetch_add(1, std::memory_order_relaxed) + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

inline void validate(const DecodingOptions& options, bool speculative) {
    validate(options.sampling);
    if (speculative && options.draft_tokens == 0)
        throw Error("invalid decoding option draft_tokens = 0: expected at least 1 draft token per step");
    if (options.max_new_tokens == 0)
        throw Error("invalid decoding option max_new_tokens = 0: expected at least 1");
    if (options.drafting != Drafting::policy && options.drafting != Drafting::fixed && options.drafting != Drafting::off)
        throw Error("invalid decoding option drafting = " + std::to_string(static_cast<int>(options.drafting)) +
                    ": expected Drafting::policy, fixed or off");
}

}  // namespace specdec
