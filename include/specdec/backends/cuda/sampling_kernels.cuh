#pragma once
// The candidate stages of the sampler chain on the device (SamplingOptions in
// core/sampling_options.hpp defines the processed distribution): each row is
// ranked once by decreasing logit (ties by increasing id; the ranking does not
// depend on the temperature), then top-k, top-p and min-p keep ranked
// prefixes in SamplingOptions::chain order, measuring probabilities at T = 1
// before the temperature stage and at T after it, and the distribution is
// softmax at 1 / T over what remains. Also the greedy argmax. The logit
// stages (penalties, logit bias, a constraint) are the host's: options with
// them are refused. Problems the host version reports by throwing (NaN or
// +inf logits, every token masked) are recorded in a DeviceStatus that the
// host reads back and turns into specdec::Error.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "specdec/backends/cuda/block_reduce.cuh"
#include "specdec/backends/cuda/buffers.cuh"
#include "specdec/backends/cuda/check.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec::cuda::detail {

// Kernels are templates even where nothing varies (`template <int = 0>`): in a
// header-only library every translation unit defines them, and only template
// instantiations get the vague linkage that `inline` gives host functions
// (nvcc ignores `inline` on __global__).

inline constexpr int kSamplingThreads = 512;

enum DeviceError : int {
    device_ok = 0,
    device_bad_logit = 1,       // a NaN or +inf logit
    device_all_masked = 2,      // every logit of a row is -inf
    device_no_mass = 3,         // a distribution with no positive probability
};

// What a verification writes for the host: one small struct, one copy back.
struct DeviceStatus {
    int accepted;
    int next_token;
    int error;      // DeviceError
    int error_row;  // the logits row the error was found in
};

__device__ inline void report_error(DeviceStatus* status, int error, int row) {
    if (atomicCAS(&status->error, device_ok, error) == device_ok) status->error_row = row;
}

// Checks a logits row like checked_max_logit: returns its max, or reports.
// Returns false (uniformly across the block) when the row is unusable.
__device__ inline bool checked_row_max(const float* row, int vocab, int row_index, DeviceStatus* status,
                                       float& max_logit) {
    float local_max = -INFINITY;
    int bad = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        bad |= (isnan(v) || v == INFINITY) ? 1 : 0;
        local_max = fmaxf(local_max, v);
    }
    bad = block_max(bad);
    max_logit = block_max(local_max);
    if (bad != 0 || max_logit == -INFINITY) {
        if (threadIdx.x == 0) report_error(status, bad != 0 ? device_bad_logit : device_all_masked, row_index);
        return false;
    }
    return true;
}

// Like detail::exp_nonpositive: an exact 0 below -87 (and for -inf, a masked token).
__device__ inline float exp_nonpositive(float x) { return x >= -87.0f ? expf(x) : 0.0f; }

// exp((logit - max_logit) * scale), the host's exp_term: the maximum itself
// skips the product, since 0 * inf (1 / T overflowing for a tiny T) is NaN.
__device__ inline float scaled_exp(float logit, float max_logit, float scale) {
    const float difference = logit - max_logit;
    return exp_nonpositive(difference == 0.0f ? 0.0f : difference * scale);
}

// probabilities[row] = softmax((logits[row] - max) * inverse_temperature); one
// block per row. The distribution when no candidate stage removes a token.
template <int = 0>
__global__ void softmax_rows_kernel(const float* logits, std::size_t row_stride, float* probabilities, int vocab,
                                    float inverse_temperature, DeviceStatus* status) {
    const int row_index = blockIdx.x;
    const float* row = logits + row_index * row_stride;
    float* out = probabilities + static_cast<std::size_t>(row_index) * vocab;
    float max_logit;
    if (!checked_row_max(row, vocab, row_index, status, max_logit)) return;
    float local_total = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float e = scaled_exp(row[i], max_logit, inverse_temperature);
        out[i] = e;
        local_total += e;
    }
    const float scale = 1.0f / block_sum(local_total);  // >= 1 before inverting: the max contributes exp(0)
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) out[i] *= scale;
}

// The sort's input, one block per row: the row's logits, contiguous (rows x
// vocab), with -0.0 written as +0.0 so that the radix sort (which orders bit
// patterns) sees the two zeros as the equal logits they are; and the token
// ids 0 .. vocab - 1. Checks the row like checked_max_logit and reports.
template <int = 0>
__global__ void ranking_input_kernel(const float* logits, std::size_t row_stride, float* keys, int* ids, int vocab,
                                     DeviceStatus* status) {
    const int row_index = blockIdx.x;
    const float* row = logits + row_index * row_stride;
    const std::size_t offset = static_cast<std::size_t>(row_index) * vocab;
    float max_logit;
    (void)checked_row_max(row, vocab, row_index, status, max_logit);  // the filter kernel skips on a report
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        keys[offset + i] = v == 0.0f ? 0.0f : v;
        ids[offset + i] = i;
    }
}

template <int = 0>
__global__ void row_offsets_kernel(int* offsets, int rows, int vocab) {
    for (int i = threadIdx.x; i <= rows; i += blockDim.x) offsets[i] = i * vocab;
}

