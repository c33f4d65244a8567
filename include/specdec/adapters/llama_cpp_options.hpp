#pragma once
// What a LlamaCppModel is made of: specdec's options (cache slots, context,
// threads, placement), llama.cpp's own parameters passed through for what
// specdec has no option of its own (flash attention, KV cache types, GPU
// split, load mode, ...), and the options of a model over a context the
// caller created (LlamaCppModel::borrow).
#include <cstddef>
#include <string>
#include <vector>

#include <llama.h>

namespace specdec {

// The field `context` below is deprecated: its own uses warn, the struct's
// implicit copies and moves do not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct LlamaCppOptions {
    // Positions per sequence; 0 = the model's training context (as
    // LlamaOptions::max_context). llama.cpp may go past the training
    // context; the KV cache is allocated for the whole of it up front.
    std::size_t max_context = 0;
    // Until the next release: positions per sequence, 0 meaning the training
    // context capped at 4096. Nonzero, it wins over max_context (both
    // nonzero and different is refused).
    [[deprecated("use LlamaCppOptions::max_context (0 = the model's training context)")]] std::size_t context = 0;
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
    // all sequences (masked), dearer the more the others hold.
    bool unified_cache = false;
    // A recurrent or hybrid model whose architecture llama.cpp can roll back
    // within a pass (its experimental n_rs_seq; LFM2, Nemotron-H, Qwen3.5,
    // ...): keep the states after each of a pass's last N tokens, so that a
    // verification pass rolls back without a replay. Costs N more copies of
    // the recurrent state per sequence. 0: checkpoints and replay only.
    // Other architectures get 0 (recurrent_snapshots() says what was granted).
    std::size_t recurrent_snapshots = 0;
    // The most leaves a pending token tree of slot 0 may have (TreeLM); 0: no
    // tree pass. Every leaf after the first takes a llama.cpp sequence id of
    // its own, and a tree pass needs all sequences in one cache, so a value
    // > 0 turns unified_cache on. Recurrent and hybrid models have no tree
    // pass (their state cannot branch).
    std::size_t tree_leaves = 0;
};
#pragma GCC diagnostic pop

// llama.cpp's parameters for LlamaCppModel::from_gguf and new_context,
// passed through as they are, except the fields specdec sets from
// LlamaCppOptions (listed below): those must keep llama.cpp's defaults, and
// a changed one is refused with the option to use instead. Everything else
// (flash_attn_type, type_k, type_v, offload_kqv, op_offload, rope and YaRN
// settings, cb_eval, abort_callback; split_mode, main_gpu, tensor_split,
// load_mode, kv_overrides, tensor_buft_overrides, progress_callback, ...)
// reaches llama.cpp unchanged. Pointers in them must outlive the call
// (and the callbacks the model).
//   model:   n_gpu_layers, devices (LlamaCppOptions::gpu_layers, rpc_servers)
//   context: n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max,
//            n_outputs_max_per_seq, n_threads, n_threads_batch, kv_unified,
//            embeddings, swa_full (always full: a rollback may need any
//            position of the window)
struct LlamaCppParams {
    llama_model_params model = llama_model_default_params();
    llama_context_params context = llama_context_default_params();
};

// A LlamaCppModel over a model and context the caller created
// (LlamaCppModel::borrow). Batch size, threads, cache layout and devices
// are the context's own; these say how the adapter uses it.
struct LlamaCppBorrowOptions {
    // MultiSequenceLM slots: llama.cpp sequences 0 .. sequences - 1 (a
    // recurrent or hybrid model needs twice that many in the context: the
    // slots' checkpoints).
    std::size_t sequences = 1;
    // Positions per slot; 0 = all the context gives one sequence
    // (llama_n_ctx_seq; in a unified cache that divided by `sequences`).
    std::size_t max_context = 0;
    // As LlamaCppOptions::tree_leaves: needs tree_leaves - 1 more sequences
    // and a unified cache (kv_unified) in the context.
    std::size_t tree_leaves = 0;
};

}  // namespace specdec
