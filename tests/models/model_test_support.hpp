#pragma once
// Helpers of the model tests: logits comparison, and writing LlamaWeights to
// a GGUF file (to round-trip models and to craft files that disagree with
// their own hyperparameters).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "specdec/formats/gguf_writer.hpp"
#include "specdec/models/llama_model.hpp"

namespace specdec::test {

// Copies the rows of a LogitsView (valid only until the model's next call).
inline std::vector<std::vector<float>> copy_rows(const LogitsView& view) {
    std::vector<std::vector<float>> rows;
    for (std::size_t i = 0; i < view.rows; ++i) rows.emplace_back(view.row(i).begin(), view.row(i).end());
    return rows;
}

inline float max_abs_difference(std::span<const float> a, std::span<const float> b) {
    float worst = 0.0f;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return a.size() == b.size() ? worst : INFINITY;
}

// max |a - b| relative to max |b|: for logits whose summation order may differ.
inline float relative_difference(std::span<const float> a, std::span<const float> b) {
    float scale = 0.0f;
    for (const float v : b) scale = std::max(scale, std::fabs(v));
    return max_abs_difference(a, b) / std::max(scale, 1e-30f);
}

// Logits of feeding `tokens` one at a time from an empty cache.
inline std::vector<std::vector<float>> logits_one_by_one(LlamaModel& model, std::span<const Token> tokens) {
    model.truncate(0);
    std::vector<std::vector<float>> rows;
    for (const Token t : tokens) {
        const LogitsView view = model.forward(std::span<const Token>(&t, 1));
        rows.emplace_back(view.row(0).begin(), view.row(0).end());
    }
    return rows;
}

inline Token argmax(std::span<const float> logits) {
    return static_cast<Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

inline gguf::TensorType gguf_type_of(WeightType type) {
    switch (type) {
        case WeightType::f32: return gguf::TensorType::f32;
        case WeightType::f16: return gguf::TensorType::f16;
        case WeightType::bf16: return gguf::TensorType::bf16;
        case WeightType::q8_0: return gguf::TensorType::q8_0;
        case WeightType::q4_0: return gguf::TensorType::q4_0;
        case WeightType::q4_1: return gguf::TensorType::q4_1;
        case WeightType::q5_0: return gguf::TensorType::q5_0;
        case WeightType::q5_1: return gguf::TensorType::q5_1;
        case WeightType::q4_k: return gguf::TensorType::q4_K;
        case WeightType::q5_k: return gguf::TensorType::q5_K;
        case WeightType::q6_k: return gguf::TensorType::q6_K;
    }
    return gguf::TensorType::f32;
}

// A GGUF writer holding the weights as llama.cpp would name them; `edit` may
// change the writer's content before it is returned (tests of bad files).
inline gguf::Writer llama_gguf_writer(const LlamaWeights& w, bool include_output = true) {
    gguf::Writer writer;
    const LlamaConfig& c = w.config;
    writer.add_string("general.architecture", "llama").add_string("general.name", "test-llama");
    writer.add_uint32("llama.context_length", static_cast<std::uint32_t>(c.context_length));
    writer.add_uint32("llama.embedding_length", static_cast<std::uint32_t>(c.embedding_dim));
    writer.add_uint32("llama.block_count", static_cast<std::uint32_t>(c.layer_count));
    writer.add_uint32("llama.feed_forward_length", static_cast<std::uint32_t>(c.feed_forward_dim));
    writer.add_uint32("llama.attention.head_count", static_cast<std::uint32_t>(c.head_count));
    writer.add_uint32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.kv_heads()));
    writer.add_uint32("llama.rope.dimension_count", static_cast<std::uint32_t>(c.rotary_dim()));
    writer.add_float32("llama.rope.freq_base", c.rope_freq_base);
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
    auto matrix = [&](const std::string& name, const WeightMatrix& m) {
        writer.add_tensor(name, gguf_type_of(m.type), {m.cols, m.rows}, std::span<const std::byte>(m.data, m.byte_size()));
    };
    auto vector = [&](const std::string& name, const std::vector<float>& v) {
        writer.add_tensor_f32(name, {v.size()}, v);
    };
    matrix("token_embd.weight", w.token_embedding);
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
        const LlamaLayerWeights& l = w.layers[i];
        const std::string p = "blk." + std::to_string(i) + ".";
        vector(p + "attn_norm.weight", l.attention_norm);
        matrix(p + "attn_q.weight", l.query);
        matrix(p + "attn_k.weight", l.key);
        matrix(p + "attn_v.weight", l.value);
        matrix(p + "attn_output.weight", l.attention_output);
        vector(p + "ffn_norm.weight", l.ffn_norm);
        matrix(p + "ffn_gate.weight", l.ffn_gate);
        matrix(p + "ffn_up.weight", l.ffn_up);
        matrix(p + "ffn_down.weight", l.ffn_down);
    }
    vector("output_norm.weight", w.output_norm);
    if (include_output) matrix("output.weight", w.output);
    return writer;
}

// A fresh file path under the system temp folder, removed at scope exit.
struct TemporaryFile {
    std::filesystem::path path;
    explicit TemporaryFile(const std::string& name)
        : path(std::filesystem::temp_directory_path() / ("specdec-model-test-" + std::to_string(::getpid()) + "-" + name)) {}
    ~TemporaryFile() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

}  // namespace specdec::test
