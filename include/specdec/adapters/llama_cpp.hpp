#pragma once
// A llama.cpp model + context as a specdec model: CausalLM, LastRowLM and
// MultiSequenceLM (specdec/core/model_contract.hpp), so that every decoder of
// the library runs on any model llama.cpp loads, on its devices and on its
// RPC servers. Needs only llama.h (and the ggml headers it includes); see
// docs/llama_cpp.md for building against llama.cpp and for what is refused.
//
// How the contract maps onto llama.h:
//  - a cache slot is a llama.cpp sequence id (0 .. sequences - 1), each with
//    its own cache stream (kv_unified off) of `context` positions, or all in
//    one cache of sequences x context cells (LlamaCppOptions::unified_cache);
//  - forward() marks every token of the batch as an output, so one pass
//    returns a logits row per token (a verification pass); inputs longer
//    than the context's batch size are fed in consecutive chunks;
//  - truncate() is llama_memory_seq_rm of the positions past n. The context
//    is probed at construction (llama_cpp_rollback_probe.hpp) and a model
//    whose memory cannot drop a suffix is refused, never rolled back wrongly;
//  - a recurrent or hybrid model (a state per sequence that every token
//    overwrites) rolls back from a checkpoint sequence per slot and replays
//    the tokens after it (llama_cpp_recurrent.hpp), probed the same way;
//  - the adapter keeps each slot's position count itself and checks it
//    against llama_memory_seq_pos_max after every pass and rollback;
//  - a token tree (TreeLM, with LlamaCppOptions::tree_leaves) is one
//    llama_decode whose tokens carry several sequence ids: every leaf of the
//    pending tree has a llama.cpp sequence of its own, and a node belongs to
//    the sequences of all leaves below it, so llama.cpp's causal mask lets it
//    see the cache and its own ancestors only (llama_cpp_tree.hpp);
//  - a failed llama_decode (llama_cpp_decode_status.hpp) is reported as a
//    specdec::Error with the meaning of its code, after the fed slots were
//    rolled back to where they were; a decode that finds no KV slot for a
//    batch of several sequences is retried split between sequences. If the
//    cache cannot be brought back to a known state the model refuses every
//    later call.
//
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <llama.h>

#include "specdec/adapters/llama_cpp_decode_status.hpp"
#include "specdec/adapters/llama_cpp_recurrent.hpp"
#include "specdec/adapters/llama_cpp_rollback_probe.hpp"
#include "specdec/adapters/llama_cpp_runtime.hpp"
#include "specdec/adapters/llama_cpp_tree.hpp"
#include "specdec/adapters/llama_cpp_vocabulary.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/sequence_feeds.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

struct LlamaCppOptions {
    std::size_t context = 0;    // positions per sequence; 0 = the model's training context capped at 4096
    std::size_t sequences = 1;  // MultiSequenceLM slots (llama.cpp sequence ids 0 .. sequences - 1)
    int threads = 0;            // threads of a one-token pass; 0 = hardware concurrency
    int threads_batch = 0;      // threads of a pass of several tokens (verification, prefill); 0 = hardware concurrency
    int gpu_layers = 0;         // layers offloaded to llama.cpp's devices (-1 = all); with rpc_servers, 0 means all
    std::vector<std::string> rpc_servers;  // "host:port" of ggml-rpc-server processes; the layers go there
    std::size_t batch = 0;      // tokens per llama_decode call (n_batch); 0 = 512. Longer inputs are fed in chunks
    std::size_t ubatch = 0;     // tokens per physical pass (n_ubatch); 0 = batch
    // One cache for all sequences (llama.cpp's kv_unified) instead of a
    // stream per sequence. Streams: a pass whose sequences feed unequal
    // lengths runs as one physical pass per distinct length. Unified: one
    // pass whatever the lengths, but every token attends over the cells of
    // all sequences (masked), dearer the more the others hold. docs/llama_cpp.md
    // has the measurements.
    bool unified_cache = false;
    // A recurrent or hybrid model (docs/llama_cpp.md#recurrent-and-hybrid-models)
    // whose architecture llama.cpp can roll back within a pass (its
    // experimental n_rs_seq; LFM2, Nemotron-H, Qwen3.5, ...): keep the states
    // after each of a pass's last N tokens, so that a verification pass rolls
    // back without a replay. Costs N more copies of the recurrent state per
    // sequence. 0: checkpoints and replay only. Other architectures get 0
    // (recurrent_snapshots() says what llama.cpp granted).
    std::size_t recurrent_snapshots = 0;
    // The most leaves a pending token tree of slot 0 may have (TreeLM:
    // forward_tree and commit_tree, for TreeSpeculativeDecoder and tree
    // drafting); 0: no tree pass. Every leaf after the first takes a llama.cpp
    // sequence id of its own, and a tree pass needs all sequences in one
    // cache, so a value > 0 turns unified_cache on. A FixedTree's leaves are
    // its shape's; AutoTree's are at most its max_nodes (24 by default).
    // Recurrent and hybrid models have no tree pass (their state cannot branch).
    std::size_t tree_leaves = 0;
};

class LlamaCppModel {
public:
    // Loads a GGUF file with llama.cpp and creates its context. Throws
    // specdec::Error (naming the file) if llama.cpp cannot load it, if the
    // options are invalid, or if the model cannot serve speculative decoding
    // (an encoder-decoder, a diffusion model, a memory that fails its
    // rollback probe). A recurrent or hybrid model gets twice the llama.cpp
    // sequences (its checkpoints), and a hybrid one a unified cache.
    static LlamaCppModel load(const std::string& gguf_path, const LlamaCppOptions& options = {}) {
        return LlamaCppModel(gguf_path, options);
    }

