#pragma once
// The draw coupled sampling makes at one position (CoupledSampling in
// acceptance.hpp), from any distribution over the vocabulary: the target's p
// for the token it emits, the draft's q for the token it proposes.
//
// Two-level Gumbel-max with noise keyed by (seed, position) only: the block
// of kSampleBlock tokens with the largest log(block mass) + G_block, then the
// token of that block with the largest log p + G_token. Each level is an exact
// draw, so the token follows p. The noise does not depend on the
// distribution, so a p and a q that are close draw the same token with high
// probability, in whatever order the vocabulary lists the likely tokens (an
// inverse CDF shared by the two drifts apart over every id before a likely
// token). One Philox draw per block and per token of the chosen block.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "specdec/sampling/row_kernels.hpp"

namespace specdec {

namespace detail {

// A standard Gumbel variable from the keyed uniform; u = 0 gives -inf.
[[nodiscard]] inline double keyed_gumbel(const CounterRng& rng, std::uint64_t position, RandomPurpose purpose,
                                         std::uint32_t lane) {
    return -std::log(-std::log(rng.uniform(position, purpose, lane)));
}

// The index in [first, end) with weight(i) > 0 maximising log weight(i) +
// keyed_gumbel(lane i); `end` if none has weight.
template <class Weight>
std::size_t gumbel_argmax(std::size_t first, std::size_t end, const Weight& weight, const CounterRng& rng,
                          std::uint64_t position, RandomPurpose purpose) {
    std::size_t best = end;
    double best_score = -std::numeric_limits<double>::infinity();
    for (std::size_t i = first; i < end; ++i) {
        const double w = weight(i);
        if (!(w > 0.0)) continue;
        const double score = std::log(w) + keyed_gumbel(rng, position, purpose, static_cast<std::uint32_t>(i));
        if (best == end || score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

}  // namespace detail

// The coupled draw from `probabilities` at `position`. Errors as
// sample_from_distribution's.
[[nodiscard]] inline Token coupled_draw(std::span<const float> probabilities, const CounterRng& rng,
                                        std::uint64_t position) {
    const std::size_t n = probabilities.size();
    detail::check_sampling_row(probabilities);
    const std::span<double> sums = detail::block_sum_scratch(n);
    (void)detail::block_sums(probabilities, sums.data());
    const std::size_t block = detail::gumbel_argmax(
        0, sums.size(), [&](std::size_t b) { return sums[b]; }, rng, position, RandomPurpose::coupled_block);
    if (block == sums.size()) throw Error("cannot sample from a distribution with no positive mass");
    const std::size_t end = std::min(n, (block + 1) * detail::kSampleBlock);
    const std::size_t token = detail::gumbel_argmax(
        block * detail::kSampleBlock, end, [&](std::size_t i) { return static_cast<double>(probabilities[i]); }, rng, position,
        RandomPurpose::coupled_token);
    return static_cast<Token>(token);
}

}  // namespace specdec
