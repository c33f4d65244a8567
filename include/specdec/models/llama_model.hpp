#pragma once
// The reference Llama-architecture transformer on the CPU: token embedding,
// per layer RMSNorm -> grouped-query attention with RoPE -> residual ->
// RMSNorm -> SwiGLU feed-forward -> residual, final RMSNorm and output head.
//
// forward(tokens) is one batched pass: every weight matrix is streamed once
// and multiplied by the block of all new tokens (see backends/cpu/matmul.hpp),
// and attention is causal over the cache plus the new tokens. Satisfies
// specdec::CausalLM.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/backends/cpu/attention.hpp"
#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/backends/cpu/thread_pool.hpp"
#include "specdec/backends/cpu/vector_ops.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec {

struct LlamaOptions {
    std::size_t threads = 0;       // threads of the model's own pool, counting the caller; 0 = hardware concurrency
    std::size_t max_context = 0;   // caps the KV cache (and so context_length()); 0 = the model's context length
    std::shared_ptr<cpu::ThreadPool> thread_pool;  // share one pool between a target and its draft; overrides `threads`
    std::string name;              // shown by name(); empty = a description of the shape
    bool check_tensors = false;    // read every weight at load time; a NaN or inf is an Error naming the tensor
};

class LlamaModel {
public:
    explicit LlamaModel(LlamaWeights weights, LlamaOptions options = {})
        : weights_(std::move(weights)), name_(std::move(options.name)), pool_(std::move(options.thread_pool)) {
        weights_.validate();
        const LlamaConfig& c = weights_.config;
        if (!pool_) pool_ = std::make_shared<cpu::ThreadPool>(options.threads);
        const std::size_t capacity = options.max_context == 0 ? c.context_length : std::min(options.max_context, c.context_length);
        cache_ = KvCache(c.layer_count, capacity, c.kv_heads(), c.head_dim());
        inverse_frequencies_ = c.rope_inverse_frequencies();
        if (name_.empty()) {
            name_ = "llama-" + std::to_string(c.layer_count) + "x" + std::to_string(c.embedding_dim);
        }
        if (options.check_tensors) weights_.check_finite(name_);
        // Block-quantised products round their activations to 8 bits, so a
        // wide pass over them must reproduce the one-token sums bitwise: the
        // blocked products of dense matrices and attention as matrix products
        // (equal up to float rounding) are for models without such matrices
        // only (see cpu::matmul).
        quantized_ = is_block_quantized(weights_.output.type);
        for (const LlamaLayerWeights& l : weights_.layers) {
            for (const WeightMatrix* m : {&l.query, &l.key, &l.value, &l.attention_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
                quantized_ = quantized_ || is_block_quantized(m->type);
            }
        }
    }

    // Loads a GGUF file of architecture "llama"; its matrices are used in place
    // from the memory mapping.
    static LlamaModel from_gguf(const std::filesystem::path& path, LlamaOptions options = {}) {
        auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
        if (options.name.empty()) options.name = file->find_string("general.name").value_or(path.stem().string());
        return LlamaModel(llama_weights_from_gguf(std::move(file)), std::move(options));
    }

    [[nodiscard]] std::size_t vocab_size() const noexcept { return weights_.config.vocab_size; }
    [[nodiscard]] std::size_t context_length() const noexcept { return cache_.capacity(); }
    [[nodiscard]] std::size_t cached_tokens() const noexcept { return cache_.size(); }
    [[nodiscard]] const LlamaConfig& config() const noexcept { return weights_.config; }
    [[nodiscard]] const LlamaWeights& weights() const noexcept { return weights_; }
    [[nodiscard]] std::size_t parameter_count() const { return weights_.parameter_count(); }
    [[nodiscard]] std::size_t weight_bytes() const { return weights_.weight_bytes(); }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] std::size_t threads() const noexcept { return pool_->size(); }

    void truncate(std::size_t positions) {
        if (positions > cache_.size()) {
            throw Error("truncate(" + std::to_string(positions) + ") beyond the " + std::to_string(cache_.size()) +
                        " cached positions of " + name_);
        }
        cache_.set_size(positions);
    }

    // Appends the tokens to the cache and returns one logits row per token.
    LogitsView forward(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/true); }

    // Like forward(), but returns only the last token's logits row: the output
    // head (the largest matrix of a small model) runs on one row instead of
    // all of them, which is what prefilling a prompt needs.
    LogitsView forward_last(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/false); }

