#pragma once
// The synthetic model family: seeded, deterministic Llama-architecture models
// that need no file, so that the library, its tests and its benchmarks work
// out of the box. Weights are a pure function of (seed, tensor, element) and
// are generated directly in their storage type, in parallel, in seconds.
//
// What makes random weights behave like a language model: an untied output
// head (tied random embeddings make greedy decoding repeat the current
// token), N(0, 1) embeddings, attention/FFN input matrices N(0, 1/dim), the o
// and down projections scaled by `residual_scale`, and an output head whose
// logit standard deviation places the next-token distribution at a realistic
// entropy (a few nats, top-1 probability near one half). A small residual
// scale keeps the later layers' contributions small, so an early exit after
// the first layer predicts much like the whole model: that is what makes the
// default draft (early exit, quantised to Q8_0) both cheap and well accepted.
// Drafts are derived from the target's own weights (quantised copy, early
// exit, or both) so their acceptance is realistic; an unrelated model of the
// same shape is the control.
//
// The family's statistics (entropy, top-1 probability, how often greedy text
// repeats, the acceptance of each draft kind) are measured by measure_pair()
// in decoding/pair_statistics.hpp and checked by the [slow] tests in
// tests/models/synthetic_model_test.cpp; the costs and speedups on a given
// machine come from specdec-bench (docs/results.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/backends/cpu/thread_pool.hpp"
#include "specdec/tensors/weight_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec {

// A named member of the family: the shape, the storage type of the target,
// and the two knobs that place its output distribution.
struct SyntheticShape {
    std::string size;
    LlamaConfig config;
    WeightType storage = WeightType::f16;
    float logit_std = 4.0f;        // standard deviation of a logit (output head std * sqrt(dim))
    float residual_scale = 0.25f;  // o / down projections relative to N(0, 1/fan_in)
    std::size_t early_exit_layers = 1;  // depth of the early-exit drafts
};

enum class SyntheticDraftKind {
    quantized_q4,      // the target's weights in Q4_0, full depth
    quantized_q8,      // the target's weights in Q8_0, full depth
    early_exit,        // the target's first layers (SyntheticShape::early_exit_layers), target storage
    early_exit_q4,     // early exit and Q4_0
    early_exit_q8,     // early exit and Q8_0: the recommended draft (as cheap as Q4_0 on the CPU, closer to the target)
    unrelated,         // same shape, independent seed: the control, acceptance near zero
};

[[nodiscard]] inline const char* synthetic_draft_kind_name(SyntheticDraftKind kind) noexcept {
    switch (kind) {
        case SyntheticDraftKind::quantized_q4: return "q4_0";
        case SyntheticDraftKind::quantized_q8: return "q8_0";
        case SyntheticDraftKind::early_exit: return "early-exit";
        case SyntheticDraftKind::early_exit_q4: return "early-exit-q4_0";
        case SyntheticDraftKind::early_exit_q8: return "early-exit-q8_0";
        case SyntheticDraftKind::unrelated: return "unrelated";
    }
    return "unknown";
}

struct SyntheticOptions {
    std::string size = "tiny";     // "tiny" (tests, ~0.5M params) or "100m" (benchmarks, ~134M params, F16)
    std::uint64_t seed = 1;
    std::optional<WeightType> target_storage{};        // override the shape's storage type
    std::optional<std::size_t> early_exit_layers{};    // override the shape's early-exit depth
    std::optional<float> logit_std{};                   // override the shape's output head scale
    std::optional<float> residual_scale{};              // override the shape's residual scale
    std::size_t threads = 0;                          // see LlamaOptions
    std::size_t max_context = 0;                      // see LlamaOptions
    std::shared_ptr<cpu::ThreadPool> thread_pool{};     // share one pool between target and draft
    std::size_t sequences = 1;                        // KV cache slots, see LlamaOptions
    bool batch_invariant = true;                      // see LlamaOptions
};