// The candidate stages of SamplingOptions::chain, in chain order, as the
// filter kernel reads them (the logit stages are not run on the device).
struct CandidateStages {
    SamplerStage order[4];
    int top_k;                  // 0 = off (also when >= vocab)
    double top_p;               // 1 = off
    double min_p;               // 0 = off
    float inverse_temperature;  // the scale from the temperature stage on
};

// The shortest prefix of the first `kept` ranked candidates whose mass,
// renormalised over those `kept`, reaches top_p: the first n with
// sum_{r < n} w_r >= top_p * sum_{r < kept} w_r, where w_r = exp((l_r - l_0) * scale)
// (sums in double, as on the host); `kept` when rounding leaves the target
// beyond every prefix.
using RankScan = cub::BlockScan<double, kSamplingThreads>;

__device__ inline int top_p_prefix(const float* ranked, int kept, float scale, double top_p,
                                   RankScan::TempStorage& scan_storage) {
    const float max_logit = ranked[0];
    double local_total = 0.0;
    for (int r = threadIdx.x; r < kept; r += blockDim.x) local_total += scaled_exp(ranked[r], max_logit, scale);
    const double target = top_p * block_sum(local_total);
    double running = 0.0;  // the mass of the chunks before this one
    for (int base = 0; base < kept; base += kSamplingThreads) {
        const int r = base + static_cast<int>(threadIdx.x);
        const double w = r < kept ? static_cast<double>(scaled_exp(ranked[r], max_logit, scale)) : 0.0;
        double exclusive = 0.0, chunk_total = 0.0;
        RankScan(scan_storage).ExclusiveSum(w, exclusive, chunk_total);
        __syncthreads();  // scan_storage is reused by the next chunk
        const int needed = block_min((r < kept && running + exclusive + w >= target) ? r + 1 : INT_MAX);
        if (needed != INT_MAX) return needed;
        running += chunk_total;
    }
    return kept;
}

// The ranked prefix (within the first `kept`) of weights w_r >= min_p, i.e.
// probability >= min_p * the largest, whatever the normalisation: the first
// candidate (w_0 = 1) always stays, and the prefix ends at the first rank
// that falls short, as the host's scan stops there.
__device__ inline int min_p_prefix(const float* ranked, int kept, float scale, double min_p) {
    const float max_logit = ranked[0];
    int first_short = INT_MAX;
    for (int r = 1 + threadIdx.x; r < kept; r += blockDim.x) {
        if (!(static_cast<double>(scaled_exp(ranked[r], max_logit, scale)) >= min_p)) {
            first_short = r;
            break;  // this thread's next ranks come later in the ranking
        }
    }
    return min(kept, block_min(first_short));
}

// One block per row, over the row's logits sorted by decreasing value with
// ties by increasing id (`ranked`, `ranked_ids`: rows x vocab). Every stage
// keeps a ranked prefix, so the candidates are always ranked[0 .. kept).
// Writes the row's distribution: softmax at 1 / T over the candidates that
// remain, 0 elsewhere (sampling_options.hpp defines it).
template <int = 0>
__global__ void __launch_bounds__(kSamplingThreads)
    candidate_stages_kernel(float* probabilities, const float* ranked_logits, const int* ranked_ids, int vocab,
                            CandidateStages stages, const DeviceStatus* status) {
    __shared__ RankScan::TempStorage scan_storage;
    // A reported row has no distribution; the acceptance kernel stops on the report.
    if (status->error != device_ok) return;
    const std::size_t offset = static_cast<std::size_t>(blockIdx.x) * vocab;
    const float* ranked = ranked_logits + offset;
    const int* ids = ranked_ids + offset;
    float* out = probabilities + offset;

    int kept = vocab;
    float scale = 1.0f;  // the filters before the temperature stage measure at T = 1
#pragma unroll
    for (const SamplerStage stage : stages.order) {
        switch (stage) {
            case SamplerStage::top_k:
                if (stages.top_k > 0) kept = min(kept, stages.top_k);
                break;
            case SamplerStage::top_p:
                if (stages.top_p < 1.0) kept = top_p_prefix(ranked, kept, scale, stages.top_p, scan_storage);
                break;
            case SamplerStage::min_p:
                if (stages.min_p > 0.0) kept = min_p_prefix(ranked, kept, scale, stages.min_p);
                break;
            case SamplerStage::temperature: scale = stages.inverse_temperature; break;
            default: break;  // the logit stages: not in `order`
        }
    }
    const float max_logit = ranked[0];
    double local_mass = 0.0;
    for (int r = threadIdx.x; r < kept; r += blockDim.x)
        local_mass += scaled_exp(ranked[r], max_logit, stages.inverse_temperature);
    const double kept_mass = block_sum(local_mass);  // >= 1: the first candidate contributes exp(0)
    // ranked_ids is a permutation of 0 .. vocab - 1: every token is written once.
    for (int r = threadIdx.x; r < vocab; r += blockDim.x) {
        const double w = r < kept ? static_cast<double>(scaled_exp(ranked[r], max_logit, stages.inverse_temperature))
                                  : 0.0;
        out[ids[r]] = static_cast<float>(w / kept_mass);
    }
}