private:
    LogitsView forward_rows(std::span<const Token> tokens, bool all_rows) {
        const LlamaConfig& c = weights_.config;
        const std::size_t n = tokens.size();
        const std::size_t past = cache_.size();
        for (std::size_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= c.vocab_size) {
                throw Error(name_ + ": token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
            }
        }
        if (past + n > cache_.capacity()) {
            throw Error(name_ + ": forward of " + std::to_string(n) + " tokens after " + std::to_string(past) +
                        " cached positions overflows the context length " + std::to_string(cache_.capacity()));
        }
        if (n == 0) return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        reserve(n);

        const std::size_t dim = c.embedding_dim, kv_dim = c.kv_dim(), ffn = c.feed_forward_dim;
        for (std::size_t i = 0; i < n; ++i) cpu::dequantize_row(weights_.token_embedding, static_cast<std::size_t>(tokens[i]), &x_[i * dim]);
        compute_rope_angles(past, n);

        for (std::size_t layer = 0; layer < c.layer_count; ++layer) {
            const LlamaLayerWeights& w = weights_.layers[layer];
            for (std::size_t i = 0; i < n; ++i) cpu::rms_norm(&x_[i * dim], w.attention_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
            // Q, K and V in one parallel section.
            const cpu::MatmulTarget qkv[] = {
                {&w.query, q_.data(), dim, false},
                {&w.key, k_.data(), kv_dim, false},
                {&w.value, v_.data(), kv_dim, false},
            };
            cpu::matmul(*pool_, qkv, normed_.data(), dim, n, !quantized_);
            add_qkv_biases(w, n);
            apply_rope(n);
            store_keys_values(layer, past, n);
            attention(layer, past, n);
            cpu::matmul(*pool_, w.attention_output, attention_out_.data(), dim, n, x_.data(), dim, /*accumulate=*/true, !quantized_);

            for (std::size_t i = 0; i < n; ++i) cpu::rms_norm(&x_[i * dim], w.ffn_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
            const cpu::MatmulTarget gate_up[] = {
                {&w.ffn_gate, gate_.data(), ffn, false},
                {&w.ffn_up, up_.data(), ffn, false},
            };
            cpu::matmul(*pool_, gate_up, normed_.data(), dim, n, !quantized_);
            cpu::swiglu(gate_.data(), up_.data(), n * ffn);
            cpu::matmul(*pool_, w.ffn_down, gate_.data(), ffn, n, x_.data(), dim, /*accumulate=*/true, !quantized_);
        }
        const std::size_t first_row = all_rows ? 0 : n - 1, rows = n - first_row;
        for (std::size_t i = first_row; i < n; ++i) {
            cpu::rms_norm(&x_[i * dim], weights_.output_norm.data(), dim, c.rms_norm_eps, &normed_[(i - first_row) * dim]);
        }
        cpu::matmul(*pool_, weights_.output, normed_.data(), dim, rows, logits_.data(), c.vocab_size, false, !quantized_);
        cache_.set_size(past + n);
        return LogitsView{logits_.data(), rows, c.vocab_size, c.vocab_size};
    }

    void reserve(std::size_t n) {
        const LlamaConfig& c = weights_.config;
        auto grow = [](std::vector<float>& v, std::size_t size) {
            if (v.size() < size) v.resize(size);
        };
        grow(x_, n * c.embedding_dim);
        grow(normed_, n * c.embedding_dim);
        grow(q_, n * c.embedding_dim);
        grow(k_, n * c.kv_dim());
        grow(v_, n * c.kv_dim());
        grow(attention_out_, n * c.embedding_dim);
        grow(gate_, n * c.feed_forward_dim);
        grow(up_, n * c.feed_forward_dim);
        grow(logits_, n * c.vocab_size);
        grow(rope_cos_, n * inverse_frequencies_.size());
        grow(rope_sin_, n * inverse_frequencies_.size());
    }

    void compute_rope_angles(std::size_t past, std::size_t n) {
        const std::size_t pairs = inverse_frequencies_.size();
        const float position_scale = 1.0f / weights_.config.rope_linear_scale;
        for (std::size_t i = 0; i < n; ++i) {
            const float position = static_cast<float>(past + i) * position_scale;
            for (std::size_t p = 0; p < pairs; ++p) {
                const float angle = position * inverse_frequencies_[p];
                rope_cos_[i * pairs + p] = std::cos(angle);
                rope_sin_[i * pairs + p] = std::sin(angle);
            }
        }
    }

    // Attention biases (qwen2); absent in Llama models.
    void add_qkv_biases(const LlamaLayerWeights& w, std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const auto add = [n](float* rows, std::size_t width, const std::vector<float>& bias) {
            if (bias.empty()) return;
            for (std::size_t i = 0; i < n; ++i) {
                for (std::size_t j = 0; j < width; ++j) rows[i * width + j] += bias[j];
            }
        };
        add(q_.data(), c.embedding_dim, w.query_bias);
        add(k_.data(), c.kv_dim(), w.key_bias);
        add(v_.data(), c.kv_dim(), w.value_bias);
    }

    void apply_rope(std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), pairs = inverse_frequencies_.size();
        const auto rotate = c.rope_style == RopeStyle::halves ? &cpu::rope_rotate_halves : &cpu::rope_rotate;
        for (std::size_t i = 0; i < n; ++i) {
            const float* cosines = &rope_cos_[i * pairs];
            const float* sines = &rope_sin_[i * pairs];
            float* q = &q_[i * c.embedding_dim];
            for (std::size_t h = 0; h < c.head_count; ++h) rotate(q + h * hd, cosines, sines, pairs);
            float* k = &k_[i * c.kv_dim()];
            for (std::size_t h = 0; h < c.kv_heads(); ++h) rotate(k + h * hd, cosines, sines, pairs);
        }
    }

    // Copies the new tokens' keys and values into the head-major cache.
    void store_keys_values(std::size_t layer, std::size_t past, std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim();
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t h = 0; h < c.kv_heads(); ++h) {
                std::copy_n(&k_[i * c.kv_dim() + h * hd], hd, cache_.keys(layer, h, past + i));
                std::copy_n(&v_[i * c.kv_dim() + h * hd], hd, cache_.values(layer, h, past + i));
            }
        }
    }

    // Causal softmax attention of the n new queries over positions [0, past + i].
    void attention(std::size_t layer, std::size_t past, std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), heads = c.head_count, group = c.head_count / c.kv_heads();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        if (n > cpu::kWideColumns && !quantized_) {
            // Wide passes: blocks of queries per head as matrix products.
            constexpr std::size_t kQueryBlock = 32;
            const std::size_t blocks = (n + kQueryBlock - 1) / kQueryBlock;
            pool_->parallel_for(blocks * heads, [&](std::size_t task) {
                // Longest blocks (last queries) first, so that the threads finish together.
                const std::size_t b = blocks - 1 - task / heads, h = task % heads, kv_head = h / group;
                const std::size_t first = b * kQueryBlock, count = std::min(kQueryBlock, n - first);
                cpu::attend_block(&q_[first * c.embedding_dim + h * hd], c.embedding_dim, count, past + first,
                                  cache_.keys(layer, kv_head, 0), cache_.values(layer, kv_head, 0), hd, hd, scale,
                                  &attention_out_[first * c.embedding_dim + h * hd], c.embedding_dim);
            });
            return;
        }
        pool_->parallel_for(n * heads, [&](std::size_t task) {
            const std::size_t i = task / heads, h = task % heads, kv_head = h / group;
            const std::size_t positions = past + i + 1;
            thread_local std::vector<float> scores;
            if (scores.size() < positions) scores.resize(positions);
            cpu::attend(&q_[i * c.embedding_dim + h * hd], cache_.keys(layer, kv_head, 0), cache_.values(layer, kv_head, 0), hd,
                        positions, hd, scale, scores.data(), &attention_out_[i * c.embedding_dim + h * hd]);
        });
    }

    LlamaWeights weights_;
    std::string name_;
    std::shared_ptr<cpu::ThreadPool> pool_;
    KvCache cache_;
    std::vector<float> inverse_frequencies_;
    bool quantized_ = false;  // some matrix is block-quantised
    // Activations of the current forward, n rows each (reused between calls).
    std::vector<float> x_, normed_, q_, k_, v_, attention_out_, gate_, up_, logits_, rope_cos_, rope_sin_;
};

static_assert(CausalLM<LlamaModel>);

}  // namespace specdec
