#pragma once
// The reference Llama-architecture transformer on the CPU: token embedding,
// per layer RMSNorm -> grouped-query attention with RoPE -> residual ->
// RMSNorm -> SwiGLU feed-forward -> residual, final RMSNorm and output head.
//
// forward(tokens) is one batched pass: every weight matrix is streamed once
// and multiplied by the block of all new tokens (see backends/cpu/matmul.hpp),
// and attention is causal over the cache plus the new tokens. forward_tree is
// the same pass over the nodes of a token tree, each node attending to the
// cache and its own ancestors. Satisfies specdec::CausalLM, LastRowLM and
// TreeLM.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

    // Another model over the same weights (their bytes are shared, not
    // copied: a mapped file or generated storage stays alive while either
    // model does) and the same thread pool, with an empty KV cache of the same
    // capacity: one more sequence beside this one, e.g. a second request, or
    // benchmark rows advanced step by step in turn. The two caches are
    // independent; the models must not run at the same time on one pool.
    [[nodiscard]] LlamaModel replica() const {
        return LlamaModel(weights_, LlamaOptions{.max_context = context_length(), .thread_pool = pool_, .name = name_});
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
        discard_pending_tree();
        cache_.set_size(positions);
    }

    // Appends the tokens to the cache and returns one logits row per token.
    LogitsView forward(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/true); }

    // Like forward(), but returns only the last token's logits row: the output
    // head (the largest matrix of a small model) runs on one row instead of
    // all of them, which is what prefilling a prompt needs.
    LogitsView forward_last(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/false); }

    // The tree pass of specdec::TreeLM (see core/model_contract.hpp). The
    // pending tree's keys and values sit in the free cache slots: node j of
    // the pending tree in slot cached_tokens() + j, so a pending tree holds at
    // most context_length() - cached_tokens() nodes. Each node attends to the
    // cache and to the slots of its ancestors, in order of depth, which for a
    // chain are the slots forward() would use: the rows equal forward()'s up
    // to the rounding of products over a different number of columns.
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents) {
        const LlamaConfig& c = weights_.config;
        const std::size_t n = tokens.size(), past = cache_.size(), pending = pending_parents_.size();
        if (parents.size() != n) {
            throw Error(name_ + ": forward_tree of " + std::to_string(n) + " tokens with " + std::to_string(parents.size()) +
                        " parents; expected one parent per token");
        }
        check_token_ids(tokens);
        const std::size_t free_slots = cache_.capacity() - past;
        // Validated into the pending tree, rolled back on any failure, so that
        // an error leaves the tree as it was.
        struct Rollback {
            LlamaModel& model;
            std::size_t size;
            bool armed = true;
            ~Rollback() {
                if (armed) {
                    model.pending_parents_.resize(size);
                    model.pending_depths_.resize(size);
                }
            }
        } rollback{*this, pending};
        for (std::size_t i = 0; i < n; ++i) {
            const std::int32_t parent = parents[i];
            const std::size_t node = pending + i;
            if (parent < -1 || (parent >= 0 && static_cast<std::size_t>(parent) >= node)) {
                throw Error(name_ + ": forward_tree parent " + std::to_string(parent) + " of node " + std::to_string(node) +
                            " (index " + std::to_string(i) + " of this call) is not an earlier node; expected -1 or a node in [0, " +
                            std::to_string(node) + ")");
            }
            const std::size_t depth = parent < 0 ? 1 : pending_depths_[static_cast<std::size_t>(parent)] + 1;
            if (depth > free_slots) {
                throw Error(name_ + ": forward_tree node " + std::to_string(node) + " at depth " + std::to_string(depth) + " after " +
                            std::to_string(past) + " cached positions overflows the context length " +
                            std::to_string(cache_.capacity()));
            }
            pending_parents_.push_back(parent);
            pending_depths_.push_back(depth);
        }
        if (pending + n > free_slots) {
            throw Error(name_ + ": forward_tree of " + std::to_string(n) + " nodes after " + std::to_string(pending) +
                        " pending nodes needs " + std::to_string(pending + n) + " free cache slots; expected at most " +
                        std::to_string(free_slots) + " (context length " + std::to_string(cache_.capacity()) + ", " +
                        std::to_string(past) + " cached positions)");
        }
        if (n == 0) {
            rollback.armed = false;
            return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        }
        reserve(n);
        build_ancestor_runs(past, pending, n);
        compute_rope_angles(n, [&](std::size_t i) { return past + pending_depths_[pending + i] - 1; });
        const LogitsView view = run_pass(tokens, past + pending, /*all_rows=*/true,
                                         [&](std::size_t layer) { tree_attention(layer, n); });
        rollback.armed = false;
        return view;
    }

    // Appends the pending nodes of `path` (a root-to-node path) to the cache
    // by copying their keys and values to the slots after the cache; an empty
    // path only discards the pending tree.
    void commit_tree(std::span<const std::int32_t> path) {
        const std::size_t pending = pending_parents_.size(), past = cache_.size();
        for (std::size_t k = 0; k < path.size(); ++k) {
            const std::int32_t node = path[k];
            if (node < 0 || static_cast<std::size_t>(node) >= pending) {
                throw Error(name_ + ": commit_tree node " + std::to_string(node) + " at path index " + std::to_string(k) +
                            " is not in the pending tree; expected a node in [0, " + std::to_string(pending) + ")");
            }
            const std::int32_t expected_parent = k == 0 ? -1 : path[k - 1];
            if (pending_parents_[static_cast<std::size_t>(node)] != expected_parent) {
                throw Error(name_ + ": commit_tree node " + std::to_string(node) + " at path index " + std::to_string(k) +
                            " has parent " + std::to_string(pending_parents_[static_cast<std::size_t>(node)]) + "; expected " +
                            (k == 0 ? std::string("-1 (a child of the cache)") : "node " + std::to_string(expected_parent)) +
                            ", as in a root-to-node path");
            }
        }
        // Node path[k] has index >= k (its k ancestors come before it), so
        // copying in path order never overwrites a slot still to be read.
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim();
        for (std::size_t k = 0; k < path.size(); ++k) {
            const std::size_t from = past + static_cast<std::size_t>(path[k]), to = past + k;
            if (from == to) continue;
            for (std::size_t layer = 0; layer < c.layer_count; ++layer) {
                for (std::size_t h = 0; h < c.kv_heads(); ++h) {
                    std::copy_n(cache_.keys(layer, h, from), hd, cache_.keys(layer, h, to));
                    std::copy_n(cache_.values(layer, h, from), hd, cache_.values(layer, h, to));
                }
            }
        }
        cache_.set_size(past + path.size());
        discard_pending_tree();
    }

    // Nodes of the pending tree (forward_tree calls since the last commit).
    [[nodiscard]] std::size_t pending_tree_nodes() const noexcept { return pending_parents_.size(); }

