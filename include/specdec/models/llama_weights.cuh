#pragma once
// A Llama model's weights in device memory, in one Precision. Q, K and V are
// stored as one [(dim + 2 kv_dim) x dim] matrix and gate/up as one
// [2 ffn x dim] matrix, so each layer runs 4 GEMMs instead of 7.
//
// Two ways to fill them:
//   upload_weights            from host LlamaWeights in any CPU storage type
//                             (every WeightType, the K-quants included),
//                             decoded on the host by cpu::dequantize_row, the
//                             CPU's own bit-exact row decoder, then rounded
//                             once to the device precision
//   generate_synthetic_weights  the synthetic family (models/synthetic.hpp)
//                             generated directly on the device from its seed:
//                             the same pure function of (seed, tensor, element),
//                             so a device-generated model has the CPU model's
//                             weights bit for bit (f32; f16/bf16 after rounding)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/tensors/half.hpp"
#include "specdec/tensors/weight_matrix.hpp"
#include "specdec/backends/cuda/buffers.cuh"
#include "specdec/backends/cuda/check.cuh"
#include "specdec/backends/cuda/precision.cuh"
#include "specdec/models/llama_weights.hpp"
#include "specdec/models/synthetic.hpp"

namespace specdec::cuda {

struct DeviceLayerWeights {
    DeviceBuffer<float> attention_norm, ffn_norm;
    DeviceBuffer<std::byte> qkv;               // [(dim + 2 kv_dim) x dim]: rows of q, then k, then v
    DeviceBuffer<std::byte> attention_output;  // [dim x dim]
    DeviceBuffer<std::byte> gate_up;           // [2 ffn x dim]: rows of gate, then up
    DeviceBuffer<std::byte> down;              // [dim x ffn]
};

struct DeviceLlamaWeights {
    LlamaConfig config;
    Precision precision = Precision::f16;
    DeviceBuffer<std::byte> token_embedding;  // [vocab x dim]
    std::vector<DeviceLayerWeights> layers;
    DeviceBuffer<float> output_norm;
    DeviceBuffer<std::byte> output;  // [vocab x dim]

    [[nodiscard]] std::size_t bytes() const {
        std::size_t total = token_embedding.bytes() + output_norm.bytes() + output.bytes();
        for (const auto& l : layers)
            total += l.attention_norm.bytes() + l.ffn_norm.bytes() + l.qkv.bytes() + l.attention_output.bytes() +
                     l.gate_up.bytes() + l.down.bytes();
        return total;
    }
};

namespace detail {

inline DeviceBuffer<std::byte> allocate_matrix(std::size_t rows, std::size_t cols, Precision precision) {
    return DeviceBuffer<std::byte>(rows * cols * precision_bytes(precision));
}

// Copies host floats to a device float vector (norm weights).
inline DeviceBuffer<float> upload_floats(const std::vector<float>& values, cudaStream_t stream) {
    DeviceBuffer<float> buffer(values.size());
    copy_to_device(buffer.data(), values.data(), values.size(), stream);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));  // `values` may die after we return
    return buffer;
}