namespace detail {

// Looks `size` up in a table of named shapes; throws naming the known ones.
template <std::size_t N>
[[nodiscard]] SyntheticShape find_synthetic_shape(std::string_view size, const SyntheticShape (&shapes)[N]) {
    std::string known;
    for (const SyntheticShape& shape : shapes) {
        if (shape.size == size) return shape;
        known += (known.empty() ? "\"" : ", \"") + shape.size + "\"";
    }
    throw Error("unknown synthetic model size \"" + std::string(size) + "\"; expected one of " + known);
}

}  // namespace detail

// The named sizes. Throws specdec::Error for an unknown name.
[[nodiscard]] inline SyntheticShape synthetic_shape(std::string_view size) {
    static const SyntheticShape shapes[] = {
        // ~0.5M parameters, grouped-query attention: fast enough for unit tests.
        {.size = "tiny",
         .config = {.vocab_size = 512, .context_length = 512, .embedding_dim = 96, .layer_count = 4,
                    .head_count = 4, .kv_head_count = 2, .feed_forward_dim = 256},
         .storage = WeightType::f32,
         .logit_std = 4.0f,
         .residual_scale = 0.25f,
         .early_exit_layers = 2},
        // The stories110M shape (llama2.c) with an untied head: the same bytes
        // per decoded token as a real 110M F16 Llama. A small residual scale,
        // as the CUDA sizes use: each layer refines the residual stream a
        // little (like a trained model's later layers), so a one-layer early
        // exit approximates the full stack the way a distilled draft does,
        // while the target keeps a peaked, varied next-token distribution.
        {.size = "100m",
         .config = {.vocab_size = 32000, .context_length = 2048, .embedding_dim = 768, .layer_count = 12,
                    .head_count = 12, .kv_head_count = 12, .feed_forward_dim = 2048},
         .storage = WeightType::f16,
         .logit_std = 5.0f,
         .residual_scale = 0.05f,
         .early_exit_layers = 1},
    };
    return detail::find_synthetic_shape(size, shapes);
}

namespace detail {

// splitmix64's finaliser: a strong 64-bit mixer, enough to make every
// (seed, tensor, element) an independent-looking draw.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Approximately N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall),
// standardised. One hash per value keeps generation at ~1 ns per weight; the
// tails are bounded at +-3.46, which random weights do not miss.
[[nodiscard]] inline float synthetic_normal(std::uint64_t stream, std::uint64_t index) noexcept {
    const std::uint64_t bits = mix64(stream + mix64(index + 0x9E3779B97F4A7C15ull));
    const std::uint32_t sum = static_cast<std::uint32_t>(bits & 0xFFFF) + static_cast<std::uint32_t>((bits >> 16) & 0xFFFF) +
                              static_cast<std::uint32_t>((bits >> 32) & 0xFFFF) + static_cast<std::uint32_t>(bits >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16: unit variance
    return (static_cast<float>(sum) - 2.0f * 65535.5f) * kScale;
}

// Identifies a tensor's random stream: (seed, layer, slot).
[[nodiscard]] constexpr std::uint64_t synthetic_stream(std::uint64_t seed, std::size_t layer, std::size_t slot) noexcept {
    return mix64(seed * 0x2545F4914F6CDD1Dull + (static_cast<std::uint64_t>(layer) << 8) + slot + 1);
}

enum SyntheticSlot : std::size_t { slot_q, slot_k, slot_v, slot_o, slot_gate, slot_up, slot_down, slot_embedding, slot_output };
inline constexpr std::size_t kGlobalLayer = 0xFFFF;

// Generates a rows x cols matrix with element std `std_dev` in `type`, owned by `storage`.
inline WeightMatrix synthetic_matrix(cpu::ThreadPool& pool, std::vector<std::shared_ptr<const void>>& storage,
                                     std::uint64_t stream, std::size_t rows, std::size_t cols, float std_dev, WeightType type) {
    const std::size_t row_bytes = weight_row_bytes(type, cols);
    auto buffer = std::make_shared<std::vector<std::byte>>(rows * row_bytes);
    std::byte* out = buffer->data();
    constexpr std::size_t kRowsPerTask = 64;
    pool.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::size_t task) {
        thread_local std::vector<float> values;
        values.resize(cols);
        const std::size_t end = std::min(rows, (task + 1) * kRowsPerTask);
        for (std::size_t r = task * kRowsPerTask; r < end; ++r) {
            for (std::size_t k = 0; k < cols; ++k) values[k] = std_dev * synthetic_normal(stream, r * cols + k);
            cpu::quantize_row(type, values.data(), cols, out + r * row_bytes);
        }
    });
    storage.push_back(buffer);
    return WeightMatrix{type, rows, cols, out};
}