private:
    void check_token_ids(std::span<const Token> tokens) const {
        const std::size_t vocab = weights_.config.vocab_size;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab) {
                throw Error(name_ + ": token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
            }
        }
    }

    void discard_pending_tree() noexcept {
        pending_parents_.clear();
        pending_depths_.clear();
    }

    LogitsView forward_rows(std::span<const Token> tokens, bool all_rows) {
        const LlamaConfig& c = weights_.config;
        const std::size_t n = tokens.size();
        const std::size_t past = cache_.size();
        check_token_ids(tokens);
        if (past + n > cache_.capacity()) {
            throw Error(name_ + ": forward of " + std::to_string(n) + " tokens after " + std::to_string(past) +
                        " cached positions overflows the context length " + std::to_string(cache_.capacity()));
        }
        discard_pending_tree();
        if (n == 0) return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        reserve(n);
        compute_rope_angles(n, [past](std::size_t i) { return past + i; });
        const LogitsView view = run_pass(tokens, past, all_rows, [&](std::size_t layer) { attention(layer, past, n); });
        cache_.set_size(past + n);
        return view;
    }

    // The layers and the output head over n = tokens.size() rows whose RoPE
    // angles are computed; keys and values go to the cache slots first_slot..,
    // and attend(layer) fills attention_out_ from q_ and the cache.
    template <class Attend>
    LogitsView run_pass(std::span<const Token> tokens, std::size_t first_slot, bool all_rows, Attend&& attend) {
        const LlamaConfig& c = weights_.config;
        const std::size_t n = tokens.size();
        const std::size_t dim = c.embedding_dim, kv_dim = c.kv_dim(), ffn = c.feed_forward_dim;
        for_each_row(n, [&](std::size_t i) {
            cpu::dequantize_row(weights_.token_embedding, static_cast<std::size_t>(tokens[i]), &x_[i * dim]);
        });

        for (std::size_t layer = 0; layer < c.layer_count; ++layer) {
            const LlamaLayerWeights& w = weights_.layers[layer];
            for_each_row(n, [&](std::size_t i) {
                cpu::rms_norm(&x_[i * dim], w.attention_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
            });
            // Q, K and V in one parallel section.
            const cpu::MatmulTarget qkv[] = {
                {&w.query, q_.data(), dim, false},
                {&w.key, k_.data(), kv_dim, false},
                {&w.value, v_.data(), kv_dim, false},
            };
            cpu::matmul(*pool_, qkv, normed_.data(), dim, n, !quantized_);
            for_each_row(n, [&](std::size_t i) {
                add_qkv_biases(w, i);
                apply_rope(i);
                store_keys_values(layer, first_slot, i);
            });
            attend(layer);
            cpu::matmul(*pool_, w.attention_output, attention_out_.data(), dim, n, x_.data(), dim, /*accumulate=*/true, !quantized_);

            for_each_row(n, [&](std::size_t i) {
                cpu::rms_norm(&x_[i * dim], w.ffn_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
            });
            const cpu::MatmulTarget gate_up[] = {
                {&w.ffn_gate, gate_.data(), ffn, false},
                {&w.ffn_up, up_.data(), ffn, false},
            };
            cpu::matmul(*pool_, gate_up, normed_.data(), dim, n, !quantized_);
            for_each_row(n, [&](std::size_t i) { cpu::swiglu(&gate_[i * ffn], &up_[i * ffn], ffn); });
            cpu::matmul(*pool_, w.ffn_down, gate_.data(), ffn, n, x_.data(), dim, /*accumulate=*/true, !quantized_);
        }
        const std::size_t first_row = all_rows ? 0 : n - 1, rows = n - first_row;
        for_each_row(rows, [&](std::size_t i) {
            cpu::rms_norm(&x_[(first_row + i) * dim], weights_.output_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
        });
        cpu::matmul(*pool_, weights_.output, normed_.data(), dim, rows, logits_.data(), c.vocab_size, false, !quantized_);
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

    // RoPE angles of rows [0, n), row i at position position_of(i).
    template <class PositionOf>
    void compute_rope_angles(std::size_t n, PositionOf position_of) {
        const std::size_t pairs = inverse_frequencies_.size();
        const float position_scale = 1.0f / weights_.config.rope_linear_scale;
        for_each_row(n, [&](std::size_t i) {
            const float position = static_cast<float>(position_of(i)) * position_scale;
            for (std::size_t p = 0; p < pairs; ++p) {
                const float angle = position * inverse_frequencies_[p];
                rope_cos_[i * pairs + p] = std::cos(angle);
                rope_sin_[i * pairs + p] = std::sin(angle);
            }
        });
    }

    // Calls fn(i) for the rows i in [0, n) of a pass: on the calling thread
    // for narrow passes; spread over the pool for wide ones (prefill), where
    // these row-wise steps would otherwise run on one thread while the others
    // wait. Each row is computed the same way either way.
    template <class Fn>
    void for_each_row(std::size_t n, Fn&& fn) {
        if (n <= cpu::kWideColumns) {
            for (std::size_t i = 0; i < n; ++i) fn(i);
            return;
        }
        const std::size_t chunk = std::max<std::size_t>(4, n / (4 * pool_->size()));
        pool_->parallel_for((n + chunk - 1) / chunk, [&](std::size_t t) {
            for (std::size_t i = t * chunk, end = std::min(n, i + chunk); i < end; ++i) fn(i);
        });
    }

    // Attention biases of row i (qwen2); absent in Llama models.
    void add_qkv_biases(const LlamaLayerWeights& w, std::size_t i) {
        const LlamaConfig& c = weights_.config;
        const auto add = [i](float* rows, std::size_t width, const std::vector<float>& bias) {
            if (bias.empty()) return;
            for (std::size_t j = 0; j < width; ++j) rows[i * width + j] += bias[j];
        };
        add(q_.data(), c.embedding_dim, w.query_bias);
        add(k_.data(), c.kv_dim(), w.key_bias);
        add(v_.data(), c.kv_dim(), w.value_bias);
    }

    // RoPE on the query and key heads of row i.
    void apply_rope(std::size_t i) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), pairs = inverse_frequencies_.size();
        const auto rotate = c.rope_style == RopeStyle::halves ? &cpu::rope_rotate_halves : &cpu::rope_rotate;
        const float* cosines = &rope_cos_[i * pairs];
        const float* sines = &rope_sin_[i * pairs];
        float* q = &q_[i * c.embedding_dim];
        for (std::size_t h = 0; h < c.head_count; ++h) rotate(q + h * hd, cosines, sines, pairs);
        float* k = &k_[i * c.kv_dim()];
        for (std::size_t h = 0; h < c.kv_heads(); ++h) rotate(k + h * hd, cosines, sines, pairs);
    }

    // Copies row i's keys and values into the head-major cache, at slot first_slot + i.
    void store_keys_values(std::size_t layer, std::size_t first_slot, std::size_t i) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim();
        for (std::size_t h = 0; h < c.kv_heads(); ++h) {
            std::copy_n(&k_[i * c.kv_dim() + h * hd], hd, cache_.keys(layer, h, first_slot + i));
            std::copy_n(&v_[i * c.kv_dim() + h * hd], hd, cache_.values(layer, h, first_slot + i));
        }
    }

    // Causal softmax attention of the n new queries over positions [0, past + i].
    void attention(std::size_t layer, std::size_t past, std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), heads = c.head_count, group = c.head_count / c.kv_heads();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        if (n > cpu::kWideColumns && !quantized_) {
            // Wide passes: blocks of queries per head as matrix products, in
            // whole column strips of the blocked kernel.
            constexpr std::size_t kQueryBlock = 6 * cpu::detail::kStripColumns;
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

    // The cache slots each new tree node attends to: [0, past) and the slots
    // of its ancestors and itself in order of depth, as runs of consecutive
    // slots (one run for a chain). Node i's runs are
    // tree_runs_[tree_run_offsets_[i] .. tree_run_offsets_[i + 1]).
    void build_ancestor_runs(std::size_t past, std::size_t pending, std::size_t n) {
        tree_runs_.clear();
        tree_run_offsets_.assign(1, 0);
        tree_visible_ = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t node = pending + i, depth = pending_depths_[node];
            ancestors_.resize(depth);
            std::size_t a = node;
            for (std::size_t d = depth; d-- > 0;) {
                ancestors_[d] = a;
                a = static_cast<std::size_t>(pending_parents_[a]);  // wraps for the root's -1, never read
            }
            const std::size_t first_run = tree_runs_.size();
            if (past > 0) tree_runs_.push_back({0, past});
            for (const std::size_t ancestor : ancestors_) {
                const std::size_t slot = past + ancestor;
                if (tree_runs_.size() > first_run && tree_runs_.back().first + tree_runs_.back().count == slot) {
                    ++tree_runs_.back().count;
                } else {
                    tree_runs_.push_back({slot, 1});
                }
            }
            tree_run_offsets_.push_back(tree_runs_.size());
            tree_visible_ = std::max(tree_visible_, past + depth);
        }
    }

    // Softmax attention of the n new tree nodes over the runs of build_ancestor_runs.
    void tree_attention(std::size_t layer, std::size_t n) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), heads = c.head_count, group = c.head_count / c.kv_heads();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        pool_->parallel_for(n * heads, [&](std::size_t task) {
            const std::size_t i = task / heads, h = task % heads, kv_head = h / group;
            thread_local std::vector<float> scores;
            if (scores.size() < tree_visible_) scores.resize(tree_visible_);
            const std::size_t first_run = tree_run_offsets_[i];
            cpu::attend_runs(&q_[i * c.embedding_dim + h * hd], cache_.keys(layer, kv_head, 0), cache_.values(layer, kv_head, 0), hd,
                             &tree_runs_[first_run], tree_run_offsets_[i + 1] - first_run, hd, scale, scores.data(),
                             &attention_out_[i * c.embedding_dim + h * hd]);
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
    // The pending tree: each node's parent (-1 = a child of the cache) and depth (1 = a child of the cache).
    std::vector<std::int32_t> pending_parents_;
    std::vector<std::size_t> pending_depths_;
    // The current forward_tree's attention rows (see build_ancestor_runs).
    std::vector<cpu::RowRun> tree_runs_;
    std::vector<std::size_t> tree_run_offsets_, ancestors_;
    std::size_t tree_visible_ = 0;  // the most rows one node attends to
};

static_assert(CausalLM<LlamaModel>);
static_assert(LastRowLM<LlamaModel>);
static_assert(TreeLM<LlamaModel>);

}  // namespace specdec
