#pragma once
// The tensors of a Llama model as views in their storage types, plus the
// owners that keep those bytes alive (a memory-mapped GGUF file, or buffers of
// generated weights). Norm vectors are small and kept as float.
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "specdec/tensors/weight_matrix.hpp"
#include "specdec/models/llama_config.hpp"

namespace specdec {

struct LlamaLayerWeights {
    std::vector<float> attention_norm;   // [embedding_dim]
    WeightMatrix query;                  // [embedding_dim rows x embedding_dim]
    WeightMatrix key;                    // [kv_dim x embedding_dim]
    WeightMatrix value;                  // [kv_dim x embedding_dim]
    // Attention biases (qwen2); empty when the model has none.
    std::vector<float> query_bias;       // [embedding_dim]
    std::vector<float> key_bias;         // [kv_dim]
    std::vector<float> value_bias;       // [kv_dim]
    WeightMatrix attention_output;       // [embedding_dim x embedding_dim]
    std::vector<float> ffn_norm;         // [embedding_dim]
    WeightMatrix ffn_gate;               // [feed_forward_dim x embedding_dim]
    WeightMatrix ffn_up;                 // [feed_forward_dim x embedding_dim]
    WeightMatrix ffn_down;               // [embedding_dim x feed_forward_dim]
};

struct LlamaWeights {
    LlamaConfig config;
    WeightMatrix token_embedding;        // [vocab_size x embedding_dim]
    std::vector<LlamaLayerWeights> layers;
    std::vector<float> output_norm;      // [embedding_dim]
    WeightMatrix output;                 // [vocab_size x embedding_dim]; same data as token_embedding when tied
    std::vector<std::shared_ptr<const void>> storage;  // owners of every byte the views point into

    [[nodiscard]] bool tied_output() const noexcept { return output.data == token_embedding.data; }

    // Throws specdec::Error naming the first tensor whose shape disagrees with
    // the config (or that is missing).
    void validate() const {
        config.validate();
        const std::size_t dim = config.embedding_dim, kv = config.kv_dim(), ffn = config.feed_forward_dim;
        auto check_matrix = [](const WeightMatrix& w, std::size_t rows, std::size_t cols, const std::string& name) {
            if (w.data == nullptr) throw Error("Llama weights: tensor " + name + " is missing");
            if (w.rows != rows || w.cols != cols) {
                throw Error("Llama weights: tensor " + name + " has shape " + std::to_string(w.rows) + "x" +
                            std::to_string(w.cols) + " (rows x columns), expected " + std::to_string(rows) + "x" +
                            std::to_string(cols) + " from the config");
            }
            (void)w.row_bytes();  // throws for a block type with an incompatible row length
        };
        auto check_norm = [&](const std::vector<float>& v, const std::string& name) {
            if (v.size() != dim) {
                throw Error("Llama weights: norm " + name + " has " + std::to_string(v.size()) +
                            " values, expected embedding_dim " + std::to_string(dim));
            }
        };
        auto check_bias = [](const std::vector<float>& v, std::size_t size, const std::string& name) {
            if (!v.empty() && v.size() != size) {
                throw Error("Llama weights: bias " + name + " has " + std::to_string(v.size()) + " values; expected " +
                            std::to_string(size));
            }
        };
        check_matrix(token_embedding, config.vocab_size, dim, "token_embd");
        check_matrix(output, config.vocab_size, dim, "output");
        check_norm(output_norm, "output_norm");
        if (layers.size() != config.layer_count) {
            throw Error("Llama weights: " + std::to_string(layers.size()) + " layers, config says " +
                        std::to_string(config.layer_count));
        }
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const auto& l = layers[i];
            const std::string p = "blk." + std::to_string(i) + ".";
            check_norm(l.attention_norm, p + "attn_norm");
            check_matrix(l.query, dim, dim, p + "attn_q");
            check_matrix(l.key, kv, dim, p + "attn_k");
            check_matrix(l.value, kv, dim, p + "attn_v");
            check_bias(l.query_bias, dim, p + "attn_q.bias");
            check_bias(l.key_bias, kv, p + "attn_k.bias");
            check_bias(l.value_bias, kv, p + "attn_v.bias");
            check_matrix(l.attention_output, dim, dim, p + "attn_output");
            check_norm(l.ffn_norm, p + "ffn_norm");
            check_matrix(l.ffn_gate, ffn, dim, p + "ffn_gate");
            check_matrix(l.ffn_up, ffn, dim, p + "ffn_up");
            check_matrix(l.ffn_down, dim, ffn, p + "ffn_down");
        }
    }

