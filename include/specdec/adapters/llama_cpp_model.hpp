#pragma once
// A llama.cpp model + context as a specdec model: CausalLM, LastRowLM,
// MultiSequenceLM and TreeLM (specdec/core/model_contract.hpp), so that every
// decoder of the library runs on any model llama.cpp loads, on its devices
// and on its RPC servers. Needs only llama.h (and the ggml headers it
// includes). Three ways in:
//   LlamaCppModel::from_gguf(path, options[, params])  loads a file
//   model.new_context(options[, params])                another context over the same weights
//   LlamaCppModel::borrow(model, context[, options])    the caller's own llama.cpp objects
//
// How the contract maps onto llama.h:
//  - a cache slot is a llama.cpp sequence id (0 .. sequences - 1), each with
//    its own cache stream (kv_unified off) of `max_context` positions, or all
//    in one cache (LlamaCppOptions::unified_cache);
//  - forward() marks every token of the batch as an output, so one pass
//    returns a logits row per token (a verification pass); inputs longer
//    than the context's batch size are fed in consecutive chunks
//    (llama_cpp_passes.hpp);
//  - truncate() is llama_memory_seq_rm of the positions past n. The context
//    is probed at construction (llama_cpp_context.hpp) and a model whose
//    memory cannot drop a suffix is refused, never rolled back wrongly;
//  - a recurrent or hybrid model (a state per sequence that every token
//    overwrites) rolls back from a checkpoint sequence per slot and replays
//    the tokens after it (llama_cpp_recurrent.hpp), probed the same way;
//  - the adapter keeps each slot's position count itself and checks it
//    against llama_memory_seq_pos_max after every pass and rollback;
//  - a token tree (TreeLM, with tree_leaves) is one llama_decode whose tokens
//    carry several sequence ids: every leaf of the pending tree has a
//    llama.cpp sequence of its own, and a node belongs to the sequences of
//    all leaves below it (llama_cpp_tree.hpp);
//  - a failed llama_decode is reported as a specdec::Error with the meaning
//    of its code, after the fed slots were rolled back to where they were.
//    If the cache cannot be brought back to a known state the model refuses
//    every later call.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <llama.h>

#include "specdec/adapters/llama_cpp_context.hpp"
#include "specdec/adapters/llama_cpp_decode_status.hpp"
#include "specdec/adapters/llama_cpp_handles.hpp"
#include "specdec/adapters/llama_cpp_options.hpp"
#include "specdec/adapters/llama_cpp_passes.hpp"
#include "specdec/adapters/llama_cpp_recurrent.hpp"
#include "specdec/adapters/llama_cpp_runtime.hpp"
#include "specdec/adapters/llama_cpp_tree.hpp"
#include "specdec/adapters/llama_cpp_vocabulary.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/sequence_feeds.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

class LlamaCppModel {
public:
    // Loads a GGUF file with llama.cpp and creates its context. `params`
    // passes llama.cpp's own parameters through (LlamaCppParams: flash
    // attention, KV cache types, GPU split, load mode, ...). Throws
    // specdec::Error (naming the file) if llama.cpp cannot load it, if the
    // options or params are invalid, or if the model cannot serve
    // speculative decoding (an encoder-decoder, a diffusion model, a memory
    // that fails its rollback probe). A recurrent or hybrid model gets twice
    // the llama.cpp sequences (its checkpoints), and a hybrid one a unified
    // cache.
    static LlamaCppModel from_gguf(const std::string& gguf_path, const LlamaCppOptions& options = {},
                                   const LlamaCppParams& params = {}) {
        llama_cpp::ensure_backend();
        const std::filesystem::path file(gguf_path);
        if (!std::filesystem::exists(file)) throw Error("llama.cpp model " + gguf_path + ": no such file");
        std::string name = file.filename().string();
        check_sequences(options, name);
        llama_cpp::refuse_owned_params(params, name);
        llama_cpp::take_recent_errors();  // what was logged before belongs to nobody
        std::shared_ptr<llama_model> model = llama_cpp::load_model(gguf_path, options, params.model);
        name = llama_cpp::model_name(model.get(), std::move(name));
        llama_cpp::refuse_unsupported_kinds(model.get(), name);
        return LlamaCppModel(std::move(model), std::move(name), Placement{options.gpu_layers, options.rpc_servers}, options,
                             params.context);
    }
    [[deprecated("renamed LlamaCppModel::from_gguf")]] static LlamaCppModel load(const std::string& gguf_path,
                                                                                  const LlamaCppOptions& options = {}) {
        return from_gguf(gguf_path, options);
    }

