#pragma once
// The sampling transforms of sampling/logits_processing.hpp on the device:
// logits rows -> softmax(logits / temperature) -> top-k -> top-p -> min-p ->
// renormalised distribution, and the greedy argmax. Problems the host version
// reports by throwing (NaN or +inf logits, every token masked) are recorded in
// a DeviceStatus that the host reads back and turns into specdec::Error.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "specdec/backends/cuda/block_reduce.cuh"
#include "specdec/backends/cuda/buffers.cuh"
#include "specdec/backends/cuda/check.cuh"
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

// probabilities[row] = softmax((logits[row] - max) * inverse_temperature); one block per row.
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
        // As on the host: the maximum skips the product, since 0 * inf (1 / T
        // overflowing for a tiny T) is NaN.
        const float e = exp_nonpositive(row[i] == max_logit ? 0.0f : (row[i] - max_logit) * inverse_temperature);
        out[i] = e;
        local_total += e;
    }
    const float scale = 1.0f / block_sum(local_total);  // >= 1 before inverting: the max contributes exp(0)
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) out[i] *= scale;
}

template <int = 0>
__global__ void fill_token_ids_kernel(int* ids, int vocab, std::size_t total) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        ids[i] = static_cast<int>(i % vocab);
}

template <int = 0>
__global__ void row_offsets_kernel(int* offsets, int rows, int vocab) {
    for (int i = threadIdx.x; i <= rows; i += blockDim.x) offsets[i] = i * vocab;
}

// Keeps the filtered prefix of each row's tokens sorted by decreasing
// probability (ties by increasing id), renormalised, exactly the rule of
// logits_to_distribution: top-k keeps the first k; top-p the shortest prefix
// (within those) whose mass reaches top_p; min-p those with p >= min_p * p_max.
template <int = 0>
__global__ void filter_sorted_rows_kernel(float* probabilities, const float* sorted_probabilities,
                                          const int* sorted_ids, int vocab, int top_k, double top_p, double min_p) {
    using Scan = cub::BlockScan<double, kSamplingThreads>;
    __shared__ typename Scan::TempStorage scan_storage;
    const std::size_t offset = static_cast<std::size_t>(blockIdx.x) * vocab;
    const float* sorted = sorted_probabilities + offset;
    const int* ids = sorted_ids + offset;
    float* out = probabilities + offset;

    int kept = (top_k > 0 && top_k < vocab) ? top_k : vocab;
    if (top_p < 1.0) {
        double running = 0.0;
        int needed = kept;
        for (int base = 0; base < kept; base += kSamplingThreads) {
            const int i = base + static_cast<int>(threadIdx.x);
            const double w = i < kept ? static_cast<double>(sorted[i]) : 0.0;
            double exclusive = 0.0, chunk_total = 0.0;
            Scan(scan_storage).ExclusiveSum(w, exclusive, chunk_total);
            __syncthreads();
            const int found = block_min((i < kept && running + exclusive + w >= top_p) ? i + 1 : INT_MAX);
            if (found != INT_MAX) {
                needed = found;
                break;
            }
            running += chunk_total;
        }
        kept = needed;
    }
    if (min_p > 0.0) {
        const double threshold = min_p * static_cast<double>(sorted[0]);
        int count = 0;  // sorted rows make "p >= threshold" a prefix: counting it is finding its end
        for (int i = 1 + threadIdx.x; i < kept; i += blockDim.x) count += static_cast<double>(sorted[i]) >= threshold;
        kept = 1 + block_sum(count);
    }
    double local_mass = 0.0;
    for (int i = threadIdx.x; i < kept; i += blockDim.x) local_mass += sorted[i];
    const double kept_mass = block_sum(local_mass);
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) out[i] = 0.0f;
    __syncthreads();
    for (int i = threadIdx.x; i < kept; i += blockDim.x)
        out[ids[i]] = static_cast<float>(static_cast<double>(sorted[i]) / kept_mass);
}

// Scratch memory of the device sampling transforms, grown on demand.
class SamplingWorkspace {
public:
    // Turns `rows` logits rows into distributions in `probabilities` (rows x vocab).
    void logits_to_distributions(const float* logits, std::size_t row_stride, std::size_t rows, std::size_t vocab,
                                 const SamplingOptions& options, float* probabilities, DeviceStatus* status,
                                 cudaStream_t stream) {
        const float inverse_temperature = static_cast<float>(1.0 / options.temperature);
        softmax_rows_kernel<><<<static_cast<unsigned>(rows), kSamplingThreads, 0, stream>>>(
            logits, row_stride, probabilities, static_cast<int>(vocab), inverse_temperature, status);
        SPECDEC_CUDA_CHECK_LAUNCH();
        const bool use_top_k = options.top_k > 0 && options.top_k < vocab;
        if (!use_top_k && !(options.top_p < 1.0) && !(options.min_p > 0.0)) return;

        // Sort each row by decreasing probability; the radix sort is stable and
        // the ids start in increasing order, so ties keep increasing ids.
        const std::size_t total = rows * vocab;
        ids_.resize(total);
        sorted_ids_.resize(total);
        sorted_probabilities_.resize(total);
        offsets_.resize(rows + 1);
        fill_token_ids_kernel<><<<static_cast<unsigned>(std::min<std::size_t>((total + 255) / 256, 4096)), 256, 0,
                                stream>>>(ids_.data(), static_cast<int>(vocab), total);
        SPECDEC_CUDA_CHECK_LAUNCH();
        row_offsets_kernel<><<<1, 256, 0, stream>>>(offsets_.data(), static_cast<int>(rows), static_cast<int>(vocab));
        SPECDEC_CUDA_CHECK_LAUNCH();
        std::size_t temp_bytes = 0;
        SPECDEC_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            nullptr, temp_bytes, probabilities, sorted_probabilities_.data(), ids_.data(), sorted_ids_.data(),
            static_cast<int>(total), static_cast<int>(rows), offsets_.data(), offsets_.data() + 1, 0,
            static_cast<int>(sizeof(float) * 8), stream));
        temp_.resize(std::max<std::size_t>(temp_bytes, 1));  // a null pointer would mean "query the size" again
        SPECDEC_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            temp_.data(), temp_bytes, probabilities, sorted_probabilities_.data(), ids_.data(), sorted_ids_.data(),
            static_cast<int>(total), static_cast<int>(rows), offsets_.data(), offsets_.data() + 1, 0,
            static_cast<int>(sizeof(float) * 8), stream));
        filter_sorted_rows_kernel<><<<static_cast<unsigned>(rows), kSamplingThreads, 0, stream>>>(
            probabilities, sorted_probabilities_.data(), sorted_ids_.data(), static_cast<int>(vocab),
            use_top_k ? static_cast<int>(options.top_k) : 0, options.top_p, options.min_p);
        SPECDEC_CUDA_CHECK_LAUNCH();
    }

private:
    DeviceBuffer<int> ids_, sorted_ids_, offsets_;
    DeviceBuffer<float> sorted_probabilities_;
    DeviceBuffer<std::byte> temp_;
};

}  // namespace specdec::cuda::detail
