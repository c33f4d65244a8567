#pragma once
// The reference Llama-architecture transformer on the CPU: token embedding,
// per layer RMSNorm -> grouped-query attention with RoPE -> residual ->
// RMSNorm -> SwiGLU feed-forward -> residual, final RMSNorm and output head.
//
// forward(tokens) is one batched pass: every weight matrix is streamed once
// and multiplied by the block of all new tokens (see backends/cpu/matmul.hpp),
// and attention is causal over the cache plus the new tokens. forward_tree is
// the same pass over the nodes of a token tree, each node attending to the
// cache and its own ancestors. Satisfies specdec::CausalLM, LastRowLM,
// TreeLM and MultiSequenceLM.
//
// Several sequences: LlamaOptions::sequences KV cache slots are allocated at
// construction, each of context_length() positions, so the cache takes
//   kv_cache_bytes() = sequences x context_length() x kv_bytes_per_position()
//   kv_bytes_per_position() = layers x 2 (keys, values) x kv_heads x head_dim x 4 bytes
// and never grows. Slot 0 is the cache of forward(), forward_last(),
// truncate(n), cached_tokens() and forward_tree(); forward_batch() scores
// feeds to any slots in one pass (see batch_invariant below for what makes a
// row independent of its batch mates).
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
#include "specdec/core/pending_tree.hpp"
#include "specdec/core/sequence_feeds.hpp"
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
    std::size_t sequences = 1;     // KV cache slots (MultiSequenceLM), each of the full context; allocated at construction
    // true: every row of a forward_batch is bitwise the row forward() gives
    // that feed alone, whatever its batch mates (each weight product runs the
    // batch's short feeds on the matrix-vector tiles, whose column sums do not
    // depend on the pass width, and each feed longer than cpu::kWideColumns
    // on the path forward() takes for it alone). false: a pass wider than
    // cpu::kWideColumns over dense weights is one blocked product over all its
    // columns, faster on wide batches (docs/models.md has the cost), but then
    // a row depends on its batch mates up to float rounding.
    bool batch_invariant = true;
};

class LlamaModel {
public:
    explicit LlamaModel(LlamaWeights weights, LlamaOptions options = {})
        : weights_(std::move(weights)), name_(std::move(options.name)), pool_(std::move(options.thread_pool)) {
        weights_.validate();
        const LlamaConfig& c = weights_.config;
        if (!pool_) pool_ = std::make_shared<cpu::ThreadPool>(options.threads);
        if (name_.empty()) {
            name_ = "llama-" + std::to_string(c.layer_count) + "x" + std::to_string(c.embedding_dim);
        }
        if (options.sequences == 0) {
            throw Error(name_ + ": LlamaOptions::sequences is 0; expected at least 1 KV cache slot");
        }
        const std::size_t capacity = options.max_context == 0 ? c.context_length : std::min(options.max_context, c.context_length);
        caches_.reserve(options.sequences);
        for (std::size_t slot = 0; slot < options.sequences; ++slot) {
            caches_.emplace_back(c.layer_count, capacity, c.kv_heads(), c.head_dim());
        }
        batch_invariant_ = options.batch_invariant;
        inverse_frequencies_ = c.rope_inverse_frequencies();
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
    // model does) and the same thread pool, with empty KV cache slots of the
    // same number and capacity: one more sequence beside this one, e.g. a
    // second request, or benchmark rows advanced step by step in turn. The
    // caches are independent; the models must not run at the same time on one pool.
    [[nodiscard]] LlamaModel replica() const {
        return LlamaModel(weights_, LlamaOptions{.max_context = context_length(),
                                                 .thread_pool = pool_,
                                                 .name = name_,
                                                 .sequences = sequence_slots(),
                                                 .batch_invariant = batch_invariant_});
    }

    [[nodiscard]] std::size_t vocab_size() const noexcept { return weights_.config.vocab_size; }
    [[nodiscard]] std::size_t context_length() const noexcept { return caches_.front().capacity(); }
    [[nodiscard]] std::size_t cached_tokens() const noexcept { return caches_.front().size(); }
    [[nodiscard]] std::size_t sequence_slots() const noexcept { return caches_.size(); }
    [[nodiscard]] bool batch_invariant() const noexcept { return batch_invariant_; }
    // Positions cached in `slot`; throws specdec::Error for a slot out of range.
    [[nodiscard]] std::size_t cached_tokens(std::size_t slot) const { return caches_[checked_slot(slot, "cached_tokens")].size(); }
    // Bytes of one cached position (keys and values of every layer) and of all
    // the slots together: sequence_slots() x context_length() x that.
    [[nodiscard]] std::size_t kv_bytes_per_position() const noexcept {
        const LlamaConfig& c = weights_.config;
        return c.layer_count * 2 * c.kv_dim() * sizeof(float);
    }
    [[nodiscard]] std::size_t kv_cache_bytes() const noexcept {
        return sequence_slots() * context_length() * kv_bytes_per_position();
    }
    [[nodiscard]] const LlamaConfig& config() const noexcept { return weights_.config; }
    [[nodiscard]] const LlamaWeights& weights() const noexcept { return weights_; }
    [[nodiscard]] std::size_t parameter_count() const { return weights_.parameter_count(); }
    [[nodiscard]] std::size_t weight_bytes() const { return weights_.weight_bytes(); }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] std::size_t threads() const noexcept { return pool_->size(); }

