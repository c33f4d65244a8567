#pragma once
// The small kernels of the Llama forward pass (the GEMMs go to cuBLAS, see
// gemm.cuh). Each mirrors one function of backends/cpu/vector_ops.hpp or one
// loop of models/llama_model.hpp, in the same order of operations where it
// matters. Kernels read the number of cached positions from device memory
// (`past`), so that a captured CUDA graph can be replayed at any position.
#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "specdec/backends/cuda/check.cuh"
#include "specdec/backends/cuda/precision.cuh"
#include "specdec/core/types.hpp"

namespace specdec::cuda::detail {

// Kernels are templates even where nothing varies (`template <int = 0>`): in a
// header-only library every translation unit defines them, and only template
// instantiations get the vague linkage that `inline` gives host functions
// (nvcc ignores `inline` on __global__).

inline constexpr int kRowThreads = 256;  // threads of the one-block-per-row kernels
inline constexpr int kMaxHeadDim = 256;  // attention keeps head_dim / 32 values per lane in registers
inline constexpr int kAttentionWarps = 4;

// x[t] = embedding[tokens[t]] (token ids were checked on the host).
template <class T>
__global__ void embedding_kernel(const Token* tokens, const T* table, float* x, int dim) {
    const int t = blockIdx.x;
    const T* row = table + static_cast<std::size_t>(tokens[t]) * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) x[static_cast<std::size_t>(t) * dim + i] = to_float(row[i]);
}

// out = x / sqrt(mean(x^2) + eps) * weight, one block per row (cpu::rms_norm).
template <class T>
__global__ void rms_norm_kernel(const float* x, const float* weight, T* out, int dim, float eps) {
    using Reduce = cub::BlockReduce<float, kRowThreads>;
    __shared__ typename Reduce::TempStorage storage;
    __shared__ float shared_scale;
    const float* row = x + static_cast<std::size_t>(blockIdx.x) * dim;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += kRowThreads) sum += row[i] * row[i];
    sum = Reduce(storage).Sum(sum);
    if (threadIdx.x == 0) shared_scale = 1.0f / sqrtf(sum / static_cast<float>(dim) + eps);
    __syncthreads();
    const float scale = shared_scale;
    T* out_row = out + static_cast<std::size_t>(blockIdx.x) * dim;
    for (int i = threadIdx.x; i < dim; i += kRowThreads) out_row[i] = from_float<T>(row[i] * scale * weight[i]);
}

// One token's fused projection row is [q (dim) | k (kv_dim) | v (kv_dim)].
// Rotates q in place and k, then stores k and v in the cache at position
// past + t. Adjacent pairs (2i, 2i+1) of each head are rotated by
// position * inverse_frequencies[i] for 2i < rotary_dim (llama.cpp "normal" RoPE).
template <int = 0>
__global__ void rope_and_store_kv_kernel(float* qkv, float* key_cache, float* value_cache, const int* past,
                                         const float* inverse_frequencies, float position_scale, int dim, int kv_dim,
                                         int head_dim, int rotary_dim) {
    const int t = blockIdx.x;
    const int position = *past + t;
    float* row = qkv + static_cast<std::size_t>(t) * (dim + 2 * kv_dim);
    float* q = row;
    const float* k = row + dim;
    const float* v = row + dim + kv_dim;
    float* key_out = key_cache + static_cast<std::size_t>(position) * kv_dim;
    float* value_out = value_cache + static_cast<std::size_t>(position) * kv_dim;
    const int half_head = head_dim / 2;
    const float scaled_position = static_cast<float>(position) * position_scale;
    // Pairs of q, then pairs of k: (dim + kv_dim) / 2 rotations in all.
    for (int pair = threadIdx.x; pair < (dim + kv_dim) / 2; pair += blockDim.x) {
        const bool is_query = pair < dim / 2;
        const int local = is_query ? pair : pair - dim / 2;
        const int index_in_head = local % half_head;  // which pair of the head
        const int offset = 2 * local;
        const float a = is_query ? q[offset] : k[offset];
        const float b = is_query ? q[offset + 1] : k[offset + 1];
        float out_a = a, out_b = b;
        if (2 * index_in_head < rotary_dim) {
            const float angle = scaled_position * inverse_frequencies[index_in_head];
            const float c = cosf(angle), s = sinf(angle);
            out_a = a * c - b * s;
            out_b = a * s + b * c;
        }
        if (is_query) {
            q[offset] = out_a;
            q[offset + 1] = out_b;
        } else {
            key_out[offset] = out_a;
            key_out[offset + 1] = out_b;
        }
    }
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) value_out[i] = v[i];
}

__device__ inline float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
    return value;
}

