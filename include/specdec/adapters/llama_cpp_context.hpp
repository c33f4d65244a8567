#pragma once
// Setting up the llama.cpp model and context a LlamaCppModel runs on, and
// the checks that decide whether it can serve speculative decoding at all:
//  - loading a GGUF file with specdec's options and the caller's llama.cpp
//    parameters (llama_cpp_options.hpp), or taking the caller's model and
//    context as they are (LlamaCppModel::borrow) after checking them;
//  - the layout of llama.cpp sequences: one per slot, a checkpoint per slot
//    for a recurrent or hybrid model, one per extra leaf of a token tree;
//  - refusing models that do not predict the next token, and memories that
//    fail the rollback probe (llama_cpp_rollback_probe.hpp,
//    llama_cpp_recurrent.hpp): such a cache would be rolled back wrongly.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <llama.h>

#include "specdec/adapters/llama_cpp_options.hpp"
#include "specdec/adapters/llama_cpp_recurrent.hpp"
#include "specdec/adapters/llama_cpp_rollback_probe.hpp"
#include "specdec/adapters/llama_cpp_runtime.hpp"
#include "specdec/core/error.hpp"

namespace specdec::llama_cpp {

// How a context's llama.cpp sequences serve the adapter's slots.
struct ContextLayout {
    std::size_t slots = 0;            // MultiSequenceLM slots: llama.cpp sequences 0 .. slots - 1
    std::size_t context_length = 0;   // positions per slot
    std::size_t tree_leaves = 0;      // LlamaCppOptions::tree_leaves
    std::size_t llama_sequences = 0;  // slots, their checkpoints (recurrent), the tree's extra leaves
    bool unified = false;             // one cache for all sequences (kv_unified)
    bool recurrent = false;           // recurrent or hybrid: rolls back by checkpoint and replay

