#pragma once
// Counter-based randomness: every random number is a pure function of
// (seed, sequence position, purpose), so a run is reproducible, independent of
// call order, and the CUDA backend can draw the very same numbers on the device.
//
// The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11). Key = the 64-bit seed; counter = (position, purpose).
#include <array>
#include <cstdint>

#if defined(__CUDACC__)
#define SPECDEC_HOST_DEVICE __host__ __device__
#else
#define SPECDEC_HOST_DEVICE
#endif

namespace specdec {

// What a random number is used for. Distinct purposes at the same position are
// independent streams; the acceptance proof needs the acceptance test's uniform
// to be independent of the draft that it tests.
enum class RandomPurpose : std::uint32_t {
    draft_sample = 1,   // drafter draws the token at this position
    accept_test = 2,    // uniform u of the rejection test at this position
    target_sample = 3,  // target draws (residual, bonus, or plain autoregressive) at this position
    block_test = 4,     // block verification: uniform of draft `lane` of the step starting at this position
    tree_draft = 5,     // tree drafting: the draw of shape node `lane` of the step starting at this position
    tree_test = 6,      // tree verification: uniform of the test of node `lane` (its token is at this position)
    coupled_block = 7,  // coupled draw: Gumbel noise of block `lane` at this position
    coupled_token = 8,  // coupled draw: Gumbel noise of token `lane` at this position
};

// How a drafter draws draft i. `own`: inverse CDF at a uniform of its own
// (draft_sample, keyed by the step and i), which the token-wise and block
// rules need: their tests must be independent of the drafts. `coupled`: the
// coupled draw at the draft's position (sampling/coupled_draw.hpp), which
// CoupledSampling needs: it keeps a draft iff the draft is the target's own
// coupled draw, so drafts made with the same noise are kept whenever the
// two distributions agree there.
enum class DraftDraws : unsigned char { own, coupled };

namespace detail {

SPECDEC_HOST_DEVICE inline std::uint32_t mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi) {
    const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
    hi = static_cast<std::uint32_t>(product >> 32);
    return static_cast<std::uint32_t>(product);
}

struct Philox4x32 {
    std::uint32_t c[4];
};

SPECDEC_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t key0, std::uint32_t key1) {
    constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        std::uint32_t hi0, hi1;
        const std::uint32_t lo0 = mulhilo32(kMul0, counter.c[0], hi0);
        const std::uint32_t lo1 = mulhilo32(kMul1, counter.c[2], hi1);
        counter = Philox4x32{{hi1 ^ counter.c[1] ^ key0, lo1, hi0 ^ counter.c[3] ^ key1, lo0}};
        key0 += kWeyl0;
        key1 += kWeyl1;
    }
    return counter;
}

}  // namespace detail

// A uniform double in [0, 1) with 53 random bits, for (seed, position, purpose, lane).
// `lane` distinguishes several numbers needed at one position (e.g. tree drafts).
SPECDEC_HOST_DEVICE inline double counter_uniform(std::uint64_t seed, std::uint64_t position, RandomPurpose purpose,
                                                  std::uint32_t lane = 0) {
    const detail::Philox4x32 out = detail::philox4x32_10(
        detail::Philox4x32{{static_cast<std::uint32_t>(position), static_cast<std::uint32_t>(position >> 32),
                            static_cast<std::uint32_t>(purpose), lane}},
        static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    const std::uint64_t bits = (static_cast<std::uint64_t>(out.c[0]) << 21) ^ (out.c[1] >> 11);
    return static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

// The seeded source a decoder hands to drafters and acceptance rules.
struct CounterRng {
    std::uint64_t seed = 0;

    [[nodiscard]] double uniform(std::uint64_t position, RandomPurpose purpose, std::uint32_t lane = 0) const {
        return counter_uniform(seed, position, purpose, lane);
    }
};

}  // namespace specdec