    void truncate(std::size_t positions) { truncate(0, positions); }

    // Rolls `slot` back to its first `positions` positions; the other slots
    // are untouched. Slot 0 also discards a pending tree, like truncate(n).
    void truncate(std::size_t slot, std::size_t positions) {
        KvCache& cache = caches_[checked_slot(slot, "truncate")];
        if (positions > cache.size()) {
            throw Error("truncate(" + std::to_string(positions) + ") of slot " + std::to_string(slot) + " beyond its " +
                        std::to_string(cache.size()) + " cached positions in " + name_ + "; expected at most " +
                        std::to_string(cache.size()));
        }
        if (slot == 0) discard_pending_tree();
        cache.set_size(positions);
    }

    // Appends the tokens to the cache and returns one logits row per token.
    LogitsView forward(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/true); }

    // Like forward(), but returns only the last token's logits row: the output
    // head (the largest matrix of a small model) runs on one row instead of
    // all of them, which is what prefilling a prompt needs.
    LogitsView forward_last(std::span<const Token> tokens) { return forward_rows(tokens, /*all_rows=*/false); }

    // The multi-sequence pass of specdec::MultiSequenceLM (see
    // core/model_contract.hpp): the tokens of every feed in one pass, each
    // weight matrix streamed once for all of them (once more for each feed
    // longer than cpu::kWideColumns on dense weights, which takes the blocked
    // product of its own, as forward() would), RoPE and the keys and values
    // of each row at its own slot's position, attention per feed over its own
    // slot, the output head over the returned rows only. One feed is exactly
    // forward() (forward_last() for last_row_only) on its slot. With
    // batch_invariant (the default) every row is bitwise the row that feed
    // gives alone. Everything is validated before anything runs, so an error
    // leaves every cache as it was. A feed to slot 0 discards a pending tree,
    // as forward() does; feeds to other slots leave it.
    LogitsView forward_batch(std::span<const SequenceFeed> feeds) {
        validate_feeds(feeds);
        const LlamaConfig& c = weights_.config;
        if (feeds.empty()) return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        if (std::any_of(feeds.begin(), feeds.end(), [](const SequenceFeed& f) { return f.slot == 0; })) discard_pending_tree();
        return run_feeds(feeds);
    }

    // The tree pass of specdec::TreeLM (see core/model_contract.hpp). The
    // pending tree's keys and values sit in the free cache slots: node j of
    // the pending tree in slot cached_tokens() + j, so a pending tree holds at
    // most context_length() - cached_tokens() nodes. Each node attends to the
    // cache and to the slots of its ancestors, in order of depth, which for a
    // chain are the slots forward() would use: the rows equal forward()'s up
    // to the rounding of products over a different number of columns.
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents) {
        const LlamaConfig& c = weights_.config;
        KvCache& cache = caches_.front();
        const std::size_t n = tokens.size(), past = cache.size(), pending = pending_parents_.size();
        if (parents.size() != n) {
            throw Error(name_ + ": forward_tree of " + std::to_string(n) + " tokens with " + std::to_string(parents.size()) +
                        " parents; expected one parent per token");
        }
        check_token_ids(tokens);
        const std::size_t free_slots = cache.capacity() - past;
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
        detail::extend_tree_depths(parents, pending_depths_, free_slots, cache.capacity(), name_);
        pending_parents_.insert(pending_parents_.end(), parents.begin(), parents.end());
        if (n == 0) {
            rollback.armed = false;
            return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        }
        reserve(n);
        build_ancestor_runs(past, pending, n);
        compute_rope_angles(n, [&](std::size_t i) { return past + pending_depths_[pending + i] - 1; });
        for (std::size_t i = 0; i < n; ++i) {
            row_cache_[i] = &cache;
            row_position_[i] = past + pending + i;
        }
        set_single_run(n);
        const LogitsView view = run_pass(tokens, [&](std::size_t layer) { tree_attention(layer, n); });
        rollback.armed = false;
        return view;
    }

    // Appends the pending nodes of `path` (a root-to-node path) to the cache
    // by copying their keys and values to the slots after the cache; an empty
    // path only discards the pending tree.
    void commit_tree(std::span<const std::int32_t> path) {
        KvCache& cache = caches_.front();
        const std::size_t pending = pending_parents_.size(), past = cache.size();
        detail::check_commit_path(path, pending, [&](std::size_t node) { return pending_parents_[node]; }, name_);
        // Node path[k] has index >= k (its k ancestors come before it), so
        // copying in path order never overwrites a slot still to be read.
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim();
        for (std::size_t k = 0; k < path.size(); ++k) {
            const std::size_t from = past + static_cast<std::size_t>(path[k]), to = past + k;
            if (from == to) continue;
            for (std::size_t layer = 0; layer < c.layer_count; ++layer) {
                for (std::size_t h = 0; h < c.kv_heads(); ++h) {
                    std::copy_n(cache.keys(layer, h, from), hd, cache.keys(layer, h, to));
                    std::copy_n(cache.values(layer, h, from), hd, cache.values(layer, h, to));
                }
            }
        }
        cache.set_size(past + path.size());
        discard_pending_tree();
    }

    // Nodes of the pending tree (forward_tree calls since the last commit).
    [[nodiscard]] std::size_t pending_tree_nodes() const noexcept { return pending_parents_.size(); }