    // A model over the caller's llama.cpp model and context, both borrowed:
    // used as they are and never freed here, so they must outlive this
    // object (and the contexts new_context() makes over `model`). The
    // context's batch size, threads, cache types and devices are its own;
    // `options` say how many slots it serves. It must be a context of
    // `model`, hold the llama.cpp sequences the slots need (n_seq_max; a
    // recurrent model twice as many, a tree tree_leaves - 1 more and
    // kv_unified), leave n_outputs_max at 0 (every token of a pass may be an
    // output) and hold no positions yet. The rollback probe runs on it as on
    // a loaded one. With swa_full off, a rollback past what the sliding
    // window kept is refused. Throws specdec::Error for null pointers and
    // for a context that does not qualify.
    static LlamaCppModel borrow(llama_model* model, llama_context* context, const LlamaCppBorrowOptions& options = {}) {
        if (model == nullptr || context == nullptr) {
            throw Error(std::string("LlamaCppModel::borrow: the llama.cpp ") +
                        (model == nullptr ? (context == nullptr ? "model and context are" : "model is") : "context is") +
                        " null");
        }
        if (options.sequences == 0) throw Error("LlamaCppModel::borrow: LlamaCppBorrowOptions::sequences is 0; expected at least 1");
        llama_cpp::ensure_backend();
        llama_cpp::take_recent_errors();
        std::string name = llama_cpp::model_name(model, "borrowed llama.cpp model");
        llama_cpp::refuse_unsupported_kinds(model, name);
        const llama_cpp::ContextLayout layout = llama_cpp::borrowed_layout(model, context, options, name);
        return LlamaCppModel(llama_cpp::Handles::borrowed(model, context), std::move(name), layout);
    }

    // Another model over the weights this one loaded, with a context (cache
    // slots, threads, batch size) of its own from `options`: several decoders
    // (say one per batch size, or a batched and a single-sequence one) then
    // share one copy of the weights. The weights stay where they were loaded,
    // so options.gpu_layers and options.rpc_servers must be those of
    // from_gguf() (0 and none for borrowed weights); a placement that differs
    // is refused, not silently ignored. Loaded weights live until the last
    // model over them is destroyed.
    [[nodiscard]] LlamaCppModel new_context(const LlamaCppOptions& options, const LlamaCppParams& params = {}) const {
        if (options.gpu_layers != placement_.gpu_layers || options.rpc_servers != placement_.rpc_servers) {
            throw Error(name_ + ": new_context cannot move the loaded weights; give it the gpu_layers (" +
                        std::to_string(placement_.gpu_layers) + ") and rpc_servers (" +
                        std::to_string(placement_.rpc_servers.size()) + ") of from_gguf()");
        }
        check_sequences(options, name_);
        llama_cpp::refuse_owned_params(params, name_);
        llama_cpp::take_recent_errors();
        return LlamaCppModel(handles_.shared_model(), name_, placement_, options, params.context);
    }

