#pragma once
// Reading Llama-family weights out of a GGUF file (architectures "llama",
// including Llama 3 and Mistral, and "qwen2", in the layout written by
// llama.cpp's converters); the CPU and CUDA models load through it.
// Matrices in F32/F16/BF16 and the quantised types of tensors/quant_blocks.hpp
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are used in place from the
// memory mapping, which the weights keep alive.
#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
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

// The architectures the loader reads (general.architecture). Mistral and
// Llama 3 files use "llama"; Qwen2 and Qwen2.5 use "qwen2".
inline constexpr std::array<std::string_view, 2> supported_architectures{"llama", "qwen2"};

namespace detail {

inline std::string supported_architecture_list() {
    std::string list;
    for (const std::string_view name : supported_architectures) list += (list.empty() ? "" : ", ") + std::string(name);
    return list;
}

// Refuses every "<arch>.*" key the model below does not implement: a key it
// does not know may change the computation (sliding windows, soft-capping,
// mixtures of experts, YaRN...), and loading such a file anyway would give
// wrong logits without a word. Keys outside the architecture's namespace
// (general.*, tokenizer.*, quantize.*) describe the file, not the network.
inline void check_architecture_keys(const gguf::File& file, const std::string& arch, std::size_t head_dim) {
    static constexpr std::array<std::string_view, 14> read_keys{
        "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv", "rope.dimension_count", "rope.freq_base", "attention.layer_norm_rms_epsilon",
        "vocab_size", "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
        // Only YaRN reads these; informational otherwise.
        "rope.scaling.original_context_length"};
    const std::string prefix = arch + ".";
    for (const std::string& key : file.keys()) {
        if (key == "split.count" && file.find_uint(key).value_or(1) > 1) {
            gguf_model_error(file, "split.count is " + std::to_string(*file.find_uint(key)) +
                                       ": a model split over several files is not supported; expected one file "
                                       "(merge the parts with llama.cpp's llama-gguf-split --merge)");
        }
        if (key.rfind(prefix, 0) != 0) continue;
        const std::string_view name = std::string_view(key).substr(prefix.size());
        if (std::find(read_keys.begin(), read_keys.end(), name) != read_keys.end()) continue;
        // Informational: whether long-context fine-tuning followed the scaling, and
        // the original checkpoint's layout noted by llama.cpp's older converter.
        if (name == "rope.scaling.finetuned" || name == "tensor_data_layout") continue;
        if (name == "attention.key_length" || name == "attention.value_length") {
            const std::uint64_t length = file.get_uint(key);
            if (length != head_dim) {
                gguf_model_error(file, key + " is " + std::to_string(length) + ": a head size other than embedding_length / "
                                           "head_count is not supported; expected " + std::to_string(head_dim));
            }
            continue;
        }
        if (name == "expert_count" || name == "expert_used_count") {
            if (file.get_uint(key) == 0) continue;
            gguf_model_error(file, key + " is " + std::to_string(file.get_uint(key)) +
                                       ": mixture-of-experts models are not supported; expected a dense model");
        }
        if (name == "rope.scaling.attn_factor") {
            if (file.get_float(key) == 1.0) continue;
            gguf_model_error(file, key + " is " + std::to_string(file.get_float(key)) +
                                       ": attention scaling of RoPE is not supported; expected 1");
        }
        gguf_model_error(file, "metadata key " + key + " is not supported (it may change the computation, and the " + arch +
                                   " model here does not implement it); expected only the keys of a plain " + arch + " model");
    }
}

}  // namespace detail

