#pragma once
// Block-wide reductions whose result every thread of the block receives, and
// the block-wide inverse-CDF search used to draw a token. All threads of the
// block must call them (they synchronise).
#include <cub/block/block_scan.cuh>

#include <climits>

namespace specdec::cuda::detail {

template <class T, class Op>
__device__ inline T warp_all_reduce(T value, Op op) {
    for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
    return value;
}

// blockDim.x must be a multiple of 32 (every launcher here uses 256 or 512).
template <class T, class Op>
__device__ inline T block_all_reduce(T value, Op op) {
    __shared__ T partial[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    value = warp_all_reduce(value, op);
    if (lane == 0) partial[warp] = value;
    __syncthreads();
    T result = partial[0];
    for (int w = 1; w < warps; ++w) result = op(result, partial[w]);
    __syncthreads();  // partial may be reused by the next call
    return result;
}

struct SumOp {
    template <class T>
    __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    template <class T>
    __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct MinOp {
    template <class T>
    __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

template <class T>
__device__ inline T block_sum(T value) { return block_all_reduce(value, SumOp{}); }
template <class T>
__device__ inline T block_max(T value) { return block_all_reduce(value, MaxOp{}); }
template <class T>
__device__ inline T block_min(T value) { return block_all_reduce(value, MinOp{}); }

// The largest value with ties to the lowest index (greedy_token's rule).
struct ArgMax {
    float value;
    int index;
};
__device__ inline ArgMax better(ArgMax a, ArgMax b) {
    return (a.value > b.value || (a.value == b.value && a.index < b.index)) ? a : b;
}
__device__ inline ArgMax block_argmax(ArgMax candidate) {
    __shared__ ArgMax partial[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) {
        const ArgMax other{__shfl_xor_sync(0xFFFFFFFFu, candidate.value, offset),
                           __shfl_xor_sync(0xFFFFFFFFu, candidate.index, offset)};
        candidate = better(candidate, other);
    }
    if (lane == 0) partial[warp] = candidate;
    __syncthreads();
    ArgMax result = partial[0];
    for (int w = 1; w < warps; ++w) result = better(result, partial[w]);
    __syncthreads();
    return result;
}

// Inverse-CDF draw over the non-negative weights weight(0..count-1), the
// device twin of sample_from_distribution: returns the first x with
// weight(x) > 0 whose cumulative weight exceeds `threshold` (= u * total), or,
// when rounding leaves the threshold beyond the accumulated mass, the last x
// with positive weight; -1 when no weight is positive. The cumulative sums are
// taken in double, chunk by chunk, with a block-wide exclusive scan.
template <int kThreads, class WeightFn>
__device__ int block_inverse_cdf(WeightFn weight, int count, double threshold) {
    using Scan = cub::BlockScan<double, kThreads>;
    __shared__ typename Scan::TempStorage scan_storage;
    double running = 0.0;
    int last_positive = -1;
    for (int base = 0; base < count; base += kThreads) {
        const int x = base + static_cast<int>(threadIdx.x);
        const double w = x < count ? weight(x) : 0.0;
        double exclusive = 0.0, chunk_total = 0.0;
        Scan(scan_storage).ExclusiveSum(w, exclusive, chunk_total);
        __syncthreads();
        const bool crosses = w > 0.0 && running + exclusive + w > threshold;
        const int found = block_min(crosses ? x : INT_MAX);
        last_positive = max(last_positive, block_max(w > 0.0 ? x : -1));
        if (found != INT_MAX) return found;
        running += chunk_total;
    }
    return last_positive;
}

}  // namespace specdec::cuda::detail
