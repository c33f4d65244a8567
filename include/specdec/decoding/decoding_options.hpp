#pragma once
// The options every decoder takes, and their validation. What a generation
// returns is in generation_result.hpp; how a step emits and times its tokens
// is in step_record.hpp.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

struct DecodingOptions {
    std::size_t draft_tokens = 4;      // k: tokens proposed per target pass (the most, with a length policy)
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

}  // namespace specdec
