#pragma once
// The synthetic family on the device: the CPU family's sizes ("tiny",
// "100m") plus sizes only a GPU can run, generated directly in device memory
// from the seed (no host copy of a multi-GB model is ever made). The draft is
// the family's early exit: the target's first layers with the target's own
// embedding and output head, so its acceptance is that of a real
// self-speculative drafter, and it costs (draft layers + head) / (all layers + head)
// of the target's bytes per token.
#include <cstdint>
#include <string>
#include <string_view>

#include "specdec/models/llama_model.cuh"
#include "specdec/models/synthetic.hpp"

namespace specdec::cuda {

// "tiny" and "100m" are models/synthetic.hpp's shapes; "1b" and "3b" exist only here.
[[nodiscard]] inline SyntheticShape cuda_synthetic_shape(std::string_view size) {
    if (size != "1b" && size != "3b") return synthetic_shape(size);
    // Deep random stacks drift far from what their first layer computes; a
    // small residual scale keeps a one-layer early exit meaningful (larger
    // scales lower the early exit's acceptance quickly: measure_pair() in
    // decoding/pair_statistics.hpp shows it on a scaled-down analog on the CPU).
    static const SyntheticShape shapes[] = {
        // ~1.2B parameters (TinyLlama-like widths, 16 layers).
        {.size = "1b",
         .config = {.vocab_size = 32000, .context_length = 4096, .embedding_dim = 2048, .layer_count = 16,
                    .head_count = 32, .kv_head_count = 8, .feed_forward_dim = 8192},
         .storage = WeightType::f16,
         .logit_std = 4.0f,
         .residual_scale = 0.05f,
         .early_exit_layers = 1},
        // ~2.8B parameters (Llama-3.2-3B-like widths, 26 layers).
        {.size = "3b",
         .config = {.vocab_size = 32000, .context_length = 4096, .embedding_dim = 3072, .layer_count = 26,
                    .head_count = 24, .kv_head_count = 8, .feed_forward_dim = 8192},
         .storage = WeightType::f16,
         .logit_std = 4.0f,
         .residual_scale = 0.05f,
         .early_exit_layers = 1},
    };
    return ::specdec::detail::find_synthetic_shape(size, shapes);
}

struct CudaSyntheticOptions {
    std::string size = "3b";
    std::uint64_t seed = 1;
    std::size_t draft_layers = 0;      // 0 = the shape's early_exit_layers
    float residual_scale = 0.0f;       // 0 = the shape's
    float logit_std = 0.0f;            // 0 = the shape's
    CudaModelOptions model{};
};

namespace detail {
inline SyntheticShape resolved_cuda_shape(const CudaSyntheticOptions& options) {
    SyntheticShape shape = cuda_synthetic_shape(options.size);
    if (options.residual_scale > 0.0f) shape.residual_scale = options.residual_scale;
    if (options.logit_std > 0.0f) shape.logit_std = options.logit_std;
    if (options.draft_layers > 0) shape.early_exit_layers = options.draft_layers;
    if (shape.early_exit_layers == 0 || shape.early_exit_layers > shape.config.layer_count) {
        throw Error("cuda backend: synthetic draft layers " + std::to_string(shape.early_exit_layers) +
                    " must be in [1, " + std::to_string(shape.config.layer_count) + "]");
    }
    return shape;
}
}  // namespace detail

[[nodiscard]] inline CudaLlamaModel make_cuda_synthetic_target(const CudaSyntheticOptions& options = {}) {
    const SyntheticShape shape = detail::resolved_cuda_shape(options);
    return CudaLlamaModel::synthetic(shape, options.seed, shape.config.layer_count, options.model);
}

[[nodiscard]] inline CudaLlamaModel make_cuda_synthetic_draft(const CudaSyntheticOptions& options = {}) {
    const SyntheticShape shape = detail::resolved_cuda_shape(options);
    return CudaLlamaModel::synthetic(shape, options.seed, shape.early_exit_layers, options.model);
}

}  // namespace specdec::cuda