    // Another model over the weights this one loaded, with a context (cache
    // slots, threads, batch size) of its own from `options`: several decoders
    // (say one per batch size, or a batched and a single-sequence one) then
    // share one copy of the weights. The weights stay where they were loaded,
    // so options.gpu_layers and options.rpc_servers must be those of load();
    // a placement that differs is refused, not silently ignored. The weights
    // live until the last model over them is destroyed.
    [[nodiscard]] LlamaCppModel new_context(const LlamaCppOptions& options) const {
        if (options.gpu_layers != placement_.gpu_layers || options.rpc_servers != placement_.rpc_servers) {
            throw Error(name_ + ": new_context cannot move the loaded weights; give it the gpu_layers (" +
                        std::to_string(placement_.gpu_layers) + ") and rpc_servers (" +
                        std::to_string(placement_.rpc_servers.size()) + ") of load()");
        }
        return LlamaCppModel(model_, name_, options);
    }

    LlamaCppModel(LlamaCppModel&&) noexcept = default;
    LlamaCppModel& operator=(LlamaCppModel&& other) noexcept {
        if (this != &other) {
            context_.reset();  // a context must go before its model
            model_.reset();
            model_ = std::move(other.model_);
            placement_ = std::move(other.placement_);
            context_ = std::move(other.context_);
            batch_ = std::move(other.batch_);
            vocab_ = other.vocab_;
            vocab_size_ = other.vocab_size_;
            context_length_ = other.context_length_;
            batch_capacity_ = other.batch_capacity_;
            unified_cache_ = other.unified_cache_;
            recurrent_ = other.recurrent_;
            recurrent_rollback_ = std::move(other.recurrent_rollback_);
            snapshots_ = other.snapshots_;
            tree_ = std::move(other.tree_);
            cached_ = std::move(other.cached_);
            logits_ = std::move(other.logits_);
            name_ = std::move(other.name_);
            failure_ = std::move(other.failure_);
        }
        return *this;
    }
    LlamaCppModel(const LlamaCppModel&) = delete;
    LlamaCppModel& operator=(const LlamaCppModel&) = delete;
    ~LlamaCppModel() { context_.reset(); }

    // --- CausalLM / LastRowLM (slot 0) ---
    [[nodiscard]] std::size_t vocab_size() const { return vocab_size_; }
    [[nodiscard]] std::size_t context_length() const { return context_length_; }
    [[nodiscard]] std::size_t cached_tokens() const { return cached_.at(0); }

    LogitsView forward(std::span<const Token> tokens) {
        return run_single(tokens, false, "forward");
    }
    LogitsView forward_last(std::span<const Token> tokens) {
        return run_single(tokens, true, "forward_last");
    }
    void truncate(std::size_t n) { truncate(0, n); }