// Causal softmax attention of token t (at position past + t) and query head h
// over cached positions [0, past + t]: grid (n, heads), kAttentionWarps warps.
// Each warp runs an online softmax (running max m, sum l, weighted values) over
// every kAttentionWarps-th key; lane j holds dimensions j, j + 32, ... of the
// head. The warps' partial results are merged at the end. Output in T (the
// input of the output-projection GEMM).
template <class T>
__global__ void __launch_bounds__(kAttentionWarps * 32)
    attention_kernel(const float* qkv, const float* key_cache, const float* value_cache, const int* past, T* out,
                     int dim, int kv_dim, int head_dim, int group_size, float scale) {
    constexpr int kChunks = kMaxHeadDim / 32;
    const int t = blockIdx.x, head = blockIdx.y, kv_head = head / group_size;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int keys = *past + t + 1;
    const float* q = qkv + static_cast<std::size_t>(t) * (dim + 2 * kv_dim) + static_cast<std::size_t>(head) * head_dim;

    float q_reg[kChunks], acc[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        const int d = lane + 32 * c;
        q_reg[c] = d < head_dim ? q[d] : 0.0f;
        acc[c] = 0.0f;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    for (int j = warp; j < keys; j += kAttentionWarps) {
        const float* key = key_cache + static_cast<std::size_t>(j) * kv_dim + static_cast<std::size_t>(kv_head) * head_dim;
        const float* value = value_cache + static_cast<std::size_t>(j) * kv_dim + static_cast<std::size_t>(kv_head) * head_dim;
        float partial = 0.0f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
            const int d = lane + 32 * c;
            if (d < head_dim) partial += q_reg[c] * key[d];
        }
        const float score = warp_sum(partial) * scale;
        const float new_max = fmaxf(running_max, score);
        const float correction = expf(running_max - new_max);  // 0 on the first key (running_max = -inf)
        const float weight = expf(score - new_max);
        running_sum = running_sum * correction + weight;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
            const int d = lane + 32 * c;
            acc[c] = acc[c] * correction + (d < head_dim ? weight * value[d] : 0.0f);
        }
        running_max = new_max;
    }

    __shared__ float warp_max[kAttentionWarps], warp_sum_of_weights[kAttentionWarps];
    __shared__ float warp_acc[kAttentionWarps][kMaxHeadDim];
    if (lane == 0) {
        warp_max[warp] = running_max;
        warp_sum_of_weights[warp] = running_sum;
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        const int d = lane + 32 * c;
        if (d < head_dim) warp_acc[warp][d] = acc[c];
    }
    __syncthreads();
    float global_max = -INFINITY;
    for (int w = 0; w < kAttentionWarps; ++w) global_max = fmaxf(global_max, warp_max[w]);
    float total = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w)
        total += warp_max[w] == -INFINITY ? 0.0f : warp_sum_of_weights[w] * expf(warp_max[w] - global_max);
    const float inverse_total = 1.0f / total;
    T* out_row = out + static_cast<std::size_t>(t) * dim + static_cast<std::size_t>(head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float value = 0.0f;
        for (int w = 0; w < kAttentionWarps; ++w)
            if (warp_max[w] != -INFINITY) value += warp_acc[w][d] * expf(warp_max[w] - global_max);
        out_row[d] = from_float<T>(value * inverse_total);
    }
}

// One token's fused gate/up row is [gate (ffn) | up (ffn)]:
// out = silu(gate) * up (cpu::swiglu).
template <class T>
__global__ void swiglu_kernel(const float* gate_up, T* out, int ffn) {
    const int t = blockIdx.y;
    const float* gate = gate_up + static_cast<std::size_t>(t) * 2 * ffn;
    const float* up = gate + ffn;
    T* out_row = out + static_cast<std::size_t>(t) * ffn;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ffn; i += gridDim.x * blockDim.x) {
        const float g = gate[i];
        out_row[i] = from_float<T>(g / (1.0f + expf(-g)) * up[i]);
    }
}

// --- launchers: grid shapes live here, next to the kernels they fit. ---

template <class T>
void launch_embedding(const Token* tokens, const T* table, float* x, int n, int dim, cudaStream_t stream) {
    embedding_kernel<T><<<n, kRowThreads, 0, stream>>>(tokens, table, x, dim);
    SPECDEC_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_rms_norm(const float* x, const float* weight, T* out, int rows, int dim, float eps, cudaStream_t stream) {
    rms_norm_kernel<T><<<rows, kRowThreads, 0, stream>>>(x, weight, out, dim, eps);
    SPECDEC_CUDA_CHECK_LAUNCH();
}

inline void launch_rope_and_store_kv(float* qkv, float* key_cache, float* value_cache, const int* past,
                                     const float* inverse_frequencies, float position_scale, int n, int dim, int kv_dim,
                                     int head_dim, int rotary_dim, cudaStream_t stream) {
    rope_and_store_kv_kernel<><<<n, kRowThreads, 0, stream>>>(qkv, key_cache, value_cache, past, inverse_frequencies,
                                                            position_scale, dim, kv_dim, head_dim, rotary_dim);
    SPECDEC_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_attention(const float* qkv, const float* key_cache, const float* value_cache, const int* past, T* out,
                      int n, int heads, int dim, int kv_dim, int head_dim, int group_size, cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    attention_kernel<T><<<dim3(n, heads), kAttentionWarps * 32, 0, stream>>>(qkv, key_cache, value_cache, past, out,
                                                                              dim, kv_dim, head_dim, group_size, scale);
    SPECDEC_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_swiglu(const float* gate_up, T* out, int n, int ffn, cudaStream_t stream) {
    const int blocks = (ffn + kRowThreads - 1) / kRowThreads;
    swiglu_kernel<T><<<dim3(blocks, n), kRowThreads, 0, stream>>>(gate_up, out, ffn);
    SPECDEC_CUDA_CHECK_LAUNCH();
}

}  // namespace specdec::cuda::detail