// Writes matrix `w` (any CPU storage type) as rows [first_row, first_row + w.rows)
// of the device matrix `device` in `precision`, through a pinned staging buffer.
inline void upload_matrix_rows(const WeightMatrix& w, std::byte* device, std::size_t first_row, Precision precision,
                               cudaStream_t stream, PinnedBuffer<std::byte>& staging) {
    constexpr std::size_t kStagingBytes = std::size_t{32} << 20;
    const std::size_t element = precision_bytes(precision);
    const std::size_t row_bytes = w.cols * element;
    const std::size_t rows_per_chunk = std::max<std::size_t>(1, kStagingBytes / row_bytes);
    staging.resize(rows_per_chunk * row_bytes);
    std::vector<float> row(w.cols);
    for (std::size_t begin = 0; begin < w.rows; begin += rows_per_chunk) {
        const std::size_t end = std::min(w.rows, begin + rows_per_chunk);
        SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));  // the previous chunk has left the staging buffer
        for (std::size_t r = begin; r < end; ++r) {
            cpu::dequantize_row(w, r, row.data());
            std::byte* out = staging.data() + (r - begin) * row_bytes;
            for (std::size_t c = 0; c < w.cols; ++c) {
                if (precision == Precision::f32) {
                    std::memcpy(out + 4 * c, &row[c], 4);
                } else {
                    const std::uint16_t bits =
                        precision == Precision::f16 ? cpu::float_to_half(row[c]) : cpu::float_to_bf16(row[c]);
                    std::memcpy(out + 2 * c, &bits, 2);
                }
            }
        }
        copy_to_device(device + (first_row + begin) * row_bytes, staging.data(), (end - begin) * row_bytes, stream);
    }
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// The device twin of detail::synthetic_normal (models/synthetic.hpp): the same
// integer mixing and the same float operations, hence the same value.
__device__ inline std::uint64_t device_mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ inline float device_synthetic_normal(std::uint64_t stream, std::uint64_t index) {
    const std::uint64_t bits = device_mix64(stream + device_mix64(index + 0x9E3779B97F4A7C15ull));
    const std::uint32_t sum = static_cast<std::uint32_t>(bits & 0xFFFF) + static_cast<std::uint32_t>((bits >> 16) & 0xFFFF) +
                              static_cast<std::uint32_t>((bits >> 32) & 0xFFFF) + static_cast<std::uint32_t>(bits >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;
    return __fmul_rn(static_cast<float>(sum) - 2.0f * 65535.5f, kScale);  // no fused multiply-add: as on the host
}

// out[i] = std_dev * N(stream, i) for i < count, rounded to T.
template <class T>
__global__ void synthetic_matrix_kernel(T* out, std::size_t count, std::uint64_t stream, float std_dev) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        out[i] = from_float<T>(__fmul_rn(std_dev, device_synthetic_normal(stream, i)));
}

inline void generate_matrix_rows(std::byte* device, std::size_t first_row, std::size_t rows, std::size_t cols,
                                 std::uint64_t stream_id, float std_dev, Precision precision, cudaStream_t stream) {
    dispatch_precision(precision, [&]<class T>() {
        T* out = reinterpret_cast<T*>(device) + first_row * cols;
        const std::size_t count = rows * cols;
        const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((count + 255) / 256, 65535));
        synthetic_matrix_kernel<T><<<blocks, 256, 0, stream>>>(out, count, stream_id, std_dev);
        SPECDEC_CUDA_CHECK_LAUNCH();
    });
}

}  // namespace detail

// Uploads host weights (validated first), converting every matrix to `precision`.
inline DeviceLlamaWeights upload_weights(const LlamaWeights& host, Precision precision, cudaStream_t stream) {
    for (const LlamaLayerWeights& layer : host.layers) {
        if (!layer.query_bias.empty() || !layer.key_bias.empty() || !layer.value_bias.empty()) {
            throw Error("specdec::cuda: attention biases (qwen2) are not implemented on the GPU; expected a model without "
                        "attn_q/attn_k/attn_v biases, or the CPU model");
        }
    }
    host.validate();
    const LlamaConfig& c = host.config;
    const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    DeviceLlamaWeights w;
    w.config = c;
    w.precision = precision;
    PinnedBuffer<std::byte> staging;
    auto upload = [&](const WeightMatrix& m) {
        DeviceBuffer<std::byte> buffer = detail::allocate_matrix(m.rows, m.cols, precision);
        detail::upload_matrix_rows(m, buffer.data(), 0, precision, stream, staging);
        return buffer;
    };
    w.token_embedding = upload(host.token_embedding);
    w.layers.resize(c.layer_count);
    for (std::size_t i = 0; i < c.layer_count; ++i) {
        const LlamaLayerWeights& h = host.layers[i];
        DeviceLayerWeights& d = w.layers[i];
        d.attention_norm = detail::upload_floats(h.attention_norm, stream);
        d.ffn_norm = detail::upload_floats(h.ffn_norm, stream);
        d.qkv = detail::allocate_matrix(dim + 2 * kv, dim, precision);
        detail::upload_matrix_rows(h.query, d.qkv.data(), 0, precision, stream, staging);
        detail::upload_matrix_rows(h.key, d.qkv.data(), dim, precision, stream, staging);
        detail::upload_matrix_rows(h.value, d.qkv.data(), dim + kv, precision, stream, staging);
        d.attention_output = upload(h.attention_output);
        d.gate_up = detail::allocate_matrix(2 * ffn, dim, precision);
        detail::upload_matrix_rows(h.ffn_gate, d.gate_up.data(), 0, precision, stream, staging);
        detail::upload_matrix_rows(h.ffn_up, d.gate_up.data(), ffn, precision, stream, staging);
        d.down = upload(h.ffn_down);
    }
    w.output_norm = detail::upload_floats(host.output_norm, stream);
    w.output = upload(host.output);
    return w;
}

