#pragma once
// The acceptance rules of sampling/acceptance.hpp on the device, so that only
// (accepted count, next token) crosses back to the host after a verification
// pass. Same rule, same random numbers: the uniforms come from
// specdec::counter_uniform(seed, position, purpose), exactly as on the CPU.
//
//   DeviceVerifier::verify  logits rows on the device + DraftProposal on the host
//                           -> AcceptanceResult (what verify_on_host would return)
//   accept_rejection_block  the token-wise rejection rule for one block, usable by
//                           other kernels (the exactness test runs thousands of
//                           trials in one launch with it)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "specdec/backends/cuda/block_reduce.cuh"
#include "specdec/backends/cuda/buffers.cuh"
#include "specdec/backends/cuda/check.cuh"
#include "specdec/backends/cuda/sampling_kernels.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/sampling/draft_proposal.hpp"
#include "specdec/sampling/sampling_options.hpp"

namespace specdec::cuda {

namespace detail {

// The draft as the device sees it; q == nullptr means point masses q_i = delta(tokens[i]).
struct DeviceDraft {
    const Token* tokens;
    const float* q;  // k rows of vocab floats, or nullptr
    int k;
    int vocab;

    __device__ double q_of(int i, int x) const {
        if (q == nullptr) return x == tokens[i] ? 1.0 : 0.0;
        return static_cast<double>(q[static_cast<std::size_t>(i) * vocab + x]);
    }
};

// y ~ p by inverse CDF with uniform u (sample_from_distribution).
template <int kThreads>
__device__ int sample_block(const float* p, int vocab, double u) {
    double local_total = 0.0;
    for (int x = threadIdx.x; x < vocab; x += blockDim.x) local_total += p[x];
    const double total = block_sum(local_total);
    return block_inverse_cdf<kThreads>([&](int x) { return p[x] > 0.0f ? static_cast<double>(p[x]) : 0.0; }, vocab,
                                       u * total);
}

// y ~ norm(max(p_i - q_i, 0)) with uniform u, falling back to p when rounding
// leaves no residual mass (detail::sample_residual).
template <int kThreads>
__device__ int sample_residual_block(const float* p, const DeviceDraft& draft, int i, double u) {
    const auto residual = [&](int x) {
        const double q_x = draft.q_of(i, x);
        return p[x] > q_x ? static_cast<double>(p[x]) - q_x : 0.0;
    };
    double local_mass = 0.0;
    for (int x = threadIdx.x; x < draft.vocab; x += blockDim.x) local_mass += residual(x);
    const double mass = block_sum(local_mass);
    if (!(mass > 0.0)) return sample_block<kThreads>(p, draft.vocab, u);
    return block_inverse_cdf<kThreads>(residual, draft.vocab, u * mass);
}

// Token-wise rejection sampling (accept_rejection_sampling) for one block:
// p holds k + 1 rows of vocab floats; draft i sits at position first_position + i.
// Every decision depends only on values all threads read alike, so the
// control flow is uniform across the block. Thread 0 writes the result.
template <int kThreads>
__device__ void accept_rejection_block(const float* p, const DeviceDraft& draft, std::uint64_t seed,
                                       std::uint64_t first_position, DeviceStatus* status) {
    const std::size_t vocab = static_cast<std::size_t>(draft.vocab);
    for (int i = 0; i < draft.k; ++i) {
        const Token x = draft.tokens[i];
        const double p_x = p[i * vocab + static_cast<std::size_t>(x)];
        const double q_x = draft.q_of(i, x);
        const double u = counter_uniform(seed, first_position + i, RandomPurpose::accept_test);
        if (q_x > 0.0 && u * q_x < p_x) continue;
        const double v = counter_uniform(seed, first_position + i, RandomPurpose::target_sample);
        const int y = sample_residual_block<kThreads>(p + i * vocab, draft, i, v);
        if (threadIdx.x == 0) {
            if (y < 0) report_error(status, device_no_mass, i);
            status->accepted = i;
            status->next_token = y;
        }
        return;
    }
    const double v = counter_uniform(seed, first_position + draft.k, RandomPurpose::target_sample);
    const int y = sample_block<kThreads>(p + draft.k * vocab, draft.draft_vocab_unused_guard(), v);
    (void)y;
}

}  // namespace detail
}  // namespace specdec::cuda