// The weights of the first `layers` layers of the synthetic model `shape` with
// `seed`, every matrix stored as `type` (the embedding as `embedding_type`).
inline LlamaWeights synthetic_weights(cpu::ThreadPool& pool, const SyntheticShape& shape, std::uint64_t seed,
                                      std::size_t layers, WeightType type, WeightType embedding_type) {
    LlamaWeights w;
    w.config = shape.config;
    w.config.layer_count = layers;
    const LlamaConfig& c = w.config;
    const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    const float input_std = 1.0f / std::sqrt(static_cast<float>(dim));
    const float output_std = shape.residual_scale * input_std;
    const float down_std = shape.residual_scale / std::sqrt(static_cast<float>(ffn));
    auto matrix = [&](std::size_t layer, std::size_t slot, std::size_t rows, std::size_t cols, float std_dev, WeightType t) {
        return synthetic_matrix(pool, w.storage, synthetic_stream(seed, layer, slot), rows, cols, std_dev, t);
    };
    w.token_embedding = matrix(kGlobalLayer, slot_embedding, c.vocab_size, dim, 1.0f, embedding_type);
    w.layers.resize(layers);
    for (std::size_t i = 0; i < layers; ++i) {
        LlamaLayerWeights& l = w.layers[i];
        l.attention_norm.assign(dim, 1.0f);
        l.ffn_norm.assign(dim, 1.0f);
        l.query = matrix(i, slot_q, dim, dim, input_std, type);
        l.key = matrix(i, slot_k, kv, dim, input_std, type);
        l.value = matrix(i, slot_v, kv, dim, input_std, type);
        l.attention_output = matrix(i, slot_o, dim, dim, output_std, type);
        l.ffn_gate = matrix(i, slot_gate, ffn, dim, input_std, type);
        l.ffn_up = matrix(i, slot_up, ffn, dim, input_std, type);
        l.ffn_down = matrix(i, slot_down, dim, ffn, down_std, type);
    }
    w.output_norm.assign(dim, 1.0f);
    w.output = matrix(kGlobalLayer, slot_output, c.vocab_size, dim, shape.logit_std / std::sqrt(static_cast<float>(dim)), type);
    return w;
}

inline SyntheticShape resolved_shape(const SyntheticOptions& options) {
    SyntheticShape shape = synthetic_shape(options.size);
    if (options.target_storage) shape.storage = *options.target_storage;
    if (options.early_exit_layers) shape.early_exit_layers = *options.early_exit_layers;
    if (options.logit_std) shape.logit_std = *options.logit_std;
    if (options.residual_scale) shape.residual_scale = *options.residual_scale;
    if (shape.early_exit_layers == 0 || shape.early_exit_layers > shape.config.layer_count) {
        throw Error("synthetic early_exit_layers " + std::to_string(shape.early_exit_layers) + " must be in [1, " +
                    std::to_string(shape.config.layer_count) + "]");
    }
    return shape;
}