    // --- TreeLM (slot 0; needs LlamaCppOptions::tree_leaves) ---
    // forward_tree: one llama_decode of the new nodes, each an output; the
    // cache keeps them as the pending tree (cached_tokens() unchanged).
    // commit_tree: keeps the path's cells as slot 0's next positions and
    // drops every other pending cell (no recomputation).
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents) {
        check_usable();
        if (tree_.leaf_limit() == 0) {
            throw Error(name_ + ": forward_tree: this context has no tree pass; create it with "
                                "LlamaCppOptions::tree_leaves > 0 (a llama.cpp sequence id per leaf of a tree)");
        }
        check_tree_feed(tokens, parents);
        if (tokens.empty()) return LogitsView{nullptr, 0, vocab_size_, vocab_size_};
        llama_cpp::TreePlan plan = tree_.plan(parents, static_cast<llama_pos>(cached_[0]), name_);
        std::vector<Entry> entries;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            entries.push_back({plan.nodes[i].seqs.front(), plan.nodes[i].position, tokens[i], static_cast<std::ptrdiff_t>(i),
                               std::span<const llama_seq_id>(plan.nodes[i].seqs).subspan(1)});
        }
        const float* rows = nullptr;
        try {
            for (const llama_cpp::SequenceCopy& copy : plan.copies)
                llama_memory_seq_cp(memory(), copy.from, copy.to, 0, copy.end);
            rows = decode_direct(entries, tokens.size());
            if (rows == nullptr) throw Error(name_ + ": forward_tree: " + llama_cpp::describe_decode_code(1));
        } catch (const Error& error) {
            tree_.add(plan);  // so that discarding also drops whatever the failed pass stored
            discard_tree();
            throw Error(std::string(error.what()) + " (the pending tree is discarded)");
        }
        tree_.add(plan);
        return LogitsView{rows, tokens.size(), vocab_size_, vocab_size_};
    }
    void commit_tree(std::span<const std::int32_t> path) {
        check_usable();
        tree_.check_path(path, name_);
        const llama_cpp::TreeCommit commit = tree_.commit(path, static_cast<llama_pos>(cached_[0]));
        bool ok = true;
        for (const llama_cpp::SequenceRemoval& removal : commit.removals)
            ok = llama_memory_seq_rm(memory(), removal.seq, removal.from, -1) && ok;
        if (commit.copy) llama_memory_seq_cp(memory(), commit.copy->from, commit.copy->to, commit.copy->begin, commit.copy->end);
        for (const llama_seq_id seq : commit.released) {
            ok = llama_memory_seq_rm(memory(), seq, -1, -1) && ok;
            ok = ok && llama_memory_seq_pos_max(memory(), seq) == -1;
        }
        tree_.clear();
        if (!ok) {
            failure_ = "llama.cpp refused to drop the cells of a token tree";
            throw Error(name_ + ": " + failure_ + llama_cpp::recent_errors_suffix());
        }
        cached_[0] += path.size();
        check_positions(0, "commit_tree");
    }
    // The most leaves a pending tree may have (LlamaCppOptions::tree_leaves).
    [[nodiscard]] std::size_t tree_leaves() const { return tree_.leaf_limit(); }

    // --- MultiSequenceLM ---
    [[nodiscard]] std::size_t sequence_slots() const { return cached_.size(); }
    [[nodiscard]] std::size_t cached_tokens(std::size_t slot) const {
        check_slot(slot, "cached_tokens");
        return cached_[slot];
    }
    LogitsView forward_batch(std::span<const SequenceFeed> feeds) {
        check_usable();
        detail::check_sequence_feeds(feeds, cached_.size(), vocab_size_, context_length_,
                                     [this](std::size_t slot) { return cached_[slot]; }, name_);
        if (std::any_of(feeds.begin(), feeds.end(), [](const SequenceFeed& f) { return f.slot == 0; })) discard_tree();
        return run(feeds, "forward_batch");
    }
    void truncate(std::size_t slot, std::size_t n) {
        check_usable();
        check_slot(slot, "truncate");
        if (slot == 0) discard_tree();
        if (n > cached_[slot]) {
            throw Error(name_ + ": truncate(" + std::to_string(n) + ") of slot " + std::to_string(slot) + " holding " +
                        std::to_string(cached_[slot]) + " positions; expected n <= cached_tokens()");
        }
        if (n == cached_[slot]) return;
        if (recurrent_) {
            roll_back_recurrent(slot, n, snapshots_);
            cached_[slot] = n;
            // A replay waits for the next pass (with every other slot's).
            if (!recurrent_rollback_.replay_pending(slot)) check_positions(slot, "truncate");
            return;
        }
        if (!llama_memory_seq_rm(memory(), seq(slot), static_cast<llama_pos>(n), -1)) {
            throw Error(name_ + ": llama.cpp refused to roll slot " + std::to_string(slot) + " back from " +
                        std::to_string(cached_[slot]) + " to " + std::to_string(n) + " positions" +
                        llama_cpp::recent_errors_suffix());
        }
        cached_[slot] = n;
        check_positions(slot, "truncate");
    }

    // Whether a forward_batch whose sequences feed unequal numbers of tokens
    // runs as several llama.cpp passes (one per distinct length): so with a
    // cache stream per sequence and more than one slot. BatchedDecoder tells
    // AutoBatchLength, which then gives every request of a step one length.
    [[nodiscard]] bool ragged_passes_split() const { return !unified_cache_ && cached_.size() > 1; }

    // Whether rollbacks restore a checkpoint and replay tokens (a recurrent
    // or hybrid model, llama_cpp_recurrent.hpp), and how many tokens they
    // have replayed so far.
    [[nodiscard]] bool rolls_back_by_replay() const { return recurrent_; }
    [[nodiscard]] std::size_t replayed_tokens() const { return recurrent_rollback_.replayed_tokens(); }
    // The states llama.cpp keeps per pass for its own rollback
    // (LlamaCppOptions::recurrent_snapshots, as granted), and the rollbacks
    // it did so, without a replay.
    [[nodiscard]] std::size_t recurrent_snapshots() const { return snapshots_; }
    [[nodiscard]] std::size_t snapshot_rollbacks() const { return recurrent_rollback_.snapshot_rollbacks(); }
    // Rollbacks that replayed tokens, and the llama_decode calls of their
    // replays (the slots rolled back between two passes replay in one).
    [[nodiscard]] std::size_t replayed_rollbacks() const { return recurrent_rollback_.replayed_rollbacks(); }
    [[nodiscard]] std::size_t replay_passes() const { return recurrent_rollback_.replay_passes(); }

    // --- llama.cpp specifics ---
    // The file name and the architecture, e.g. "stories260K.gguf (llama)".
    [[nodiscard]] const std::string& name() const { return name_; }

    [[nodiscard]] std::vector<Token> tokenize(std::string_view text, bool add_bos) const {
        const auto length = static_cast<std::int32_t>(text.size());
        std::int32_t count = llama_tokenize(vocab_, text.data(), length, nullptr, 0, add_bos, false);
        if (count == INT32_MIN) throw Error(name_ + ": text of " + std::to_string(text.size()) + " bytes is too long to tokenize");
        std::vector<Token> tokens(static_cast<std::size_t>(count < 0 ? -count : count));
        count = llama_tokenize(vocab_, text.data(), length, tokens.data(), static_cast<std::int32_t>(tokens.size()), add_bos,
                               false);
        if (count < 0) throw Error(name_ + ": llama_tokenize failed" + llama_cpp::recent_errors_suffix());
        tokens.resize(static_cast<std::size_t>(count));
        return tokens;
    }

    // The text of `tokens` (special tokens such as BOS are not rendered).
    [[nodiscard]] std::string detokenize(std::span<const Token> tokens) const {
        std::string text(tokens.size() * 8 + 16, '\0');
        const auto call = [&] {
            return llama_detokenize(vocab_, tokens.data(), static_cast<std::int32_t>(tokens.size()), text.data(),
                                    static_cast<std::int32_t>(text.size()), false, false);
        };
        std::int32_t size = call();
        if (size < 0) {
            text.resize(static_cast<std::size_t>(-size));
            size = call();
        }
        if (size < 0) throw Error(name_ + ": llama_detokenize failed");
        text.resize(static_cast<std::size_t>(size));
        return text;
    }

    [[nodiscard]] std::optional<Token> bos_token() const { return optional_token(llama_vocab_bos(vocab_)); }
    [[nodiscard]] std::optional<Token> eos_token() const { return optional_token(llama_vocab_eos(vocab_)); }
    // Whether the model's tokenizer starts a text with BOS (tokenize(text, add_bos()) as llama.cpp's tools do).
    [[nodiscard]] bool add_bos() const { return llama_vocab_get_add_bos(vocab_); }
    // Every end-of-generation token (EOS, EOT, ...), for DecodingOptions::stop_tokens.
    [[nodiscard]] std::vector<Token> stop_tokens() const {
        std::vector<Token> stops;
        for (llama_token t = 0; t < static_cast<llama_token>(vocab_size_); ++t)
            if (llama_vocab_is_eog(vocab_, t)) stops.push_back(t);
        return stops;
    }

    // Threads of one-token passes and of batch passes (0 = hardware concurrency).
    void set_threads(int threads, int threads_batch) {
        llama_set_n_threads(context_.get(), resolve_threads(threads), resolve_threads(threads_batch));
    }
    // Tokens per llama_decode call; a longer input is fed in chunks of this size.
    [[nodiscard]] std::size_t batch_capacity() const { return batch_capacity_; }

    [[nodiscard]] llama_model* model() const { return model_.get(); }
    [[nodiscard]] llama_context* context() const { return context_.get(); }
    [[nodiscard]] const llama_vocab* vocabulary() const { return vocab_; }