    LlamaCppModel(LlamaCppModel&&) noexcept = default;
    LlamaCppModel& operator=(LlamaCppModel&&) noexcept = default;
    LlamaCppModel(const LlamaCppModel&) = delete;
    LlamaCppModel& operator=(const LlamaCppModel&) = delete;
    ~LlamaCppModel() = default;

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
        std::vector<llama_cpp::PassEntry> entries;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            entries.push_back({plan.nodes[i].seqs.front(), plan.nodes[i].position, tokens[i], static_cast<std::ptrdiff_t>(i),
                               std::span<const llama_seq_id>(plan.nodes[i].seqs).subspan(1)});
        }
        const float* rows = nullptr;
        try {
            for (const llama_cpp::SequenceCopy& copy : plan.copies)
                llama_memory_seq_cp(memory(), copy.from, copy.to, 0, copy.end);
            rows = passes_.decode_direct(context(), entries, tokens.size());
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
        check_window(slot);
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

    // The tokens of `text`, with BOS first if add_bos. parse_special: text
    // that spells a special token ("<|im_start|>", "<s>") becomes that token,
    // as a prompt formatted by a chat template needs; off, it is tokenised as
    // plain text (user input that must not inject control tokens).
    [[nodiscard]] std::vector<Token> tokenize(std::string_view text, bool add_bos, bool parse_special = false) const {
        const auto length = static_cast<std::int32_t>(text.size());
        std::int32_t count = llama_tokenize(vocab_, text.data(), length, nullptr, 0, add_bos, parse_special);
        if (count == INT32_MIN) throw Error(name_ + ": text of " + std::to_string(text.size()) + " bytes is too long to tokenize");
        std::vector<Token> tokens(static_cast<std::size_t>(count < 0 ? -count : count));
        count = llama_tokenize(vocab_, text.data(), length, tokens.data(), static_cast<std::int32_t>(tokens.size()), add_bos,
                               parse_special);
        if (count < 0) throw Error(name_ + ": llama_tokenize failed" + llama_cpp::recent_errors_suffix());
        tokens.resize(static_cast<std::size_t>(count));
        return tokens;
    }
    // With BOS as the model's tokenizer asks (add_bos()), no special tokens parsed.
    [[nodiscard]] std::vector<Token> tokenize(std::string_view text) const { return tokenize(text, add_bos()); }

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
        llama_set_n_threads(context(), llama_cpp::resolve_threads(threads), llama_cpp::resolve_threads(threads_batch));
    }
    // Tokens per llama_decode call; a longer input is fed in chunks of this size.
    [[nodiscard]] std::size_t batch_capacity() const { return passes_.capacity(); }

    // The llama.cpp objects underneath (for llama.h calls of the caller's own;
    // a call that changes the memory puts the adapter out of step with it).
    [[nodiscard]] llama_model* model() const { return handles_.model(); }
    [[nodiscard]] llama_context* context() const { return handles_.context(); }
    // Whether the model and context are the caller's (borrow()).
    [[nodiscard]] bool borrowed() const { return !handles_.owns_context(); }
    [[nodiscard]] const llama_vocab* vocabulary() const { return vocab_; }

