#pragma once
// Reading Llama weights out of a GGUF file (architecture "llama", the layout
// written by llama.cpp's converters); the CPU and CUDA models load through it.
// Matrices in F32/F16/BF16 and the quantised types of tensors/quant_blocks.hpp
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are used in place from the
// memory mapping, which the weights keep alive.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/models/llama_config.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec {

namespace detail {

[[noreturn]] inline void gguf_model_error(const gguf::File& file, const std::string& message) {
    throw Error(file.path().string() + ": " + message);
}

inline WeightType weight_type_of(const gguf::File& file, const gguf::TensorInfo& tensor) {
    switch (tensor.type) {
        case gguf::TensorType::f32: return WeightType::f32;
        case gguf::TensorType::f16: return WeightType::f16;
        case gguf::TensorType::bf16: return WeightType::bf16;
        case gguf::TensorType::q8_0: return WeightType::q8_0;
        case gguf::TensorType::q4_0: return WeightType::q4_0;
        case gguf::TensorType::q4_1: return WeightType::q4_1;
        case gguf::TensorType::q5_0: return WeightType::q5_0;
        case gguf::TensorType::q5_1: return WeightType::q5_1;
        case gguf::TensorType::q4_K: return WeightType::q4_k;
        case gguf::TensorType::q5_K: return WeightType::q5_k;
        case gguf::TensorType::q6_K: return WeightType::q6_k;
    }
    // The reader refuses other type ids when it opens the file; this guards a TensorInfo built by hand.
    const auto id = static_cast<std::uint32_t>(tensor.type);
    gguf_model_error(file, "unsupported tensor type " + std::to_string(id) + " (" + gguf::detail::ggml_type_name(id) +
                               ") of tensor '" + tensor.name + "'; supported: " + gguf::detail::supported_tensor_type_list());
}

inline const gguf::TensorInfo& required_tensor(const gguf::File& file, const std::string& name) {
    const gguf::TensorInfo* tensor = file.find_tensor(name);
    if (tensor == nullptr) gguf_model_error(file, "missing tensor " + name);
    return *tensor;
}

inline std::string shape_string(const std::vector<std::uint64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

// A 2-D tensor with GGUF shape [cols, rows] (shape[0] contiguous).
inline WeightMatrix gguf_matrix(const gguf::File& file, const gguf::TensorInfo& tensor, std::size_t rows, std::size_t cols) {
    if (tensor.shape.size() != 2 || tensor.shape[0] != cols || tensor.shape[1] != rows) {
        gguf_model_error(file, "tensor " + tensor.name + " has shape " + shape_string(tensor.shape) + ", expected [" +
                                   std::to_string(cols) + ", " + std::to_string(rows) + "] from the model's hyperparameters");
    }
    WeightMatrix w{weight_type_of(file, tensor), rows, cols, tensor.data};
    if (w.byte_size() != tensor.byte_size) {
        gguf_model_error(file, "tensor " + tensor.name + " holds " + std::to_string(tensor.byte_size) + " bytes, expected " +
                                   std::to_string(w.byte_size()));
    }
    return w;
}

inline std::vector<float> gguf_vector(const gguf::File& file, const gguf::TensorInfo& tensor, std::size_t size) {
    if (tensor.shape.size() != 1 || tensor.shape[0] != size) {
        gguf_model_error(file, "tensor " + tensor.name + " has shape " + shape_string(tensor.shape) + ", expected [" +
                                   std::to_string(size) + "]");
    }
    const WeightMatrix w{weight_type_of(file, tensor), 1, size, tensor.data};
    if (w.byte_size() != tensor.byte_size) gguf_model_error(file, "tensor " + tensor.name + " has an unexpected byte size");
    std::vector<float> values(size);
    cpu::dequantize_row(w, 0, values.data());
    return values;
}

}  // namespace detail

// Hyperparameters from the llama.* keys of a GGUF file.
inline LlamaConfig llama_config_from_gguf(const gguf::File& file) {
    const std::string architecture = file.find_string("general.architecture").value_or("");
    if (architecture != "llama") {
        detail::gguf_model_error(file, "general.architecture is \"" + architecture + "\", expected \"llama\"");
    }
    LlamaConfig c;
    c.context_length = file.get_uint("llama.context_length");
    c.embedding_dim = file.get_uint("llama.embedding_length");
    c.layer_count = file.get_uint("llama.block_count");
    c.feed_forward_dim = file.get_uint("llama.feed_forward_length");
    c.head_count = file.get_uint("llama.attention.head_count");
    c.kv_head_count = file.find_uint("llama.attention.head_count_kv").value_or(c.head_count);
    c.rope_dim = file.find_uint("llama.rope.dimension_count").value_or(0);
    c.rope_freq_base = static_cast<float>(file.find_float("llama.rope.freq_base").value_or(10000.0));
    c.rms_norm_eps = static_cast<float>(file.find_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5));
    if (const auto scaling = file.find_string("llama.rope.scaling.type"); scaling && *scaling != "none") {
        if (*scaling != "linear") {
            detail::gguf_model_error(file, "RoPE scaling \"" + *scaling + "\" is not supported (only linear)");
        }
        c.rope_linear_scale = static_cast<float>(file.find_float("llama.rope.scaling.factor").value_or(1.0));
    } else if (const auto scale = file.find_float("llama.rope.scale_linear")) {
        c.rope_linear_scale = static_cast<float>(*scale);  // the older key
    }
    if (const auto vocab = file.find_uint("llama.vocab_size")) {
        c.vocab_size = *vocab;
    } else if (const auto* embedding = file.find_tensor("token_embd.weight"); embedding && embedding->shape.size() == 2) {
        c.vocab_size = embedding->shape[1];
    }
    try {
        c.validate();
    } catch (const Error& e) {
        detail::gguf_model_error(file, e.what());
    }
    return c;
}