// The first `layers` layers of the synthetic model `shape` with `seed`,
// generated on the device: what detail::synthetic_weights (models/synthetic.hpp)
// builds on the host for storage type F32, rounded once to `precision`.
// (A host F16 model therefore equals the device f16 model bit for bit.)
// layers = shape.config.layer_count gives the target; fewer layers give the
// family's early-exit draft, which shares the target's embedding and head.
inline DeviceLlamaWeights generate_synthetic_weights(const SyntheticShape& shape, std::uint64_t seed,
                                                     std::size_t layers, Precision precision, cudaStream_t stream) {
    using specdec::detail::synthetic_stream;
    namespace slot = specdec::detail;
    DeviceLlamaWeights w;
    w.config = shape.config;
    w.config.layer_count = layers;
    w.config.validate();
    w.precision = precision;
    const LlamaConfig& c = w.config;
    const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    // The standard deviations of models/synthetic.hpp, computed by the same host expressions.
    const float input_std = 1.0f / std::sqrt(static_cast<float>(dim));
    const float output_std = shape.residual_scale * input_std;
    const float down_std = shape.residual_scale / std::sqrt(static_cast<float>(ffn));
    const float head_std = shape.logit_std / std::sqrt(static_cast<float>(dim));
    auto generate = [&](DeviceBuffer<std::byte>& buffer, std::size_t first_row, std::size_t layer, std::size_t which,
                        std::size_t rows, std::size_t cols, float std_dev) {
        detail::generate_matrix_rows(buffer.data(), first_row, rows, cols, synthetic_stream(seed, layer, which), std_dev,
                                     precision, stream);
    };
    const std::vector<float> ones(dim, 1.0f);
    w.token_embedding = detail::allocate_matrix(c.vocab_size, dim, precision);
    generate(w.token_embedding, 0, slot::kGlobalLayer, slot::slot_embedding, c.vocab_size, dim, 1.0f);
    w.layers.resize(layers);
    for (std::size_t i = 0; i < layers; ++i) {
        DeviceLayerWeights& d = w.layers[i];
        d.attention_norm = detail::upload_floats(ones, stream);
        d.ffn_norm = detail::upload_floats(ones, stream);
        d.qkv = detail::allocate_matrix(dim + 2 * kv, dim, precision);
        generate(d.qkv, 0, i, slot::slot_q, dim, dim, input_std);
        generate(d.qkv, dim, i, slot::slot_k, kv, dim, input_std);
        generate(d.qkv, dim + kv, i, slot::slot_v, kv, dim, input_std);
        d.attention_output = detail::allocate_matrix(dim, dim, precision);
        generate(d.attention_output, 0, i, slot::slot_o, dim, dim, output_std);
        d.gate_up = detail::allocate_matrix(2 * ffn, dim, precision);
        generate(d.gate_up, 0, i, slot::slot_gate, ffn, dim, input_std);
        generate(d.gate_up, ffn, i, slot::slot_up, ffn, dim, input_std);
        d.down = detail::allocate_matrix(dim, ffn, precision);
        generate(d.down, 0, i, slot::slot_down, dim, ffn, down_std);
    }
    w.output_norm = detail::upload_floats(ones, stream);
    w.output = detail::allocate_matrix(c.vocab_size, dim, precision);
    generate(w.output, 0, slot::kGlobalLayer, slot::slot_output, c.vocab_size, dim, head_std);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
    return w;
}

}  // namespace specdec::cuda