private:
    // Columns [first, first + count) of a pass's products; may_block: the
    // run may take the blocked product (a pass alone, or a feed on its own).
    struct ColumnRun {
        std::size_t first, count;
        bool may_block;
    };
    // A feed's rows [first_row, first_row + count) of a pass, appended to
    // `cache` after its `past` positions; wide: attended as blocks.
    struct FeedRows {
        std::size_t first_row, count;
        KvCache* cache;
        std::size_t past;
        bool wide;
    };
    // One head of consecutive rows of a narrow feed (feed_attention).
    struct AttentionTask {
        std::size_t first_row, rows, head;
    };
    static constexpr std::size_t kQueriesPerTask = 8;

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

    // Throws unless slot < sequence_slots(); returns it.
    std::size_t checked_slot(std::size_t slot, const char* call) const {
        if (slot >= caches_.size()) {
            throw Error(name_ + ": " + call + " of slot " + std::to_string(slot) + "; expected a slot in [0, " +
                        std::to_string(caches_.size()) + ")");
        }
        return slot;
    }

    LogitsView forward_rows(std::span<const Token> tokens, bool all_rows) {
        const LlamaConfig& c = weights_.config;
        const KvCache& cache = caches_.front();
        const std::size_t n = tokens.size();
        const std::size_t past = cache.size();
        check_token_ids(tokens);
        if (past + n > cache.capacity()) {
            throw Error(name_ + ": forward of " + std::to_string(n) + " tokens after " + std::to_string(past) +
                        " cached positions overflows the context length " + std::to_string(cache.capacity()));
        }
        discard_pending_tree();
        if (n == 0) return LogitsView{logits_.data(), 0, c.vocab_size, c.vocab_size};
        const SequenceFeed feed{.slot = 0, .tokens = tokens, .last_row_only = !all_rows};
        return run_feeds(std::span<const SequenceFeed>(&feed, 1));
    }

    // Every check of forward_batch, before anything changes.
    void validate_feeds(std::span<const SequenceFeed> feeds) const {
        detail::check_sequence_feeds(feeds, caches_.size(), weights_.config.vocab_size, context_length(),
                                     [this](std::size_t slot) { return caches_[slot].size(); }, name_);
    }

    // Appends runs[...] = columns [first, first + count): a run of its own
    // (`own`, a feed on the path it takes alone), else merged into the
    // previous shared run when adjacent.
    static void add_run(std::vector<ColumnRun>& runs, std::size_t first, std::size_t count, bool own) {
        if (!own && !runs.empty() && !runs.back().may_block && runs.back().first + runs.back().count == first) {
            runs.back().count += count;
        } else {
            runs.push_back({first, count, own});
        }
    }

    // One pass over validated, non-empty feeds: rows in feed order, feed i's
    // row j at position cached_tokens(slot) + j of its slot.
    //
    // Why a row does not depend on its batch mates (batch_invariant_): each
    // weight product runs as column runs. The feeds forward() would run on
    // the matrix-vector tiles (at most cpu::kWideColumns tokens, or any
    // block-quantised model) share one tile run, and the tiles compute every
    // (row, column) sum as the same chain of operations at any width, so a
    // column's result is the one it gets alone. A longer feed over dense
    // weights is a run of its own, the blocked product over exactly its
    // columns, which is the call forward() makes for it. Attention is per
    // feed anyway, again on the kernel forward() picks for that feed; the
    // row-wise steps (norms, RoPE, SwiGLU) never mix rows.
    LogitsView run_feeds(std::span<const SequenceFeed> feeds) {
        std::size_t n = 0;
        for (const SequenceFeed& feed : feeds) n += feed.tokens.size();
        reserve(n);
        feed_rows_.clear();
        layer_runs_.clear();
        head_runs_.clear();
        head_rows_.clear();
        attention_tasks_.clear();
        const std::size_t heads = weights_.config.head_count;
        std::size_t row = 0;
        for (const SequenceFeed& feed : feeds) {
            KvCache& cache = caches_[feed.slot];
            const std::size_t count = feed.tokens.size(), past = cache.size();
            // What forward() alone takes for this feed: blocked products and
            // block attention for a wide pass over dense weights.
            const bool wide = count > cpu::kWideColumns && !quantized_;
            feed_rows_.push_back({row, count, &cache, past, wide});
            for (std::size_t j = 0; j < count; ++j) {
                row_tokens_[row + j] = feed.tokens[j];
                row_cache_[row + j] = &cache;
                row_position_[row + j] = past + j;
            }
            // A narrow feed's attention: a task per head and up to
            // kQueriesPerTask consecutive rows (see feed_attention).
            if (!wide) {
                for (std::size_t h = 0; h < heads; ++h)
                    for (std::size_t r = 0; r < count; r += kQueriesPerTask)
                        attention_tasks_.push_back({row + r, std::min(kQueriesPerTask, count - r), h});
            }
            add_run(layer_runs_, row, count, wide);
            const std::size_t first_returned = feed.last_row_only ? row + count - 1 : row;
            const std::size_t returned = row + count - first_returned;
            add_run(head_runs_, head_rows_.size(), returned, returned > cpu::kWideColumns);
            for (std::size_t r = first_returned; r < row + count; ++r) head_rows_.push_back(r);
            row += count;
        }
        if (!batch_invariant_) {
            // One product over every column: the blocked one once the pass is wide.
            layer_runs_.assign(1, ColumnRun{0, n, true});
            head_runs_.assign(1, ColumnRun{0, head_rows_.size(), true});
        }
        compute_rope_angles(n, [&](std::size_t i) { return row_position_[i]; });
        const LogitsView view =
            run_pass(std::span<const Token>(row_tokens_.data(), n), [&](std::size_t layer) { feed_attention(layer); });
        for (const FeedRows& f : feed_rows_) f.cache->set_size(f.past + f.count);
        return view;
    }

    // A pass of n rows as one run (the tree pass): the path forward() takes for n tokens.
    void set_single_run(std::size_t n) {
        layer_runs_.assign(1, ColumnRun{0, n, true});
        head_runs_.assign(1, ColumnRun{0, n, true});
        head_rows_.resize(n);
        for (std::size_t i = 0; i < n; ++i) head_rows_[i] = i;
    }

    // targets x columns of x, run by run (see run_feeds): a run may take the
    // blocked product when it is wide, unless a block-quantised matrix forbids
    // it (see the constructor).
    void matmul_runs(std::span<const cpu::MatmulTarget> targets, const float* x, std::size_t x_stride,
                     std::span<const ColumnRun> runs) {
        cpu::MatmulTarget shifted[3];
        for (const ColumnRun& run : runs) {
            for (std::size_t t = 0; t < targets.size(); ++t) {
                const cpu::MatmulTarget& target = targets[t];
                shifted[t] = {target.weight, target.y + run.first * target.y_stride, target.y_stride, target.accumulate};
            }
            cpu::matmul(*pool_, std::span<const cpu::MatmulTarget>(shifted, targets.size()), x + run.first * x_stride,
                        x_stride, run.count, run.may_block && !quantized_);
        }
    }

    // The layers and the output head over n = tokens.size() rows whose RoPE
    // angles, cache places (row_cache_, row_position_) and column runs are
    // set; attend(layer) fills attention_out_ from q_ and the cache. Returns
    // the logits of the rows head_rows_, in that order.
    template <class Attend>
    LogitsView run_pass(std::span<const Token> tokens, Attend&& attend) {
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
            matmul_runs(qkv, normed_.data(), dim, layer_runs_);
            for_each_row(n, [&](std::size_t i) {
                add_qkv_biases(w, i);
                apply_rope(i);
                store_keys_values(layer, i);
            });
            attend(layer);
            const cpu::MatmulTarget attention_output[] = {{&w.attention_output, x_.data(), dim, /*accumulate=*/true}};
            matmul_runs(attention_output, attention_out_.data(), dim, layer_runs_);

            for_each_row(n, [&](std::size_t i) {
                cpu::rms_norm(&x_[i * dim], w.ffn_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
            });
            const cpu::MatmulTarget gate_up[] = {
                {&w.ffn_gate, gate_.data(), ffn, false},
                {&w.ffn_up, up_.data(), ffn, false},
            };
            matmul_runs(gate_up, normed_.data(), dim, layer_runs_);
            for_each_row(n, [&](std::size_t i) { cpu::swiglu(&gate_[i * ffn], &up_[i * ffn], ffn); });
            const cpu::MatmulTarget ffn_down[] = {{&w.ffn_down, x_.data(), dim, /*accumulate=*/true}};
            matmul_runs(ffn_down, gate_.data(), ffn, layer_runs_);
        }
        const std::size_t rows = head_rows_.size();
        for_each_row(rows, [&](std::size_t i) {
            cpu::rms_norm(&x_[head_rows_[i] * dim], weights_.output_norm.data(), dim, c.rms_norm_eps, &normed_[i * dim]);
        });
        const cpu::MatmulTarget head[] = {{&weights_.output, logits_.data(), c.vocab_size, false}};
        matmul_runs(head, normed_.data(), dim, head_runs_);
        return LogitsView{logits_.data(), rows, c.vocab_size, c.vocab_size};
    }

    void reserve(std::size_t n) {
        const LlamaConfig& c = weights_.config;
        auto grow = [](cpu::AlignedVector<float>& v, std::size_t size) {
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
        if (row_tokens_.size() < n) {
            row_tokens_.resize(n);
            row_cache_.resize(n);
            row_position_.resize(n);
        }
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

    // Copies row i's keys and values into the head-major cache of its slot, at its position.
    void store_keys_values(std::size_t layer, std::size_t i) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), position = row_position_[i];
        KvCache& cache = *row_cache_[i];
        for (std::size_t h = 0; h < c.kv_heads(); ++h) {
            std::copy_n(&k_[i * c.kv_dim() + h * hd], hd, cache.keys(layer, h, position));
            std::copy_n(&v_[i * c.kv_dim() + h * hd], hd, cache.values(layer, h, position));
        }
    }

    // Causal softmax attention of every feed's queries over its own slot,
    // each query over positions [0, its own]: wide feeds as blocks of queries
    // (what forward() runs for them), narrow ones as attention_tasks_.
    void feed_attention(std::size_t layer) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), group = c.head_count / c.kv_heads();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (const FeedRows& feed : feed_rows_) {
            if (feed.wide) block_attention(layer, feed, scale);
        }
        // A task (built by run_feeds) is one head of up to kQueriesPerTask
        // consecutive rows of a narrow feed (cpu::attend_consecutive): the
        // rows of a verification read the same cached keys and values, once
        // for all of them rather than once per row, which at long contexts is
        // most of a narrow pass's attention time. Each row's output is what
        // attend() gives it alone, so how rows are grouped changes nothing but
        // speed.
        pool_->parallel_for(attention_tasks_.size(), [&](std::size_t t) {
            const AttentionTask& task = attention_tasks_[t];
            const std::size_t h = task.head, kv_head = h / group, i = task.first_row;
            KvCache& cache = *row_cache_[i];
            const std::size_t first_visible = row_position_[i] + 1;
            thread_local cpu::AlignedVector<float> scores;
            scores.resize(std::max(scores.size(), task.rows * (first_visible + task.rows - 1)));
            cpu::attend_consecutive(&q_[i * c.embedding_dim + h * hd], c.embedding_dim, task.rows, first_visible,
                                    cache.keys(layer, kv_head, 0), cache.values(layer, kv_head, 0), hd, hd, scale,
                                    scores.data(), &attention_out_[i * c.embedding_dim + h * hd], c.embedding_dim);
        });
    }

    // A wide feed's queries per head as blocks of matrix products, in whole
    // column strips of the blocked kernel.
    void block_attention(std::size_t layer, const FeedRows& feed, float scale) {
        const LlamaConfig& c = weights_.config;
        const std::size_t hd = c.head_dim(), heads = c.head_count, group = c.head_count / c.kv_heads();
        constexpr std::size_t kQueryBlock = 6 * cpu::detail::kStripColumns;
        const std::size_t n = feed.count, blocks = (n + kQueryBlock - 1) / kQueryBlock;
        KvCache& cache = *feed.cache;
        pool_->parallel_for(blocks * heads, [&](std::size_t task) {
            // Longest blocks (last queries) first, so that the threads finish together.
            const std::size_t b = blocks - 1 - task / heads, h = task % heads, kv_head = h / group;
            const std::size_t first = b * kQueryBlock, count = std::min(kQueryBlock, n - first);
            const std::size_t row = feed.first_row + first;
            cpu::attend_block(&q_[row * c.embedding_dim + h * hd], c.embedding_dim, count, feed.past + first,
                              cache.keys(layer, kv_head, 0), cache.values(layer, kv_head, 0), hd, hd, scale,
                              &attention_out_[row * c.embedding_dim + h * hd], c.embedding_dim);
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
            thread_local cpu::AlignedVector<float> scores;
            if (scores.size() < tree_visible_) scores.resize(tree_visible_);
            const std::size_t first_run = tree_run_offsets_[i];
            KvCache& cache = caches_.front();
            cpu::attend_runs(&q_[i * c.embedding_dim + h * hd], cache.keys(layer, kv_head, 0), cache.values(layer, kv_head, 0), hd,
                             &tree_runs_[first_run], tree_run_offsets_[i + 1] - first_run, hd, scale, scores.data(),
                             &attention_out_[i * c.embedding_dim + h * hd]);
        });
    }

    LlamaWeights weights_;
    std::string name_;
    std::shared_ptr<cpu::ThreadPool> pool_;
    std::vector<KvCache> caches_;  // one per sequence slot; slot 0 is forward()'s
    bool batch_invariant_ = true;
    std::vector<float> inverse_frequencies_;
    bool quantized_ = false;  // some matrix is block-quantised
    // Activations of the current forward, n rows each (reused between calls).
    // On cache lines: the kernels' 32-byte loads of a pass's activations must
    // not straddle lines (aligned_vector.hpp).
    cpu::AlignedVector<float> x_, normed_, q_, k_, v_, attention_out_, gate_, up_, logits_, rope_cos_, rope_sin_;
    // The pending tree: each node's parent (-1 = a child of the cache) and depth (1 = a child of the cache).
    std::vector<std::int32_t> pending_parents_;
    std::vector<std::size_t> pending_depths_;
    // The current forward_tree's attention rows (see build_ancestor_runs).
    std::vector<cpu::RowRun> tree_runs_;
    std::vector<std::size_t> tree_run_offsets_, ancestors_;
    std::size_t tree_visible_ = 0;  // the most rows one node attends to
    // The current pass's rows: token, cache slot and position of each row.
    std::vector<Token> row_tokens_;
    std::vector<KvCache*> row_cache_;
    std::vector<std::size_t> row_position_;
    // Its feeds, the column runs of its layer products and of its output
    // head, the rows the head returns, and the attention tasks of its narrow
    // feeds.
    std::vector<FeedRows> feed_rows_;
    std::vector<ColumnRun> layer_runs_, head_runs_;
    std::vector<std::size_t> head_rows_;
    std::vector<AttentionTask> attention_tasks_;  // narrow feeds' attention, per pass
};

static_assert(CausalLM<LlamaModel>);
static_assert(LastRowLM<LlamaModel>);
static_assert(TreeLM<LlamaModel>);
static_assert(MultiSequenceLM<LlamaModel>);

}  // namespace specdec
