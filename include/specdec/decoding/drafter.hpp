#pragma once
// The drafting side of speculative decoding. A Drafter proposes up to
// max_tokens continuations of the committed sequence together with the
// distributions it drew them from (or none, for point-mass drafters).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

struct DraftRequest {
    std::span<const Token> history;   // every committed token: prompt + generated so far
    std::size_t max_tokens = 0;       // propose at most this many (fewer is fine, 0 too)
    const SamplingOptions& sampling;  // the processing q must carry (same as the target's)
    const CounterRng& rng;            // draw draft i with rng.uniform(history.size() + i, draft_sample)
};

// propose() must return tokens sampled from the q it reports. For exactness the
// choice of how many tokens to propose may depend only on the drafter's own
// state and earlier drafts, never on the verifier's randomness.
// reset() is called by the decoder's reset() (it may drop any cached state).
// A drafter may also provide prefill(std::span<const Token> history), called
// by the decoder's prefill() so that a draft model can process a prompt in one
// batched pass before the first step.
template <class D>
concept Drafter = requires(D& drafter, const DraftRequest& request) {
    { drafter.propose(request) } -> std::same_as<DraftProposal>;
    { drafter.reset() };
};

}  // namespace specdec