// Views of every tensor of a "llama" GGUF file; the weights share ownership of the file.
inline LlamaWeights llama_weights_from_gguf(std::shared_ptr<const gguf::File> file) {
    const gguf::File& f = *file;
    LlamaWeights w;
    w.config = llama_config_from_gguf(f);
    const LlamaConfig& c = w.config;
    const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    auto matrix = [&](const std::string& name, std::size_t rows, std::size_t cols) {
        return detail::gguf_matrix(f, detail::required_tensor(f, name), rows, cols);
    };
    auto vector = [&](const std::string& name) { return detail::gguf_vector(f, detail::required_tensor(f, name), dim); };
    w.token_embedding = matrix("token_embd.weight", c.vocab_size, dim);
    // Every layer has its own tensors: a block count beyond the tensor count is
    // a corrupt file, found before allocating that many layers.
    if (c.layer_count > f.tensors().size()) {
        detail::gguf_model_error(f, "llama.block_count = " + std::to_string(c.layer_count) + " but the file holds only " +
                                        std::to_string(f.tensors().size()) + " tensors; expected several per layer");
    }
    w.layers.resize(c.layer_count);
    for (std::size_t i = 0; i < c.layer_count; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LlamaLayerWeights& l = w.layers[i];
        l.attention_norm = vector(p + "attn_norm.weight");
        l.query = matrix(p + "attn_q.weight", dim, dim);
        l.key = matrix(p + "attn_k.weight", kv, dim);
        l.value = matrix(p + "attn_v.weight", kv, dim);
        l.attention_output = matrix(p + "attn_output.weight", dim, dim);
        l.ffn_norm = vector(p + "ffn_norm.weight");
        l.ffn_gate = matrix(p + "ffn_gate.weight", ffn, dim);
        l.ffn_up = matrix(p + "ffn_up.weight", ffn, dim);
        l.ffn_down = matrix(p + "ffn_down.weight", dim, ffn);
    }
    w.output_norm = vector("output_norm.weight");
    // No output.weight: the output head is tied to the token embedding.
    w.output = f.find_tensor("output.weight") ? matrix("output.weight", c.vocab_size, dim) : w.token_embedding;
    w.storage.push_back(std::move(file));
    return w;
}

}  // namespace specdec
