#pragma once
// Hyperparameters of a Llama-architecture transformer (the names follow the
// GGUF llama.* keys they are read from).
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec {

// Which components of a head RoPE rotates together: llama.cpp's "normal" RoPE
// (the "llama" architecture, whose converter permutes the Q/K rows for it) and
// its "neox" RoPE (qwen2 and Hugging Face's rotate_half layout).
enum class RopeStyle {
    adjacent_pairs,  // (x[2i], x[2i+1])
    halves,          // (x[i], x[i + rotary_dim/2])
};

struct LlamaConfig {
    std::size_t vocab_size = 0;
    std::size_t context_length = 0;     // llama.context_length: positions the model was trained for
    std::size_t embedding_dim = 0;      // llama.embedding_length
    std::size_t layer_count = 0;        // llama.block_count
    std::size_t head_count = 0;         // llama.attention.head_count
    std::size_t kv_head_count = 0;      // llama.attention.head_count_kv (grouped-query attention); 0 = head_count
    std::size_t feed_forward_dim = 0;   // llama.feed_forward_length
    std::size_t rope_dim = 0;           // llama.rope.dimension_count; 0 = head_dim()
    float rope_freq_base = 10000.0f;    // llama.rope.freq_base
    float rope_linear_scale = 1.0f;     // positions are divided by this (linear RoPE scaling)
    float rms_norm_eps = 1e-5f;         // llama.attention.layer_norm_rms_epsilon
    RopeStyle rope_style = RopeStyle::adjacent_pairs;
    // One divisor per rotary pair's frequency (the tensor rope_freqs.weight, which
    // is how GGUF files carry Llama 3's frequency scaling); empty = all 1.
    std::vector<float> rope_frequency_factors{};

    [[nodiscard]] std::size_t kv_heads() const noexcept { return kv_head_count == 0 ? head_count : kv_head_count; }
    [[nodiscard]] std::size_t head_dim() const noexcept { return head_count == 0 ? 0 : embedding_dim / head_count; }
    [[nodiscard]] std::size_t kv_dim() const noexcept { return kv_heads() * head_dim(); }
    [[nodiscard]] std::size_t rotary_dim() const noexcept { return rope_dim == 0 ? head_dim() : rope_dim; }

    // Angular frequency of each rotary pair: base^(-2i / rotary_dim) / factor[i].
    // Both backends use these values (computed in double, then rounded once).
    [[nodiscard]] std::vector<float> rope_inverse_frequencies() const {
        const std::size_t pairs = rotary_dim() / 2;
        std::vector<float> frequencies(pairs);
        for (std::size_t i = 0; i < pairs; ++i) {
            double f = std::pow(static_cast<double>(rope_freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim()));
            if (!rope_frequency_factors.empty()) f /= static_cast<double>(rope_frequency_factors[i]);
            frequencies[i] = static_cast<float>(f);
        }
        return frequencies;
    }

    // Throws specdec::Error naming the first inconsistent field.
    void validate() const {
        auto fail = [](const std::string& what) { throw Error("invalid Llama config: " + what); };
        if (vocab_size == 0) fail("vocab_size is 0");
        if (context_length == 0) fail("context_length is 0");
        if (embedding_dim == 0) fail("embedding_dim is 0");
        if (layer_count == 0) fail("layer_count is 0");
        if (head_count == 0) fail("head_count is 0");
        if (feed_forward_dim == 0) fail("feed_forward_dim is 0");
        if (embedding_dim % head_count != 0) {
            fail("embedding_dim " + std::to_string(embedding_dim) + " is not a multiple of head_count " +
                 std::to_string(head_count));
        }
        if (head_count % kv_heads() != 0) {
            fail("head_count " + std::to_string(head_count) + " is not a multiple of kv_head_count " +
                 std::to_string(kv_heads()));
        }
        if (rotary_dim() > head_dim() || rotary_dim() % 2 != 0) {
            fail("rope_dim " + std::to_string(rotary_dim()) + " must be even and at most the head size " +
                 std::to_string(head_dim()));
        }
        if (!(rope_freq_base > 0.0f)) fail("rope_freq_base must be positive");
        if (!(rope_linear_scale > 0.0f)) fail("rope_linear_scale must be positive");
        if (!(rms_norm_eps >= 0.0f)) fail("rms_norm_eps must be non-negative");
        if (!rope_frequency_factors.empty()) {
            if (rope_frequency_factors.size() != rotary_dim() / 2) {
                fail("rope_frequency_factors has " + std::to_string(rope_frequency_factors.size()) +
                     " values; expected one per rotary pair (" + std::to_string(rotary_dim() / 2) + ")");
            }
            for (const float factor : rope_frequency_factors) {
                if (!(factor > 0.0f) || !std::isfinite(factor)) fail("rope frequency factor " + std::to_string(factor) + " is not a positive number");
            }
        }
    }
};

}  // namespace specdec