inline LlamaOptions synthetic_model_options(const SyntheticOptions& options, std::string name) {
    LlamaOptions o;
    o.threads = options.threads;
    o.max_context = options.max_context;
    o.sequences = options.sequences;
    o.batch_invariant = options.batch_invariant;
    o.thread_pool = options.thread_pool ? options.thread_pool : std::make_shared<cpu::ThreadPool>(options.threads);
    o.name = std::move(name);
    return o;
}

}  // namespace detail

// The target of the synthetic pair of `options.size` and `options.seed`.
[[nodiscard]] inline LlamaModel make_synthetic_target(const SyntheticOptions& options = {}) {
    const SyntheticShape shape = detail::resolved_shape(options);
    LlamaOptions model_options = detail::synthetic_model_options(
        options, "synthetic-" + shape.size + "-" + weight_type_name(shape.storage) + "-seed" + std::to_string(options.seed));
    LlamaWeights weights = detail::synthetic_weights(*model_options.thread_pool, shape, options.seed,
                                                     shape.config.layer_count, shape.storage, shape.storage);
    return LlamaModel(std::move(weights), std::move(model_options));
}

// The recommended draft: the target's first layer(s) with its embedding and
// output head, in Q8_0, like the small, cheap drafts real deployments pair
// with a target (an order of magnitude fewer bytes per token). Full-depth
// quantised copies are accepted more often but cost a large fraction of a
// target forward, which caps their speedup; the Q8_0 integer kernel is about
// as fast as the Q4_0 one (both compute-bound) and stays closer to the target.
inline constexpr SyntheticDraftKind kDefaultSyntheticDraft = SyntheticDraftKind::early_exit_q8;

// A draft for make_synthetic_target(options), derived from the same weights
// (or, for `unrelated`, from an independent seed).
[[nodiscard]] inline LlamaModel make_synthetic_draft(const SyntheticOptions& options = {},
                                                     SyntheticDraftKind kind = kDefaultSyntheticDraft) {
    const SyntheticShape shape = detail::resolved_shape(options);
    std::size_t layers = shape.config.layer_count;
    WeightType type = shape.storage;
    std::uint64_t seed = options.seed;
    switch (kind) {
        case SyntheticDraftKind::quantized_q4: type = WeightType::q4_0; break;
        case SyntheticDraftKind::quantized_q8: type = WeightType::q8_0; break;
        case SyntheticDraftKind::early_exit: layers = shape.early_exit_layers; break;
        case SyntheticDraftKind::early_exit_q4:
            layers = shape.early_exit_layers;
            type = WeightType::q4_0;
            break;
        case SyntheticDraftKind::early_exit_q8:
            layers = shape.early_exit_layers;
            type = WeightType::q8_0;
            break;
        case SyntheticDraftKind::unrelated: seed = detail::mix64(options.seed ^ 0xD1B54A32D192ED03ull); break;
    }
    LlamaOptions model_options = detail::synthetic_model_options(
        options, "synthetic-" + shape.size + "-draft-" + synthetic_draft_kind_name(kind) + "-seed" + std::to_string(options.seed));
    // The embedding table is only looked up, never streamed: keep it in the
    // target's storage so that quantisation error comes from the matrices.
    LlamaWeights weights = detail::synthetic_weights(*model_options.thread_pool, shape, seed, layers, type, shape.storage);
    return LlamaModel(std::move(weights), std::move(model_options));
}

struct SyntheticPair {
    LlamaModel target;
    LlamaModel draft;
};

// Target and draft sharing one thread pool (options.thread_pool, or a new one
// of options.threads threads), so that the two never compete for the cores.
[[nodiscard]] inline SyntheticPair make_synthetic_pair(SyntheticOptions options = {},
                                                      SyntheticDraftKind kind = kDefaultSyntheticDraft) {
    if (!options.thread_pool) options.thread_pool = std::make_shared<cpu::ThreadPool>(options.threads);
    LlamaModel target = make_synthetic_target(options);
    LlamaModel draft = make_synthetic_draft(options, kind);
    return SyntheticPair{std::move(target), std::move(draft)};
}

}  // namespace specdec