private:
    struct ContextFree {
        void operator()(llama_context* c) const { llama_free(c); }
    };
    struct BatchFree {
        void operator()(llama_batch* b) const {
            llama_batch_free(*b);
            delete b;
        }
    };

    // One token of a pass: where it goes and where its row goes (row < 0: no output).
    struct Entry {
        llama_seq_id seq;
        llama_pos position;
        Token token;
        std::ptrdiff_t row;
        std::span<const llama_seq_id> more_seqs{};  // a tree node's other sequences
    };

    LlamaCppModel(const std::string& path, const LlamaCppOptions& options) {
        llama_cpp::ensure_backend();
        const std::filesystem::path file(path);
        if (!std::filesystem::exists(file)) throw Error("llama.cpp model " + path + ": no such file");
        name_ = file.filename().string();
        check_sequences(options);
        llama_cpp::take_recent_errors();  // what was logged before belongs to nobody

        llama_model_params model_params = llama_model_default_params();
        std::vector<ggml_backend_dev_t> devices;
        if (!options.rpc_servers.empty()) {
            devices = llama_cpp::rpc_devices(options.rpc_servers);
            devices.push_back(nullptr);
            model_params.devices = devices.data();
            model_params.n_gpu_layers = options.gpu_layers == 0 ? -1 : options.gpu_layers;
        } else if (options.gpu_layers == 0) {
            devices.push_back(nullptr);  // no device at all: the whole model and its cache on the CPU
            model_params.devices = devices.data();
            model_params.n_gpu_layers = 0;
        } else {
            model_params.n_gpu_layers = options.gpu_layers;
        }
        model_.reset(llama_model_load_from_file(path.c_str(), model_params), llama_model_free);
        if (!model_) throw Error("llama.cpp could not load " + path + llama_cpp::recent_errors_suffix());
        char architecture[128] = {};
        if (llama_model_meta_val_str(model_.get(), "general.architecture", architecture, sizeof architecture) > 0)
            name_ += std::string(" (") + architecture + ")";
        refuse_unsupported_kinds();
        create_context(options);
    }

    // new_context(): a context of its own over loaded weights.
    LlamaCppModel(std::shared_ptr<llama_model> model, std::string name, const LlamaCppOptions& options)
        : model_(std::move(model)), name_(std::move(name)) {
        check_sequences(options);
        llama_cpp::take_recent_errors();
        create_context(options);
    }

    // Before any loading: a context of options.sequences slots can exist.
    void check_sequences(const LlamaCppOptions& options) const {
        if (options.sequences == 0) throw Error(name_ + ": LlamaCppOptions::sequences is 0; expected at least 1");
        if (options.sequences > llama_max_parallel_sequences()) {
            throw Error(name_ + ": LlamaCppOptions::sequences is " + std::to_string(options.sequences) +
                        "; this llama.cpp build holds at most " + std::to_string(llama_max_parallel_sequences()));
        }
    }

    // The context of `options` over model_ (loaded and accepted), its batch
    // and its slots; then the rollback probe.
    void create_context(const LlamaCppOptions& options) {
        placement_ = Placement{options.gpu_layers, options.rpc_servers};  // new_context() checked it equals the load's
        vocab_ = llama_model_get_vocab(model_.get());
        vocab_size_ = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
        const std::int32_t trained = llama_model_n_ctx_train(model_.get());
        const std::size_t context =
            options.context != 0 ? options.context : std::min<std::size_t>(trained > 0 ? static_cast<std::size_t>(trained) : 4096, 4096);
        const std::size_t batch = options.batch != 0 ? options.batch : 512;
        const std::size_t ubatch = options.ubatch != 0 ? options.ubatch : batch;
        if (ubatch > batch) {
            throw Error(name_ + ": LlamaCppOptions::ubatch " + std::to_string(ubatch) + " exceeds batch " +
                        std::to_string(batch));
        }
        const llama_model* m = model_.get();
        recurrent_ = llama_model_is_recurrent(m) || llama_model_is_hybrid(m);
        // A hybrid model's checkpoints must share the attention cells of
        // their slots: one cache, where llama_memory_seq_cp only marks cells
        // (between cache streams it copies whole buffers).
        if (recurrent_ && options.tree_leaves > 0) {
            throw Error(name_ + ": LlamaCppOptions::tree_leaves " + std::to_string(options.tree_leaves) +
                        ": a recurrent or hybrid model has no tree pass (its state cannot branch); set it to 0");
        }
        unified_cache_ = options.unified_cache || llama_model_is_hybrid(m) || options.tree_leaves > 0;
        const std::size_t tree_sequences = options.tree_leaves > 0 ? options.tree_leaves - 1 : 0;
        const std::size_t llama_sequences =
            (recurrent_ ? llama_cpp::RecurrentRollback::sequences_needed(options.sequences) : options.sequences) + tree_sequences;
        if (llama_sequences > llama_max_parallel_sequences()) {
            throw Error(name_ + ": LlamaCppOptions::sequences is " + std::to_string(options.sequences) + " and tree_leaves " +
                        std::to_string(options.tree_leaves) + ": that takes " + std::to_string(llama_sequences) +
                        " llama.cpp sequences (a recurrent model two a slot, a tree one a leaf after the first) "
                        "and this build holds at most " + std::to_string(llama_max_parallel_sequences()));
        }
        llama_context_params params = llama_context_default_params();
        // Unified, a checkpoint shares its slot's cells; in streams every
        // llama.cpp sequence has a stream of n_ctx / n_seq_max positions.
        params.n_ctx = static_cast<std::uint32_t>(context * (unified_cache_ ? options.sequences : llama_sequences));
        params.n_batch = static_cast<std::uint32_t>(batch);
        params.n_ubatch = static_cast<std::uint32_t>(ubatch);
        params.n_seq_max = static_cast<std::uint32_t>(llama_sequences);
        params.n_rs_seq = static_cast<std::uint32_t>(recurrent_ ? options.recurrent_snapshots : 0);
        // Every token of a pass may be an output (a verification pass needs
        // them all), and all of them may belong to one sequence.
        params.n_outputs_max = static_cast<std::uint32_t>(batch);
        params.n_outputs_max_per_seq = static_cast<std::uint32_t>(batch);
        params.n_threads = resolve_threads(options.threads);
        params.n_threads_batch = resolve_threads(options.threads_batch);
        // By default independent sequences: a cache stream each, so one
        // sequence can neither fill nor slow down another's.
        params.kv_unified = unified_cache_;
        // A sliding-window cache of full size forgets nothing, so rolling back
        // never needs a position it already dropped.
        params.swa_full = true;
        params.no_perf = true;
        params.embeddings = false;
        context_.reset(llama_init_from_model(model_.get(), params));
        if (!context_) {
            throw Error(name_ + ": llama.cpp could not create a context of " + std::to_string(context) + " positions x " +
                        std::to_string(options.sequences) + " sequences" + llama_cpp::recent_errors_suffix());
        }
        if (llama_n_ctx_seq(context_.get()) < context) {
            throw Error(name_ + ": llama.cpp gave " + std::to_string(llama_n_ctx_seq(context_.get())) +
                        " positions per sequence; asked for " + std::to_string(context));
        }
        context_length_ = context;
        batch_capacity_ = llama_n_batch(context_.get());
        batch_.reset(new llama_batch(llama_batch_init(static_cast<std::int32_t>(batch_capacity_), 0,
                                                      static_cast<std::int32_t>(std::max<std::size_t>(options.tree_leaves, 1)))));
        tree_ = llama_cpp::PendingTree(options.tree_leaves, static_cast<llama_seq_id>(llama_sequences - tree_sequences));
        cached_.assign(options.sequences, 0);
        if (recurrent_) recurrent_rollback_ = llama_cpp::RecurrentRollback(options.sequences);
        snapshots_ = recurrent_ ? llama_n_rs_seq(context_.get()) : 0;
        refuse_without_partial_rollback();
    }

    void refuse_unsupported_kinds() const {
        const llama_model* m = model_.get();
        const char* why = nullptr;
        if (llama_model_is_diffusion(m)) why = "a diffusion model: it does not predict the next token";
        else if (llama_model_has_encoder(m)) why = "an encoder-decoder model: only decoder-only models are supported";
        else if (!llama_model_has_decoder(m)) why = "a model without a decoder";
        if (why != nullptr) throw Error(name_ + " cannot serve speculative decoding: it is " + why);
    }

    // The rollback probe on this context's own memory.
    struct ContextMemory {
        LlamaCppModel* self;
        bool decode_two_tokens() {
            llama_batch& b = *self->batch_;
            const llama_token bos = llama_vocab_bos(self->vocab_);
            const llama_token token = bos != LLAMA_TOKEN_NULL ? bos : 0;
            b.n_tokens = 2;
            for (int i = 0; i < 2; ++i) {
                b.token[i] = token;
                b.pos[i] = i;
                b.n_seq_id[i] = 1;
                b.seq_id[i][0] = 0;
                b.logits[i] = i == 1;
            }
            return llama_decode(self->context_.get(), b) == 0;
        }
        bool remove_from(int position) { return llama_memory_seq_rm(self->memory(), 0, position, -1); }
        int last_position() { return llama_memory_seq_pos_max(self->memory(), 0); }
        void clear() { llama_memory_clear(self->memory(), true); }
    };

    void refuse_without_partial_rollback() {
        ContextMemory memory{this};
        const llama_token bos = llama_vocab_bos(vocab_);
        const llama_cpp::RollbackProbe probe =
            recurrent_ ? llama_cpp::probe_checkpoint_rollback(context_.get(), *batch_, recurrent_rollback_.checkpoint_seq(0),
                                                              vocab_size_, bos != LLAMA_TOKEN_NULL ? bos : 0)
                       : llama_cpp::probe_partial_rollback(memory);
        if (!probe.partial_rollback) {
            throw Error(name_ + " cannot serve speculative decoding: its cache cannot be rolled back to an earlier position (" +
                        probe.reason + ")" + llama_cpp::recent_errors_suffix());
        }
        if (snapshots_ > 0) {
            const llama_cpp::RollbackProbe own = llama_cpp::probe_snapshot_rollback(
                context_.get(), *batch_, vocab_size_, bos != LLAMA_TOKEN_NULL ? bos : 0, static_cast<llama_token>(vocab_size_ - 1));
            if (!own.partial_rollback) {
                throw Error(name_ + ": LlamaCppOptions::recurrent_snapshots " + std::to_string(snapshots_) +
                            ": llama.cpp's own rollback fails its probe (" + own.reason +
                            "); set it to 0 to roll back by checkpoint and replay" + llama_cpp::recent_errors_suffix());
            }
        }
    }

    [[nodiscard]] static int resolve_threads(int threads) {
        if (threads > 0) return threads;
        return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    [[nodiscard]] static std::optional<Token> optional_token(llama_token t) {
        if (t == LLAMA_TOKEN_NULL) return std::nullopt;
        return t;
    }
    [[nodiscard]] llama_memory_t memory() const { return llama_get_memory(context_.get()); }
    [[nodiscard]] static llama_seq_id seq(std::size_t slot) { return static_cast<llama_seq_id>(slot); }

    void check_slot(std::size_t slot, const char* what) const {
        if (slot >= cached_.size()) {
            throw Error(name_ + ": " + what + " of slot " + std::to_string(slot) + ", out of range [0, " +
                        std::to_string(cached_.size()) + ")");
        }
    }
    void check_usable() const {
        if (!failure_.empty()) throw Error(name_ + " is unusable after an earlier failure: " + failure_);
    }

    // The slot's positions in llama.cpp's memory must be exactly 0 .. cached - 1.
    void check_positions(std::size_t slot, const char* after) {
        const llama_pos last = llama_memory_seq_pos_max(memory(), seq(slot));
        const llama_pos expected = static_cast<llama_pos>(cached_[slot]) - 1;
        if (recurrent_ && recurrent_rollback_.held(slot) != cached_[slot]) {
            failure_ = "after " + std::string(after) + " slot " + std::to_string(slot) + " records " +
                       std::to_string(recurrent_rollback_.held(slot)) + " tokens for replay, expected " +
                       std::to_string(cached_[slot]);
            throw Error(name_ + ": internal error: " + failure_);
        }
        if (last != expected) {
            failure_ = "after " + std::string(after) + " slot " + std::to_string(slot) + " ends at position " +
                       std::to_string(last) + " in llama.cpp's memory, expected " + std::to_string(expected);
            throw Error(name_ + ": " + failure_);
        }
    }

    // Validation of forward / forward_last (forward_batch uses check_sequence_feeds).
    void check_single_feed(std::span<const Token> tokens, const char* what) const {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_size_) {
                throw Error(name_ + ": " + what + ": token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
            }
        }
        if (tokens.size() > context_length_ - cached_[0]) {
            throw Error(name_ + ": " + what + " of " + std::to_string(tokens.size()) + " tokens after " +
                        std::to_string(cached_[0]) + " cached positions overflows the context length " +
                        std::to_string(context_length_) + "; expected at most " +
                        std::to_string(context_length_ - cached_[0]) + " tokens");
        }
    }

    // Validation of forward_tree, before anything changes.
    void check_tree_feed(std::span<const Token> tokens, std::span<const std::int32_t> parents) const {
        if (tokens.size() != parents.size()) {
            throw Error(name_ + ": forward_tree of " + std::to_string(tokens.size()) + " tokens with " +
                        std::to_string(parents.size()) + " parents; expected one parent per token");
        }
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_size_) {
                throw Error(name_ + ": forward_tree: token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
            }
        }
        const std::size_t free = context_length_ - cached_[0];
        tree_.check_parents(parents, free, name_);
        if (tokens.size() > batch_capacity_) {
            throw Error(name_ + ": forward_tree of " + std::to_string(tokens.size()) + " nodes exceeds llama.cpp's batch of " +
                        std::to_string(batch_capacity_) + " tokens (LlamaCppOptions::batch)");
        }
    }

    // Drops a pending tree (any call but forward_tree and commit_tree does).
    void discard_tree() {
        if (!tree_.empty()) commit_tree({});
    }

    // forward / forward_last on slot 0.
    LogitsView run_single(std::span<const Token> tokens, bool last_row_only, const char* what) {
        check_usable();
        check_single_feed(tokens, what);
        discard_tree();
        if (tokens.empty()) {
            if (last_row_only) throw Error(name_ + ": forward_last of no tokens; expected at least one");
            return LogitsView{nullptr, 0, vocab_size_, vocab_size_};
        }
        const SequenceFeed feed{.slot = 0, .tokens = tokens, .last_row_only = last_row_only};
        return run({&feed, 1}, what);
    }

    // One pass over validated feeds: every fed slot grows by its feed, or
    // (on any failure) every cache is left as it was and Error is thrown.
    LogitsView run(std::span<const SequenceFeed> feeds, const char* what) {
        std::vector<Entry> entries;
        std::ptrdiff_t rows = 0;
        for (const SequenceFeed& feed : feeds) {
            for (std::size_t j = 0; j < feed.tokens.size(); ++j) {
                const bool output = !feed.last_row_only || j + 1 == feed.tokens.size();
                entries.push_back({seq(feed.slot), static_cast<llama_pos>(cached_[feed.slot] + j), feed.tokens[j],
                                   output ? rows++ : -1});
            }
        }
        if (entries.empty()) return LogitsView{nullptr, 0, vocab_size_, vocab_size_};

        // A pass in one llama_decode whose rows llama.cpp stores contiguously
        // in batch order needs no copy; anything else is gathered in logits_.
        const float* direct = nullptr;
        if (recurrent_) {
            replay_rolled_back_slots();
            for (const SequenceFeed& feed : feeds)
                if (!feed.tokens.empty()) recurrent_rollback_.before_pass(memory(), feed.slot, feed.tokens.size());
        }
        try {
            if (entries.size() <= batch_capacity_) direct = decode_direct(entries, static_cast<std::size_t>(rows));
            if (direct == nullptr) {
                logits_.assign(static_cast<std::size_t>(rows) * vocab_size_, 0.0f);
                for (std::size_t begin = 0; begin < entries.size(); begin += batch_capacity_) {
                    const std::size_t end = std::min(entries.size(), begin + batch_capacity_);
                    decode_gathering(std::span<const Entry>(entries).subspan(begin, end - begin));
                }
            }
        } catch (const Error& error) {
            roll_back(feeds);
            if (!failure_.empty()) throw Error(std::string(error.what()) + "; then " + failure_);
            throw;
        } catch (...) {  // e.g. std::bad_alloc between two chunks
            roll_back(feeds);
            throw;
        }
        for (const SequenceFeed& feed : feeds) {
            if (recurrent_) recurrent_rollback_.after_pass(feed.slot, feed.tokens, entries.size() <= batch_capacity_);
            cached_[feed.slot] += feed.tokens.size();
            check_positions(feed.slot, what);
        }
        const float* data = direct != nullptr ? direct : logits_.data();
        return LogitsView{data, static_cast<std::size_t>(rows), vocab_size_, vocab_size_};
    }

    // Puts the feeds' slots back to their cached_ counts after a failed pass.
    void roll_back(std::span<const SequenceFeed> feeds) {
        for (const SequenceFeed& feed : feeds) {
            const std::size_t slot = feed.slot;
            if (recurrent_) {
                try {
                    roll_back_recurrent(slot, cached_[slot], 0);  // the failed pass's states are no snapshots
                } catch (const Error&) {  // failure_ says why
                }
                continue;
            }
            if (!llama_memory_seq_rm(memory(), seq(slot), static_cast<llama_pos>(cached_[slot]), -1) ||
                llama_memory_seq_pos_max(memory(), seq(slot)) != static_cast<llama_pos>(cached_[slot]) - 1) {
                failure_ = "a failed pass left slot " + std::to_string(slot) +
                           " in a state that could not be rolled back to " + std::to_string(cached_[slot]) + " positions";
            }
        }
    }

    // A recurrent slot back to its first n tokens (llama_cpp_recurrent.hpp);
    // if that fails the cache's state is unknown and the model refuses
    // every later call.
    void roll_back_recurrent(std::size_t slot, std::size_t n, std::size_t snapshots) {
        try {
            recurrent_rollback_.truncate(context_.get(), slot, n, snapshots, name_);
        } catch (const Error& error) {
            failure_ = error.what();
            throw;
        }
    }

    // The replays of the slots rolled back since the last pass, in one
    // llama_decode before the next; failing, the model is unusable.
    void replay_rolled_back_slots() {
        std::vector<std::size_t> replayed;
        try {
            replayed = recurrent_rollback_.replay_pending_slots(context_.get(), *batch_, batch_capacity_, name_);
        } catch (const Error& error) {
            failure_ = error.what();
            throw;
        }
        for (const std::size_t slot : replayed) check_positions(slot, "a replay");
    }

    void fill_batch(std::span<const Entry> entries) {
        llama_batch& b = *batch_;
        b.n_tokens = static_cast<std::int32_t>(entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i) {
            b.token[i] = entries[i].token;
            b.pos[i] = entries[i].position;
            b.n_seq_id[i] = static_cast<std::int32_t>(1 + entries[i].more_seqs.size());
            b.seq_id[i][0] = entries[i].seq;
            std::copy(entries[i].more_seqs.begin(), entries[i].more_seqs.end(), b.seq_id[i] + 1);
            b.logits[i] = entries[i].row >= 0;
        }
    }

    // Decodes entries in one call; returns the start of their rows if
    // llama.cpp holds them contiguously, nullptr if the caller must decode
    // them itself (no KV slot for the whole pass: decode_gathering splits it).
    const float* decode_direct(std::span<const Entry> entries, std::size_t rows) {
        fill_batch(entries);
        const std::int32_t code = llama_decode(context_.get(), *batch_);
        if (code == 1 && spans_several_sequences(entries)) return nullptr;
        if (code != 0) throw decode_error(code, entries);
        const float* first = nullptr;
        std::size_t seen = 0;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (entries[i].row < 0) continue;
            const float* row = llama_get_logits_ith(context_.get(), static_cast<std::int32_t>(i));
            if (row == nullptr) throw missing_row(i);
            if (first == nullptr) first = row;
            if (row != first + seen * vocab_size_) {
                copy_rows(entries);
                return logits_.data();
            }
            ++seen;
        }
        if (seen != rows) throw Error(name_ + ": internal error: " + std::to_string(seen) + " output rows for " + std::to_string(rows));
        return first;
    }

    void copy_rows(std::span<const Entry> entries) {
        std::ptrdiff_t rows = 0;
        for (const Entry& e : entries) rows = std::max(rows, e.row + 1);
        logits_.assign(static_cast<std::size_t>(rows) * vocab_size_, 0.0f);
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (entries[i].row < 0) continue;
            const float* row = llama_get_logits_ith(context_.get(), static_cast<std::int32_t>(i));
            if (row == nullptr) throw missing_row(i);
            std::copy(row, row + vocab_size_, logits_.begin() + entries[i].row * static_cast<std::ptrdiff_t>(vocab_size_));
        }
    }

    // Decodes entries (at most batch_capacity_) and copies their rows into
    // logits_. "No KV slot" for entries of several sequences is retried as
    // two smaller passes split between sequences, never inside one: a
    // sequence's tokens stay in one pass with their rows (llama.cpp#24840).
    void decode_gathering(std::span<const Entry> entries) {
        fill_batch(entries);
        const std::int32_t code = llama_decode(context_.get(), *batch_);
        if (code == 1 && spans_several_sequences(entries)) {
            const std::size_t cut = sequence_boundary_near_middle(entries);
            decode_gathering(entries.first(cut));
            decode_gathering(entries.subspan(cut));
            return;
        }
        if (code != 0) throw decode_error(code, entries);
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (entries[i].row < 0) continue;
            const float* row = llama_get_logits_ith(context_.get(), static_cast<std::int32_t>(i));
            if (row == nullptr) throw missing_row(i);
            std::copy(row, row + vocab_size_, logits_.begin() + entries[i].row * static_cast<std::ptrdiff_t>(vocab_size_));
        }
    }

    [[nodiscard]] static bool spans_several_sequences(std::span<const Entry> entries) {
        return !entries.empty() && entries.front().seq != entries.back().seq;
    }
    [[nodiscard]] static std::size_t sequence_boundary_near_middle(std::span<const Entry> entries) {
        std::vector<std::int32_t> seq_ids;
        for (const Entry& e : entries) seq_ids.push_back(e.seq);
        return llama_cpp::sequence_boundary_near_middle(seq_ids);
    }

    Error decode_error(std::int32_t code, std::span<const Entry> entries) const {
        return Error(name_ + ": a pass of " + std::to_string(entries.size()) + " tokens failed: " +
                     llama_cpp::describe_decode_code(code) +
                     (llama_cpp::leaves_partial_batch(llama_cpp::decode_outcome(code))
                          ? " (the positions it had already stored are removed again)"
                          : "") +
                     llama_cpp::recent_errors_suffix());
    }
    Error missing_row(std::size_t index) const {
        return Error(name_ + ": llama.cpp returned no logits for batch index " + std::to_string(index) +
                     " although it was marked as an output" + llama_cpp::recent_errors_suffix());
    }

    // Where the weights went at load(): new_context() keeps them there.
    struct Placement {
        int gpu_layers = 0;
        std::vector<std::string> rpc_servers;
    };

    // Declaration order matters: the context is destroyed before its model
    // (shared with the models new_context() made over the same weights).
    std::shared_ptr<llama_model> model_;
    Placement placement_;
    std::unique_ptr<llama_context, ContextFree> context_;
    std::unique_ptr<llama_batch, BatchFree> batch_;
    const llama_vocab* vocab_ = nullptr;
    std::size_t vocab_size_ = 0;
    std::size_t context_length_ = 0;
    std::size_t batch_capacity_ = 0;
    bool unified_cache_ = false;
    bool recurrent_ = false;                          // rolls back by checkpoint and replay
    llama_cpp::RecurrentRollback recurrent_rollback_;  // its checkpoints and the slots' tokens
    std::size_t snapshots_ = 0;                       // llama.cpp's n_rs_seq as granted
    llama_cpp::PendingTree tree_;                      // slot 0's pending token tree and its sequence ids
    std::vector<std::size_t> cached_;  // positions per slot, kept here and checked against llama.cpp's memory
    std::vector<float> logits_;        // rows gathered from several decodes
    std::string name_;
    std::string failure_;              // non-empty: the cache is in an unknown state, every call refuses
};

static_assert(CausalLM<LlamaCppModel> && LastRowLM<LlamaCppModel> && MultiSequenceLM<LlamaCppModel> && TreeLM<LlamaCppModel>);

// Throws specdec::Error naming both models unless they have the same
// vocabulary (tokenizer type, size, and every token's text and attributes).
inline void check_same_vocabulary(const LlamaCppModel& target, const LlamaCppModel& draft) {
    llama_cpp::check_same_vocabulary(target.vocabulary(), target.name(), draft.vocabulary(), draft.name());
}

}  // namespace specdec