// The device runs the candidate stages only. Penalties, logit bias and a
// constraint adjust a row from its history (the committed tokens and the
// drafts before it), which the host does (sampling/logit_adjustments.hpp):
// options with any of them are refused here, naming the first such option.
inline void require_candidate_stages_only(const SamplingOptions& options, const char* where) {
    std::ostringstream option;
    if (options.constraint != nullptr) {
        option << "constraint";
    } else if (!options.logit_bias.empty()) {
        option << "logit_bias (" << options.logit_bias.size()
               << (options.logit_bias.size() == 1 ? " entry)" : " entries)");
    } else if (options.penalises()) {
        if (options.repeat_penalty != 1.0) {
            option << "repeat_penalty = " << options.repeat_penalty;
        } else if (options.presence_penalty != 0.0) {
            option << "presence_penalty = " << options.presence_penalty;
        } else {
            option << "frequency_penalty = " << options.frequency_penalty;
        }
    } else {
        return;
    }
    throw Error(std::string("cuda backend: ") + where + " cannot apply the sampling option " + option.str() +
                ": penalties, logit_bias and constraint adjust each row from its history, which only the host "
                "verification does; verify on the host for these options");
}

// Scratch memory of the device sampling transforms, grown on demand.
class SamplingWorkspace {
public:
    // Turns `rows` logits rows into their processed distributions in
    // `probabilities` (rows x vocab): the candidate stages of options.chain.
    // Options with logit stages (penalties, logit_bias, constraint) throw.
    void logits_to_distributions(const float* logits, std::size_t row_stride, std::size_t rows, std::size_t vocab,
                                 const SamplingOptions& options, float* probabilities, DeviceStatus* status,
                                 cudaStream_t stream) {
        validate(options);
        require_candidate_stages_only(options, "the device sampling transforms");
        const float inverse_temperature = static_cast<float>(1.0 / options.temperature);
        const bool use_top_k = options.top_k > 0 && options.top_k < vocab;
        if (!use_top_k && !(options.top_p < 1.0) && !(options.min_p > 0.0)) {
            softmax_rows_kernel<><<<static_cast<unsigned>(rows), kSamplingThreads, 0, stream>>>(
                logits, row_stride, probabilities, static_cast<int>(vocab), inverse_temperature, status);
            SPECDEC_CUDA_CHECK_LAUNCH();
            return;
        }

        // Rank each row: decreasing logit, ties by increasing id (the radix
        // sort is stable and the ids go in in increasing order). The ranking
        // is the same at every temperature, so one sort serves every stage.
        const std::size_t total = rows * vocab;
        keys_.resize(total);
        ids_.resize(total);
        ranked_logits_.resize(total);
        ranked_ids_.resize(total);
        offsets_.resize(rows + 1);
        ranking_input_kernel<><<<static_cast<unsigned>(rows), kSamplingThreads, 0, stream>>>(
            logits, row_stride, keys_.data(), ids_.data(), static_cast<int>(vocab), status);
        SPECDEC_CUDA_CHECK_LAUNCH();
        row_offsets_kernel<><<<1, 256, 0, stream>>>(offsets_.data(), static_cast<int>(rows), static_cast<int>(vocab));
        SPECDEC_CUDA_CHECK_LAUNCH();
        std::size_t temp_bytes = 0;
        SPECDEC_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            nullptr, temp_bytes, keys_.data(), ranked_logits_.data(), ids_.data(), ranked_ids_.data(),
            static_cast<int>(total), static_cast<int>(rows), offsets_.data(), offsets_.data() + 1, 0,
            static_cast<int>(sizeof(float) * 8), stream));
        temp_.resize(std::max<std::size_t>(temp_bytes, 1));  // a null pointer would mean "query the size" again
        SPECDEC_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            temp_.data(), temp_bytes, keys_.data(), ranked_logits_.data(), ids_.data(), ranked_ids_.data(),
            static_cast<int>(total), static_cast<int>(rows), offsets_.data(), offsets_.data() + 1, 0,
            static_cast<int>(sizeof(float) * 8), stream));

        CandidateStages stages{};
        std::size_t n = 0;
        for (const SamplerStage stage : options.chain)
            if (stage != SamplerStage::logit_bias && stage != SamplerStage::penalties) stages.order[n++] = stage;
        stages.top_k = use_top_k ? static_cast<int>(options.top_k) : 0;
        stages.top_p = options.top_p;
        stages.min_p = options.min_p;
        stages.inverse_temperature = inverse_temperature;
        candidate_stages_kernel<><<<static_cast<unsigned>(rows), kSamplingThreads, 0, stream>>>(
            probabilities, ranked_logits_.data(), ranked_ids_.data(), static_cast<int>(vocab), stages, status);
        SPECDEC_CUDA_CHECK_LAUNCH();
    }

private:
    DeviceBuffer<int> ids_, ranked_ids_, offsets_;
    DeviceBuffer<float> keys_, ranked_logits_;
    DeviceBuffer<std::byte> temp_;
};

}  // namespace specdec::cuda::detail