private:
    // Where the weights went at from_gguf(): new_context() keeps them there.
    struct Placement {
        int gpu_layers = 0;
        std::vector<std::string> rpc_servers;
    };

    // A context of its own over loaded weights (from_gguf, new_context).
    LlamaCppModel(std::shared_ptr<llama_model> model, std::string name, Placement placement, const LlamaCppOptions& options,
                  const llama_context_params& base)
        : placement_(std::move(placement)), name_(std::move(name)) {
        llama_cpp::ContextLayout layout;
        const llama_context_params params = llama_cpp::context_params(model.get(), options, base, layout, name_);
        llama_context* context = llama_cpp::create_context(model.get(), params, layout, name_);
        handles_ = llama_cpp::Handles(std::move(model), context);
        set_up(layout, std::max<std::size_t>(options.tree_leaves, 1));
    }

    // borrow(): the caller's objects, already checked against `layout`.
    LlamaCppModel(llama_cpp::Handles handles, std::string name, const llama_cpp::ContextLayout& layout)
        : handles_(std::move(handles)), name_(std::move(name)) {
        set_up(layout, std::max<std::size_t>(layout.tree_leaves, 1));
    }

    // Options that are wrong before anything is loaded.
    static void check_sequences(const LlamaCppOptions& options, const std::string& name) {
        if (options.sequences == 0) throw Error(name + ": LlamaCppOptions::sequences is 0; expected at least 1");
        if (options.sequences > llama_max_parallel_sequences()) {
            throw Error(name + ": LlamaCppOptions::sequences is " + std::to_string(options.sequences) +
                        "; this llama.cpp build holds at most " + std::to_string(llama_max_parallel_sequences()));
        }
    }

    // The slots, batch and tree bookkeeping of a context laid out as
    // `layout`; then the rollback probe.
    void set_up(const llama_cpp::ContextLayout& layout, std::size_t seqs_per_token) {
        vocab_ = llama_model_get_vocab(model());
        vocab_size_ = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
        context_length_ = layout.context_length;
        unified_cache_ = layout.unified;
        recurrent_ = layout.recurrent;
        swa_ = static_cast<std::size_t>(std::max(0, llama_model_n_swa(model())));
        passes_ = llama_cpp::PassEngine(llama_n_batch(context()), seqs_per_token, vocab_size_, name_);
        tree_ = llama_cpp::PendingTree(layout.tree_leaves, layout.first_tree_sequence());
        cached_.assign(layout.slots, 0);
        if (recurrent_) recurrent_rollback_ = llama_cpp::RecurrentRollback(layout.slots);
        snapshots_ = recurrent_ ? llama_n_rs_seq(context()) : 0;
        llama_cpp::probe_rollback(context(), passes_.batch(), layout, vocab_size_,
                                  recurrent_ ? recurrent_rollback_.checkpoint_seq(0) : 0, snapshots_, name_);
    }

    [[nodiscard]] static std::optional<Token> optional_token(llama_token t) {
        if (t == LLAMA_TOKEN_NULL) return std::nullopt;
        return t;
    }
    [[nodiscard]] llama_memory_t memory() const { return llama_get_memory(context()); }
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

    // A sliding-window cache that is not full size (a borrowed context with
    // swa_full off) forgets positions: after a rollback to n, the next token
    // attends to at most the window before it, which must still be there.
    // llama.h does not say the window's kind (standard, chunked), so the
    // check asks for position n - window, one more than a standard window
    // reads and no more than a chunked one: it may refuse at the boundary,
    // never accept a cache that lost a position the next token reads.
    void check_window(std::size_t slot) {
        if (swa_ == 0 || cached_[slot] == 0) return;
        const llama_pos first = llama_memory_seq_pos_min(memory(), seq(slot));
        const std::size_t needed = cached_[slot] > swa_ ? cached_[slot] - swa_ : 0;
        if (first < 0 || first > static_cast<llama_pos>(needed)) {
            failure_ = "a rollback of slot " + std::to_string(slot) + " to " + std::to_string(cached_[slot]) +
                       " positions needs position " + std::to_string(needed) + ", which the sliding-window cache dropped "
                       "(its first is " + std::to_string(first) + "; create the context with swa_full = true)";
            throw Error(name_ + ": " + failure_);
        }
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
        if (tokens.size() > passes_.capacity()) {
            throw Error(name_ + ": forward_tree of " + std::to_string(tokens.size()) + " nodes exceeds llama.cpp's batch of " +
                        std::to_string(passes_.capacity()) + " tokens (LlamaCppOptions::batch)");
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
        std::vector<llama_cpp::PassEntry> entries;
        std::ptrdiff_t rows = 0;
        for (const SequenceFeed& feed : feeds) {
            for (std::size_t j = 0; j < feed.tokens.size(); ++j) {
                const bool output = !feed.last_row_only || j + 1 == feed.tokens.size();
                entries.push_back({seq(feed.slot), static_cast<llama_pos>(cached_[feed.slot] + j), feed.tokens[j],
                                   output ? rows++ : -1});
            }
        }
        if (entries.empty()) return LogitsView{nullptr, 0, vocab_size_, vocab_size_};

        if (recurrent_) {
            replay_rolled_back_slots();
            for (const SequenceFeed& feed : feeds)
                if (!feed.tokens.empty()) recurrent_rollback_.before_pass(memory(), feed.slot, feed.tokens.size());
        }
        const float* data = nullptr;
        try {
            data = passes_.decode(context(), entries, static_cast<std::size_t>(rows));
        } catch (const Error& error) {
            roll_back(feeds);
            if (!failure_.empty()) throw Error(std::string(error.what()) + "; then " + failure_);
            throw;
        } catch (...) {  // e.g. std::bad_alloc between two chunks
            roll_back(feeds);
            throw;
        }
        for (const SequenceFeed& feed : feeds) {
            if (recurrent_) recurrent_rollback_.after_pass(feed.slot, feed.tokens, entries.size() <= passes_.capacity());
            cached_[feed.slot] += feed.tokens.size();
            check_positions(feed.slot, what);
        }
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
            recurrent_rollback_.truncate(context(), slot, n, snapshots, name_);
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
            replayed = recurrent_rollback_.replay_pending_slots(context(), passes_.batch(), passes_.capacity(), name_);
        } catch (const Error& error) {
            failure_ = error.what();
            throw;
        }
        for (const std::size_t slot : replayed) check_positions(slot, "a replay");
    }

    // First: released last, after everything that refers to its context.
    llama_cpp::Handles handles_;
    Placement placement_;
    llama_cpp::PassEngine passes_;  // the llama_batch and the gathered rows
    const llama_vocab* vocab_ = nullptr;
    std::size_t vocab_size_ = 0;
    std::size_t context_length_ = 0;
    std::size_t swa_ = 0;                             // the model's sliding window (0: none)
    bool unified_cache_ = false;
    bool recurrent_ = false;                          // rolls back by checkpoint and replay
    llama_cpp::RecurrentRollback recurrent_rollback_;  // its checkpoints and the slots' tokens
    std::size_t snapshots_ = 0;                       // llama.cpp's n_rs_seq as granted
    llama_cpp::PendingTree tree_;                      // slot 0's pending token tree and its sequence ids
    std::vector<std::size_t> cached_;  // positions per slot, kept here and checked against llama.cpp's memory
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
