#pragma once
// The inverse of llama_gguf.hpp: a Llama-family model's hyperparameters and
// tensors as GGUF, under llama.cpp's names, so that the same bytes can be
// loaded back by specdec or run by another engine (specdec-bench
// --export-gguf writes the synthetic pair this way for llama.cpp). The
// architecture key is "qwen2" for rotate-half RoPE and "llama" otherwise,
// because that is how the loader and llama.cpp tell the two layouts apart.
// Only the model is written: a tokenizer (the tokenizer.ggml.* keys and
// <arch>.vocab_size) is the caller's to add before writing the file.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec {

// The GGUF tensor type that stores a WeightType's blocks byte for byte.
[[nodiscard]] inline gguf::TensorType gguf_tensor_type(WeightType type) {
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
    throw Error(std::string("GGUF export: weight type ") + weight_type_name(type) + " has no GGUF tensor type");
}

// A writer holding `weights` as the model named `name`. include_output =
// false leaves output.weight out, which makes the head tied to the token
// embedding when the file is loaded. The tensors point into `weights`, which
// must outlive the writer's write().
[[nodiscard]] inline gguf::Writer llama_gguf_writer(const LlamaWeights& weights, std::string_view name,
                                                    bool include_output) {
    const LlamaConfig& c = weights.config;
    const std::string arch = c.rope_style == RopeStyle::halves ? "qwen2" : "llama";
    const auto key = [&](const char* suffix) { return arch + "." + suffix; };
    const auto u32 = [](std::size_t value) { return static_cast<std::uint32_t>(value); };
    gguf::Writer writer;
    writer.add_string("general.architecture", arch).add_string("general.name", name);
    writer.add_uint32(key("context_length"), u32(c.context_length));
    writer.add_uint32(key("embedding_length"), u32(c.embedding_dim));
    writer.add_uint32(key("block_count"), u32(c.layer_count));
    writer.add_uint32(key("feed_forward_length"), u32(c.feed_forward_dim));
    writer.add_uint32(key("attention.head_count"), u32(c.head_count));
    writer.add_uint32(key("attention.head_count_kv"), u32(c.kv_heads()));
    writer.add_uint32(key("rope.dimension_count"), u32(c.rotary_dim()));
    writer.add_float32(key("rope.freq_base"), c.rope_freq_base);
    writer.add_float32(key("attention.layer_norm_rms_epsilon"), c.rms_norm_eps);
    if (c.rope_linear_scale != 1.0f) {
        writer.add_string(key("rope.scaling.type"), "linear").add_float32(key("rope.scaling.factor"), c.rope_linear_scale);
    }
    const auto matrix = [&](const std::string& tensor, const WeightMatrix& m) {
        writer.add_tensor(tensor, gguf_tensor_type(m.type), {m.cols, m.rows}, std::span<const std::byte>(m.data, m.byte_size()));
    };
    const auto vector = [&](const std::string& tensor, const std::vector<float>& v) {
        if (!v.empty()) writer.add_tensor_f32(tensor, {v.size()}, v);
    };
    matrix("token_embd.weight", weights.token_embedding);
    vector("rope_freqs.weight", c.rope_frequency_factors);
    for (std::size_t i = 0; i < weights.layers.size(); ++i) {
        const LlamaLayerWeights& l = weights.layers[i];
        const std::string p = "blk." + std::to_string(i) + ".";
        vector(p + "attn_norm.weight", l.attention_norm);
        matrix(p + "attn_q.weight", l.query);
        matrix(p + "attn_k.weight", l.key);
        matrix(p + "attn_v.weight", l.value);
        vector(p + "attn_q.bias", l.query_bias);
        vector(p + "attn_k.bias", l.key_bias);
        vector(p + "attn_v.bias", l.value_bias);
        matrix(p + "attn_output.weight", l.attention_output);
        vector(p + "ffn_norm.weight", l.ffn_norm);
        matrix(p + "ffn_gate.weight", l.ffn_gate);
        matrix(p + "ffn_up.weight", l.ffn_up);
        matrix(p + "ffn_down.weight", l.ffn_down);
    }
    vector("output_norm.weight", weights.output_norm);
    if (include_output) matrix("output.weight", weights.output);
    return writer;
}

// The same, with output.weight written exactly when the model's head is not
// tied to its token embedding.
[[nodiscard]] inline gguf::Writer llama_gguf_writer(const LlamaWeights& weights, std::string_view name) {
    return llama_gguf_writer(weights, name, !weights.tied_output());
}

}  // namespace specdec
