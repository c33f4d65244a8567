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
#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec::cuda {

namespace detail {

// Kernels are templates even where nothing varies (`template <int = 0>`): in a
// header-only library every translation unit defines them, and only template
// instantiations get the vague linkage that `inline` gives host functions
// (nvcc ignores `inline` on __global__).

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
    const int y = sample_block<kThreads>(p + draft.k * vocab, draft.vocab, v);
    if (threadIdx.x == 0) {
        if (y < 0) report_error(status, device_no_mass, draft.k);
        status->accepted = draft.k;
        status->next_token = y;
    }
}

// The verification of one proposal: one block (the rows were prepared by the
// sampling kernels, which may have reported an error already).
template <int = 0>
__global__ void __launch_bounds__(kSamplingThreads)
    rejection_acceptance_kernel(const float* p, DeviceDraft draft, std::uint64_t seed, std::uint64_t first_position,
                                DeviceStatus* status) {
    if (status->error != device_ok) return;
    accept_rejection_block<kSamplingThreads>(p, draft, seed, first_position, status);
}

// Greedy verification (accept_greedy over greedy_token of each row): keep
// drafts while they equal the argmax (ties to the lowest id). Like the host,
// every one of the k + 1 rows is checked for NaN / +inf first.
template <int = 0>
__global__ void __launch_bounds__(kSamplingThreads)
    greedy_acceptance_kernel(const float* logits, std::size_t row_stride, int vocab, const Token* drafts, int k,
                             DeviceStatus* status) {
    __shared__ int argmax[64];  // k + 1 <= 64 is checked on the host
    for (int row = 0; row <= k; ++row) {
        const float* values = logits + row * row_stride;
        float max_logit;
        if (!checked_row_max(values, vocab, row, status, max_logit)) return;
        ArgMax best{-INFINITY, INT_MAX};
        for (int x = threadIdx.x; x < vocab; x += blockDim.x) best = better(best, ArgMax{values[x], x});
        best = block_argmax(best);
        if (threadIdx.x == 0) argmax[row] = best.index;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    int i = 0;
    while (i < k && drafts[i] == argmax[i]) ++i;
    status->accepted = i;
    status->next_token = argmax[i];
}

}  // namespace detail

// Verifies a draft against target logits that live on the device. Owns the
// scratch buffers (distributions, q rows, the status word), so one verifier
// per model avoids allocations in the decoding loop.
class DeviceVerifier {
public:
    static constexpr std::size_t kMaxDraftTokens = 63;

    DeviceVerifier() : status_(1) { host_status_.resize(1); }

    // `logits`: at least draft.size() + 1 device rows, row i at logits + i * row_stride;
    // the last k + 1 of `rows` are used. Returns what detail::verify_on_host returns.
    // The rows are taken as final logits: options with penalties, logit_bias
    // or a constraint (SamplingOptions::adjusts_logits) throw, naming the option.
    AcceptanceResult verify(const float* logits, std::size_t rows, std::size_t row_stride, std::size_t vocab,
                            const DraftProposal& draft, const SamplingOptions& sampling, const CounterRng& rng,
                            std::uint64_t first_position, cudaStream_t stream) {
        validate(sampling, vocab);
        detail::require_candidate_stages_only(sampling, "device verification");
        const std::size_t k = draft.size();
        if (k > kMaxDraftTokens) {
            throw Error("cuda backend: device verification supports at most " + std::to_string(kMaxDraftTokens) +
                        " draft tokens per step, got " + std::to_string(k));
        }
        if (rows < k + 1) {
            throw Error("cuda backend: verification needs k + 1 = " + std::to_string(k + 1) +
                        " logits rows, got " + std::to_string(rows));
        }
        ::specdec::detail::check_rows(draft, k + 1, vocab);
        const float* target_rows = logits + (rows - (k + 1)) * row_stride;

        host_tokens_.resize(k + 1);
        for (std::size_t i = 0; i < k; ++i) host_tokens_.data()[i] = draft.tokens[i];
        tokens_.resize(k + 1);
        copy_to_device(tokens_.data(), host_tokens_.data(), k, stream);
        SPECDEC_CUDA_CHECK(cudaMemsetAsync(status_.data(), 0, sizeof(detail::DeviceStatus), stream));

        if (sampling.greedy()) {
            detail::greedy_acceptance_kernel<><<<1, detail::kSamplingThreads, 0, stream>>>(
                target_rows, row_stride, static_cast<int>(vocab), tokens_.data(), static_cast<int>(k), status_.data());
            SPECDEC_CUDA_CHECK_LAUNCH();
        } else {
            probabilities_.resize((k + 1) * vocab);
            sampling_.logits_to_distributions(target_rows, row_stride, k + 1, vocab, sampling, probabilities_.data(),
                                              status_.data(), stream);
            const float* q = nullptr;
            if (!draft.point_mass()) {
                q_.resize(k * vocab);
                copy_to_device(q_.data(), draft.probabilities.data(), k * vocab, stream);
                q = q_.data();
            }
            const detail::DeviceDraft device_draft{tokens_.data(), q, static_cast<int>(k), static_cast<int>(vocab)};
            detail::rejection_acceptance_kernel<><<<1, detail::kSamplingThreads, 0, stream>>>(
                probabilities_.data(), device_draft, rng.seed, first_position, status_.data());
            SPECDEC_CUDA_CHECK_LAUNCH();
        }
        copy_to_host(host_status_.data(), status_.data(), 1, stream);
        SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
        const detail::DeviceStatus status = host_status_.data()[0];
        if (status.error != detail::device_ok) throw_status(status, first_position);
        return AcceptanceResult{static_cast<std::size_t>(status.accepted), static_cast<Token>(status.next_token)};
    }

private:
    [[noreturn]] static void throw_status(const detail::DeviceStatus& status, std::uint64_t first_position) {
        const std::string where = " (logits row " + std::to_string(status.error_row) + " of the verification at position " +
                                  std::to_string(first_position) + ")";
        switch (status.error) {
            case detail::device_bad_logit:
                throw Error("target model logits contain NaN or +inf" + where +
                            ": expected finite values (or -inf for masked tokens)");
            case detail::device_all_masked:
                throw Error("target model logits are -inf for every token" + where + ": no token can be sampled");
            case detail::device_no_mass:
                throw Error("cannot sample from a distribution with no positive mass" + where);
            default: throw Error("cuda backend: unknown device verification error " + std::to_string(status.error));
        }
    }

    DeviceBuffer<detail::DeviceStatus> status_;
    PinnedBuffer<detail::DeviceStatus> host_status_;
    PinnedBuffer<Token> host_tokens_;
    DeviceBuffer<Token> tokens_;
    DeviceBuffer<float> probabilities_, q_;
    detail::SamplingWorkspace sampling_;
};

}  // namespace specdec::cuda