    // The first sequence id a token tree may open (after slots and checkpoints).
    [[nodiscard]] llama_seq_id first_tree_sequence() const {
        return static_cast<llama_seq_id>(llama_sequences - (tree_leaves > 0 ? tree_leaves - 1 : 0));
    }
};

[[nodiscard]] inline int resolve_threads(int threads) {
    if (threads > 0) return threads;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// "<name> (<architecture>)", as the adapter names a model in its messages.
[[nodiscard]] inline std::string model_name(const llama_model* model, std::string name) {
    char architecture[128] = {};
    if (llama_model_meta_val_str(model, "general.architecture", architecture, sizeof architecture) > 0)
        name += std::string(" (") + architecture + ")";
    return name;
}

// Only decoder-only models that predict the next token.
inline void refuse_unsupported_kinds(const llama_model* model, const std::string& name) {
    const char* why = nullptr;
    if (llama_model_is_diffusion(model)) why = "a diffusion model: it does not predict the next token";
    else if (llama_model_has_encoder(model)) why = "an encoder-decoder model: only decoder-only models are supported";
    else if (!llama_model_has_decoder(model)) why = "a model without a decoder";
    if (why != nullptr) throw Error(name + " cannot serve speculative decoding: it is " + why);
}

// The sequences `slots` slots and a tree of `tree_leaves` leaves take on
// `model`; unified: whether the caller asked for one cache (a tree and a
// hybrid model need it whatever was asked).
[[nodiscard]] inline ContextLayout plan_sequences(const llama_model* model, std::size_t slots, std::size_t tree_leaves,
                                                  bool unified, const std::string& name) {
    if (slots == 0) throw Error(name + ": the number of sequences is 0; expected at least 1");
    ContextLayout layout;
    layout.slots = slots;
    layout.tree_leaves = tree_leaves;
    layout.recurrent = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
    if (layout.recurrent && tree_leaves > 0) {
        throw Error(name + ": tree_leaves " + std::to_string(tree_leaves) +
                    ": a recurrent or hybrid model has no tree pass (its state cannot branch); set it to 0");
    }
    // A hybrid model's checkpoints must share the attention cells of their
    // slots: one cache, where llama_memory_seq_cp only marks cells (between
    // cache streams it copies whole buffers).
    layout.unified = unified || llama_model_is_hybrid(model) || tree_leaves > 0;
    const std::size_t tree_sequences = tree_leaves > 0 ? tree_leaves - 1 : 0;
    layout.llama_sequences = (layout.recurrent ? RecurrentRollback::sequences_needed(slots) : slots) + tree_sequences;
    if (layout.llama_sequences > llama_max_parallel_sequences()) {
        throw Error(name + ": " + std::to_string(slots) + " sequences and tree_leaves " + std::to_string(tree_leaves) +
                    " take " + std::to_string(layout.llama_sequences) +
                    " llama.cpp sequences (a recurrent model two a slot, a tree one a leaf after the first) "
                    "and this build holds at most " + std::to_string(llama_max_parallel_sequences()));
    }
    return layout;
}

// The fields of LlamaCppParams that LlamaCppOptions decides must keep
// llama.cpp's defaults: a changed one would otherwise be overwritten unseen.
inline void refuse_owned_params(const LlamaCppParams& params, const std::string& name) {
    const llama_model_params m = llama_model_default_params();
    const llama_context_params c = llama_context_default_params();
    const auto refuse = [&](const char* field, const char* instead) {
        throw Error(name + ": LlamaCppParams::" + field + " is set by specdec; use " + instead + " instead");
    };
    if (params.model.n_gpu_layers != m.n_gpu_layers) refuse("model.n_gpu_layers", "LlamaCppOptions::gpu_layers");
    if (params.model.devices != m.devices) refuse("model.devices", "LlamaCppOptions::gpu_layers and rpc_servers");
    if (params.context.n_ctx != c.n_ctx) refuse("context.n_ctx", "LlamaCppOptions::max_context");
    if (params.context.n_batch != c.n_batch) refuse("context.n_batch", "LlamaCppOptions::batch");
    if (params.context.n_ubatch != c.n_ubatch) refuse("context.n_ubatch", "LlamaCppOptions::ubatch");
    if (params.context.n_seq_max != c.n_seq_max) refuse("context.n_seq_max", "LlamaCppOptions::sequences");
    if (params.context.n_rs_seq != c.n_rs_seq) refuse("context.n_rs_seq", "LlamaCppOptions::recurrent_snapshots");
    if (params.context.n_outputs_max != c.n_outputs_max || params.context.n_outputs_max_per_seq != c.n_outputs_max_per_seq)
        refuse("context.n_outputs_max", "LlamaCppOptions::batch (every token of a pass may be an output)");
    if (params.context.n_threads != c.n_threads) refuse("context.n_threads", "LlamaCppOptions::threads");
    if (params.context.n_threads_batch != c.n_threads_batch) refuse("context.n_threads_batch", "LlamaCppOptions::threads_batch");
    if (params.context.kv_unified != c.kv_unified) refuse("context.kv_unified", "LlamaCppOptions::unified_cache");
    if (params.context.embeddings) refuse("context.embeddings", "a context of its own (the adapter needs logits)");
    if (!params.context.swa_full) refuse("context.swa_full", "the default (a rollback may need any position of the window)");
}

// Loads `path` with options.gpu_layers / rpc_servers and the rest of
// `params` (checked by refuse_owned_params). Throws naming the file.
[[nodiscard]] inline std::shared_ptr<llama_model> load_model(const std::string& path, const LlamaCppOptions& options,
                                                             llama_model_params params) {
    std::vector<ggml_backend_dev_t> devices;
    if (!options.rpc_servers.empty()) {
        devices = rpc_devices(options.rpc_servers);
        devices.push_back(nullptr);
        params.devices = devices.data();
        params.n_gpu_layers = options.gpu_layers == 0 ? -1 : options.gpu_layers;
    } else if (options.gpu_layers == 0) {
        devices.push_back(nullptr);  // no device at all: the whole model and its cache on the CPU
        params.devices = devices.data();
        params.n_gpu_layers = 0;
    } else {
        params.n_gpu_layers = options.gpu_layers;
    }
    std::shared_ptr<llama_model> model(llama_model_load_from_file(path.c_str(), params), llama_model_free);
    if (!model) throw Error("llama.cpp could not load " + path + recent_errors_suffix());
    return model;
}

// The positions per slot `options` ask for (the deprecated `context` wins
// when set; both set and different is refused).
[[nodiscard]] inline std::size_t requested_context(const llama_model* model, const LlamaCppOptions& options,
                                                   const std::string& name) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const std::size_t old_context = options.context;
#pragma GCC diagnostic pop
    const std::int32_t trained = llama_model_n_ctx_train(model);
    if (old_context != 0) {
        if (options.max_context != 0 && options.max_context != old_context) {
            throw Error(name + ": LlamaCppOptions::context (" + std::to_string(old_context) + ") and max_context (" +
                        std::to_string(options.max_context) + ") differ; set max_context only");
        }
        return old_context;
    }
    if (options.max_context != 0) return options.max_context;
    if (trained <= 0) throw Error(name + ": the model states no training context; set LlamaCppOptions::max_context");
    return static_cast<std::size_t>(trained);
}

// The context parameters of `options` over `model` (`base`: the caller's
// LlamaCppParams::context, checked by refuse_owned_params), and its layout.
[[nodiscard]] inline llama_context_params context_params(const llama_model* model, const LlamaCppOptions& options,
                                                         llama_context_params base, ContextLayout& layout,
                                                         const std::string& name) {
    const std::size_t context = requested_context(model, options, name);
    const std::size_t batch = options.batch != 0 ? options.batch : 512;
    const std::size_t ubatch = options.ubatch != 0 ? options.ubatch : batch;
    if (ubatch > batch) {
        throw Error(name + ": LlamaCppOptions::ubatch " + std::to_string(ubatch) + " exceeds batch " + std::to_string(batch));
    }
    layout = plan_sequences(model, options.sequences, options.tree_leaves, options.unified_cache, name);
    layout.context_length = context;
    llama_context_params& params = base;
    // Unified, a checkpoint shares its slot's cells; in streams every
    // llama.cpp sequence has a stream of n_ctx / n_seq_max positions.
    params.n_ctx = static_cast<std::uint32_t>(context * (layout.unified ? options.sequences : layout.llama_sequences));
    params.n_batch = static_cast<std::uint32_t>(batch);
    params.n_ubatch = static_cast<std::uint32_t>(ubatch);
    params.n_seq_max = static_cast<std::uint32_t>(layout.llama_sequences);
    params.n_rs_seq = static_cast<std::uint32_t>(layout.recurrent ? options.recurrent_snapshots : 0);
    // Every token of a pass may be an output (a verification pass needs
    // them all), and all of them may belong to one sequence.
    params.n_outputs_max = static_cast<std::uint32_t>(batch);
    params.n_outputs_max_per_seq = static_cast<std::uint32_t>(batch);
    params.n_threads = resolve_threads(options.threads);
    params.n_threads_batch = resolve_threads(options.threads_batch);
    // By default independent sequences: a cache stream each, so one
    // sequence can neither fill nor slow down another's.
    params.kv_unified = layout.unified;
    // A sliding-window cache of full size forgets nothing, so rolling back
    // never needs a position it already dropped.
    params.swa_full = true;
    params.embeddings = false;
    return params;
}

// Creates the context of `params` over `model`; throws unless it holds
// layout.context_length positions per slot.
[[nodiscard]] inline llama_context* create_context(llama_model* model, const llama_context_params& params,
                                                   const ContextLayout& layout, const std::string& name) {
    llama_context* context = llama_init_from_model(model, params);
    if (context == nullptr) {
        throw Error(name + ": llama.cpp could not create a context of " + std::to_string(layout.context_length) +
                    " positions x " + std::to_string(layout.slots) + " sequences" + recent_errors_suffix());
    }
    if (llama_n_ctx_seq(context) < layout.context_length) {
        const std::uint32_t got = llama_n_ctx_seq(context);
        llama_free(context);
        throw Error(name + ": llama.cpp gave " + std::to_string(got) + " positions per sequence; asked for " +
                    std::to_string(layout.context_length));
    }
    return context;
}

// The layout of a caller's context, after checking that the adapter can use
// it as `options` say: a context of `model`, enough sequences, a unified
// cache where one is needed, the positions asked for, and an empty memory
// (the adapter keeps every slot's position count itself).
[[nodiscard]] inline ContextLayout borrowed_layout(const llama_model* model, llama_context* context,
                                                   const LlamaCppBorrowOptions& options, const std::string& name) {
    if (llama_get_model(context) != model) {
        throw Error(name + ": the context is not one of this model (llama_get_model(context) differs); "
                           "borrow a model together with a context created over it");
    }
    const std::uint32_t n_seq_max = llama_n_seq_max(context);
    const std::uint32_t n_ctx = llama_n_ctx(context);
    const std::uint32_t n_ctx_seq = llama_n_ctx_seq(context);
    // llama.h has no getter for kv_unified: one cache holds every sequence's
    // positions, so n_ctx_seq is all of n_ctx (streams divide it).
    const bool unified = n_seq_max == 1 || n_ctx_seq == n_ctx;
    ContextLayout layout = plan_sequences(model, options.sequences, options.tree_leaves, unified, name);
    if (layout.llama_sequences > n_seq_max) {
        throw Error(name + ": the context holds " + std::to_string(n_seq_max) + " sequences (n_seq_max); " +
                    std::to_string(options.sequences) + " slots" +
                    (options.tree_leaves > 0 ? " and a tree of " + std::to_string(options.tree_leaves) + " leaves" : "") +
                    " need " + std::to_string(layout.llama_sequences) +
                    (layout.recurrent ? " (a recurrent model: a checkpoint sequence per slot)" : "") +
                    "; create it with llama_context_params::n_seq_max >= " + std::to_string(layout.llama_sequences));
    }
    if (layout.unified && !unified) {
        throw Error(name + ": " + (layout.recurrent ? std::string("a hybrid model") : "a token tree") +
                    " needs all sequences in one cache; create the context with llama_context_params::kv_unified = true");
    }
    const std::size_t per_slot = unified ? n_ctx_seq / options.sequences : n_ctx_seq;
    layout.context_length = options.max_context != 0 ? options.max_context : per_slot;
    if (layout.context_length == 0 || layout.context_length > per_slot) {
        throw Error(name + ": " + std::to_string(options.sequences) + " slots of " + std::to_string(layout.context_length) +
                    " positions do not fit the context's " + std::to_string(n_ctx) + " (" + std::to_string(per_slot) +
                    " a slot)");
    }
    llama_memory_t memory = llama_get_memory(context);
    for (std::uint32_t s = 0; s < n_seq_max; ++s) {
        if (llama_memory_seq_pos_max(memory, static_cast<llama_seq_id>(s)) != -1) {
            throw Error(name + ": the context already holds positions of sequence " + std::to_string(s) +
                        "; hand over an empty one (llama_memory_clear) - the adapter tracks every position itself");
        }
    }
    return layout;
}

namespace detail {

// The rollback probe's memory (llama_cpp_rollback_probe.hpp) on a context.
struct ContextMemory {
    llama_context* context;
    llama_batch& batch;
    llama_token token;
    bool decode_two_tokens() {
        batch.n_tokens = 2;
        for (int i = 0; i < 2; ++i) {
            batch.token[i] = token;
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = i == 1;
        }
        return llama_decode(context, batch) == 0;
    }
    llama_memory_t memory() const { return llama_get_memory(context); }
    bool remove_from(int position) { return llama_memory_seq_rm(memory(), 0, position, -1); }
    int last_position() { return llama_memory_seq_pos_max(memory(), 0); }
    void clear() { llama_memory_clear(memory(), true); }
};

}  // namespace detail

// Refuses a context whose memory cannot drop a suffix of a sequence (for a
// recurrent model: cannot restore a checkpoint), and one whose granted
// recurrent snapshots fail theirs. `batch` holds at least three tokens;
// `checkpoint`: slot 0's checkpoint sequence (recurrent models).
inline void probe_rollback(llama_context* context, llama_batch& batch, const ContextLayout& layout, std::size_t vocab_size,
                           llama_seq_id checkpoint, std::size_t snapshots, const std::string& name) {
    const llama_token bos = llama_vocab_bos(llama_model_get_vocab(llama_get_model(context)));
    const llama_token token = bos != LLAMA_TOKEN_NULL ? bos : 0;
    detail::ContextMemory memory{context, batch, token};
    const RollbackProbe probe = layout.recurrent ? probe_checkpoint_rollback(context, batch, checkpoint, vocab_size, token)
                                                 : probe_partial_rollback(memory);
    if (!probe.partial_rollback) {
        throw Error(name + " cannot serve speculative decoding: its cache cannot be rolled back to an earlier position (" +
                    probe.reason + ")" + recent_errors_suffix());
    }
    if (snapshots > 0) {
        const RollbackProbe own =
            probe_snapshot_rollback(context, batch, vocab_size, token, static_cast<llama_token>(vocab_size - 1));
        if (!own.partial_rollback) {
            throw Error(name + ": LlamaCppOptions::recurrent_snapshots " + std::to_string(snapshots) +
                        ": llama.cpp's own rollback fails its probe (" + own.reason +
                        "); set it to 0 to roll back by checkpoint and replay" + recent_errors_suffix());
        }
    }
}

}  // namespace specdec::llama_cpp