// Hyperparameters from the "<arch>.*" keys of a GGUF file of a supported
// architecture; the RoPE frequency factors come from the tensor rope_freqs.weight.
inline LlamaConfig llama_config_from_gguf(const gguf::File& file) {
    const std::string arch = file.find_string("general.architecture").value_or("");
    if (std::find(supported_architectures.begin(), supported_architectures.end(), arch) == supported_architectures.end()) {
        detail::gguf_model_error(file, "architecture \"" + arch + "\" is not supported; expected one of: " +
                                           detail::supported_architecture_list() + " (Mistral and Llama 3 files use llama)");
    }
    const auto key = [&](const char* name) { return arch + "." + name; };
    LlamaConfig c;
    c.context_length = file.get_uint(key("context_length"));
    c.embedding_dim = file.get_uint(key("embedding_length"));
    c.layer_count = file.get_uint(key("block_count"));
    c.feed_forward_dim = file.get_uint(key("feed_forward_length"));
    c.head_count = file.get_uint(key("attention.head_count"));
    c.kv_head_count = file.find_uint(key("attention.head_count_kv")).value_or(c.head_count);
    c.rope_dim = file.find_uint(key("rope.dimension_count")).value_or(0);
    c.rope_freq_base = static_cast<float>(file.find_float(key("rope.freq_base")).value_or(10000.0));
    c.rms_norm_eps = static_cast<float>(file.find_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
    // llama.cpp's converters lay out "llama" Q/K rows for adjacent-pair RoPE and
    // leave qwen2's in Hugging Face's rotate-half layout.
    c.rope_style = arch == "qwen2" ? RopeStyle::halves : RopeStyle::adjacent_pairs;
    if (c.head_count != 0) detail::check_architecture_keys(file, arch, c.embedding_dim / c.head_count);
    // As llama.cpp reads them: the scaling factor divides positions whatever the
    // type (none or linear); the other types change the rotation itself.
    const std::string scaling = file.find_string(key("rope.scaling.type")).value_or("none");
    if (scaling != "none" && scaling != "linear") {
        detail::gguf_model_error(file, key("rope.scaling.type") + " is \"" + scaling +
                                           "\": only none and linear RoPE scaling are supported (Llama 3's scaling comes "
                                           "as the tensor rope_freqs.weight)");
    }
    std::optional<double> factor = file.find_float(key("rope.scaling.factor"));
    if (!factor) factor = file.find_float(key("rope.scale_linear"));  // the older key
    if (factor && *factor != 0.0) c.rope_linear_scale = static_cast<float>(*factor);
    if (const auto vocab = file.find_uint(key("vocab_size"))) {
        c.vocab_size = *vocab;
    } else if (const auto* embedding = file.find_tensor("token_embd.weight"); embedding && embedding->shape.size() == 2) {
        c.vocab_size = embedding->shape[1];
    }
    if (const gguf::TensorInfo* factors = file.find_tensor("rope_freqs.weight")) {
        c.rope_frequency_factors = detail::gguf_vector(file, *factors, c.rotary_dim() / 2);
    }
    try {
        c.validate();
    } catch (const Error& e) {
        detail::gguf_model_error(file, e.what());
    }
    return c;
}

// Views of every tensor of a supported GGUF file; the weights share ownership
// of the file. A tensor the model would not use is refused by name: it is
// part of some computation this model does not do.
inline LlamaWeights llama_weights_from_gguf(std::shared_ptr<const gguf::File> file) {
    const gguf::File& f = *file;
    LlamaWeights w;
    w.config = llama_config_from_gguf(f);
    const LlamaConfig& c = w.config;
    const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    std::unordered_set<std::string> used{"rope_freqs.weight"};
    auto matrix = [&](const std::string& name, std::size_t rows, std::size_t cols) {
        used.insert(name);
        return detail::gguf_matrix(f, detail::required_tensor(f, name), rows, cols);
    };
    auto vector = [&](const std::string& name) {
        used.insert(name);
        return detail::gguf_vector(f, detail::required_tensor(f, name), dim);
    };
    auto optional_vector = [&](const std::string& name, std::size_t size) {
        const gguf::TensorInfo* tensor = f.find_tensor(name);
        if (tensor == nullptr) return std::vector<float>();
        used.insert(name);
        return detail::gguf_vector(f, *tensor, size);
    };
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
        l.query_bias = optional_vector(p + "attn_q.bias", dim);
        l.key_bias = optional_vector(p + "attn_k.bias", kv);
        l.value_bias = optional_vector(p + "attn_v.bias", kv);
        l.attention_output = matrix(p + "attn_output.weight", dim, dim);
        l.ffn_norm = vector(p + "ffn_norm.weight");
        l.ffn_gate = matrix(p + "ffn_gate.weight", ffn, dim);
        l.ffn_up = matrix(p + "ffn_up.weight", ffn, dim);
        l.ffn_down = matrix(p + "ffn_down.weight", dim, ffn);
    }
    w.output_norm = vector("output_norm.weight");
    // No output.weight: the output head is tied to the token embedding.
    w.output = f.find_tensor("output.weight") ? matrix("output.weight", c.vocab_size, dim) : w.token_embedding;
    for (const gguf::TensorInfo& tensor : f.tensors()) {
        if (!used.contains(tensor.name)) {
            detail::gguf_model_error(f, "tensor " + tensor.name + " is not supported: the " +
                                            f.find_string("general.architecture").value_or("") +
                                            " model here does not use it, so the file describes a computation it would not do; "
                                            "expected only token_embd, output_norm, output, rope_freqs and the blk.N attention "
                                            "(q/k/v weights and biases, output), norm and feed-forward (gate, up, down) tensors");
        }
    }
    w.storage.push_back(std::move(file));
    return w;
}

}  // namespace specdec