    // Throws specdec::Error naming the first tensor, row and column that holds a
    // NaN or an infinity (like llama.cpp's --check-tensors). Reads every weight
    // once: a model whose file is corrupt fails here instead of decoding NaN logits.
    void check_finite(const std::string& model_name) const {
        auto fail = [&](const std::string& tensor, std::size_t row, std::size_t column, float value) {
            throw Error(model_name + ": tensor " + tensor + " holds " + std::to_string(value) + " at row " +
                        std::to_string(row) + ", column " + std::to_string(column) + ": expected finite weights");
        };
        auto check_values = [&](const float* values, std::size_t count, const std::string& tensor, std::size_t row) {
            bool finite = true;
            for (std::size_t i = 0; i < count; ++i) finite &= std::fabs(values[i]) <= std::numeric_limits<float>::max();
            if (finite) return;
            for (std::size_t i = 0; i < count; ++i)
                if (!(std::fabs(values[i]) <= std::numeric_limits<float>::max())) fail(tensor, row, i, values[i]);
        };
        std::vector<float> row;
        auto check_matrix = [&](const WeightMatrix& w, const std::string& tensor) {
            row.resize(w.cols);
            for (std::size_t r = 0; r < w.rows; ++r) {
                cpu::dequantize_row(w, r, row.data());
                check_values(row.data(), w.cols, tensor, r);
            }
        };
        check_matrix(token_embedding, "token_embd");
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const auto& l = layers[i];
            const std::string p = "blk." + std::to_string(i) + ".";
            check_values(l.attention_norm.data(), l.attention_norm.size(), p + "attn_norm", 0);
            check_matrix(l.query, p + "attn_q");
            check_matrix(l.key, p + "attn_k");
            check_matrix(l.value, p + "attn_v");
            check_matrix(l.attention_output, p + "attn_output");
            check_values(l.ffn_norm.data(), l.ffn_norm.size(), p + "ffn_norm", 0);
            check_matrix(l.ffn_gate, p + "ffn_gate");
            check_matrix(l.ffn_up, p + "ffn_up");
            check_matrix(l.ffn_down, p + "ffn_down");
        }
        check_values(output_norm.data(), output_norm.size(), "output_norm", 0);
        if (!tied_output()) check_matrix(output, "output");
    }

    template <class Fn>
    void for_each_matrix(Fn&& fn) const {
        fn(token_embedding);
        for (const auto& l : layers) {
            for (const WeightMatrix* w : {&l.query, &l.key, &l.value, &l.attention_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) fn(*w);
        }
        if (!tied_output()) fn(output);
    }

    [[nodiscard]] std::size_t parameter_count() const {
        std::size_t count = output_norm.size();
        for_each_matrix([&](const WeightMatrix& w) { count += w.rows * w.cols; });
        for (const auto& l : layers) {
            count += l.attention_norm.size() + l.ffn_norm.size() + l.query_bias.size() + l.key_bias.size() + l.value_bias.size();
        }
        return count;
    }

    // Bytes of all weights in their storage types.
    [[nodiscard]] std::size_t weight_bytes() const {
        std::size_t bytes = output_norm.size() * sizeof(float);
        for_each_matrix([&](const WeightMatrix& w) { bytes += w.byte_size(); });
        for (const auto& l : layers) {
            bytes += (l.attention_norm.size() + l.ffn_norm.size() + l.query_bias.size() + l.key_bias.size() + l.value_bias.size()) *
                     sizeof(float);
        }
        return bytes;
    }

    // Bytes one forward pass streams from memory: every matrix except the
    // embedding table, of which only the looked-up rows are read.
    [[nodiscard]] std::size_t bytes_read_per_forward() const {
        std::size_t bytes = output.byte_size();
        for (const auto& l : layers) {
            for (const WeightMatrix* w : {&l.query, &l.key, &l.value, &l.attention_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) bytes += w->byte_size();
        }
        return bytes;
    }
};

}  // namespace specdec
