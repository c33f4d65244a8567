#pragma once
// The Llama-architecture transformer on a CUDA device, step for step the
// structure of models/llama_model.hpp (the CPU reference):
//
//   x = embedding[tokens]                                   (fp32 residual stream)
//   per layer:  xn = rms_norm(x)                 -> qkv = xn Wqkv^T      (cuBLAS)
//               rope(q, k); k, v -> KV cache at positions past .. past + n - 1
//               att = causal GQA attention of the n new queries over the cache
//               x += att Wo^T                                            (cuBLAS, beta = 1)
//               xn = rms_norm(x) -> gu = xn Wgu^T -> h = silu(g) * u -> x += h Wdown^T
//   logits = rms_norm(x) Wout^T
//
// Satisfies specdec::CausalLM (forward copies logits to pinned host memory)
// and specdec::DeviceVerifyingLM for the token-wise rule (forward_and_verify keeps the logits on the
// device, runs the sampling transforms and the acceptance rule there, and
// copies back only the accepted count and the next token).
//
// Several sequences (specdec::MultiSequenceLM): CudaModelOptions::sequences
// KV cache slots are allocated once at construction, each of context_length()
// positions, so the cache takes
//
//   kv_cache_bytes() = sequences x context_length() x kv_bytes_per_position(),
//   kv_bytes_per_position() = layers x 2 (key, value) x kv_dim x 4 (fp32)
//
// of device memory. forward_batch() runs every weight GEMM once over the
// total width of the pass (all feeds' tokens side by side); RoPE, the cache
// writes and attention are launched per feed over that feed's slot only, with
// the same kernels forward() uses, and the output head runs over the returned
// rows only. Slot 0 is the cache of forward(), forward_and_verify(),
// truncate(n) and cached_tokens().
//
// Chain-only: it has no tree pass (specdec::TreeLM: forward_tree,
// commit_tree), so the tree decoders do not compile with it as their model;
// the chain decoders run it. The CPU LlamaModel has the tree pass.
//
// Launch overhead: the sequence of kernels for a given (tokens, logits rows)
// shape is captured once into a CUDA graph and replayed; the number of cached
// positions is read by the kernels from device memory, so one graph serves
// every position. If capture is not possible the model runs the same kernels
// eagerly. forward_batch() always runs eagerly: its shape (the feeds' slots,
// sizes and returned rows) changes from step to step under continuous
// batching, and a graph bakes in the slots' cache addresses, so it never
// replays a graph captured for another shape.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/backends/cuda/acceptance.cuh"
#include "specdec/backends/cuda/buffers.cuh"
#include "specdec/backends/cuda/check.cuh"
#include "specdec/models/llama_weights.cuh"
#include "specdec/backends/cuda/gemm.cuh"
#include "specdec/backends/cuda/precision.cuh"
#include "specdec/backends/cuda/transformer_kernels.cuh"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/sequence_feeds.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/models/llama_weights.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec::cuda {

struct CudaModelOptions {
    Precision precision = Precision::f16;  // weights and GEMM inputs; f32 = reference accuracy
    std::size_t max_context = 0;           // caps the KV cache (and context_length()); 0 = the model's context length
    bool cuda_graphs = true;               // replay captured graphs instead of launching kernel by kernel
    std::string name;                      // shown by name(); empty = a description of the shape
    std::size_t sequences = 1;             // KV cache slots (MultiSequenceLM), each of the full context
};

namespace detail {

// Owns a captured, instantiated graph.
class GraphExec {
public:
    explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
    GraphExec(const GraphExec&) = delete;
    GraphExec& operator=(const GraphExec&) = delete;
    ~GraphExec() {
        if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    }
    [[nodiscard]] cudaGraphExec_t get() const noexcept { return exec_; }

private:
    cudaGraphExec_t exec_;
};

// Everything the model owns on the device; behind a unique_ptr so that the
// model itself is cheap to move.
struct CudaLlamaState {
    Stream stream;
    CublasHandle cublas{stream.get()};
    DeviceBuffer<std::byte> cublas_workspace;
    // Shared with the models made by CudaLlamaModel::sharing_weights: read-only once uploaded.
    std::shared_ptr<const DeviceLlamaWeights> shared_weights;
    std::size_t capacity = 0;          // KV cache positions per slot
    std::vector<std::size_t> cached;   // positions currently valid, per slot (slot 0: forward())
    DeviceBuffer<float> kv_cache;      // [slot][layer][key|value][position][kv_dim], fp32
    DeviceBuffer<float> inverse_frequencies;
    float position_scale = 1.0f;

    // Activations for up to `rows_capacity` tokens per pass.
    std::size_t rows_capacity = 0;
    PinnedBuffer<Token> host_tokens;
    PinnedBuffer<int> host_past;
    DeviceBuffer<Token> tokens;
    DeviceBuffer<int> past;
    DeviceBuffer<float> x, qkv, gate_up, logits;
    DeviceBuffer<std::byte> normed, attention_out, hidden;  // GEMM inputs in the weights' precision
    PinnedBuffer<float> host_logits;  // rows_capacity rows, as logits (reserve_rows)
    // forward_batch's cached positions per feed: apart from `past`, whose
    // address the captured single-sequence graphs hold.
    PinnedBuffer<int> host_feed_past;
    DeviceBuffer<int> feed_past;

    bool graphs_enabled = true;
    std::map<std::pair<std::size_t, std::size_t>, std::unique_ptr<GraphExec>> graphs;  // (tokens, logits rows)
    std::set<std::pair<std::size_t, std::size_t>> warmed_shapes;                       // ran eagerly once

    DeviceVerifier verifier;

    [[nodiscard]] const DeviceLlamaWeights& weights() const noexcept { return *shared_weights; }

    // Each slot's layers are contiguous: slot s, layer l starts at block (s x layers + l) x 2.
    [[nodiscard]] float* keys(std::size_t layer, std::size_t slot = 0) {
        return kv_cache.data() + (2 * (slot * weights().config.layer_count + layer)) * capacity * weights().config.kv_dim();
    }
    [[nodiscard]] float* values(std::size_t layer, std::size_t slot = 0) {
        return kv_cache.data() + (2 * (slot * weights().config.layer_count + layer) + 1) * capacity * weights().config.kv_dim();
    }
};

}  // namespace detail

class CudaLlamaModel {
public:
    // Uploads host weights (e.g. LlamaModel::weights(), or a GGUF file's),
    // converting every storage type to options.precision.
    explicit CudaLlamaModel(const LlamaWeights& weights, CudaModelOptions options = {})
        : name_(std::move(options.name)) {
        detail::require_device("CudaLlamaModel");
        state_ = std::make_unique<detail::CudaLlamaState>();
        state_->shared_weights =
            std::make_shared<const DeviceLlamaWeights>(upload_weights(weights, options.precision, state_->stream.get()));
        initialise(options);
    }

    // Loads a GGUF file of architecture "llama" (any storage type the CPU
    // reader accepts) and uploads it; the file is unmapped afterwards.
    static CudaLlamaModel from_gguf(const std::filesystem::path& path, CudaModelOptions options = {}) {
        detail::require_device("CudaLlamaModel::from_gguf");
        if (options.name.empty()) options.name = path.stem().string();
        const LlamaWeights weights = llama_weights_from_gguf(std::make_shared<const gguf::File>(gguf::File::open(path)));
        return CudaLlamaModel(weights, std::move(options));
    }

    // Takes weights already on the device (see generate_synthetic_weights).
    static CudaLlamaModel from_device_weights(DeviceLlamaWeights weights, CudaModelOptions options = {}) {
        return CudaLlamaModel(std::move(weights), std::move(options));
    }

    // A member of the synthetic family generated on the device: the first
    // `layers` layers (0 = all: the target) of `shape` with `seed`.
    static CudaLlamaModel synthetic(const SyntheticShape& shape, std::uint64_t seed, std::size_t layers = 0,
                                    CudaModelOptions options = {}) {
        detail::require_device("CudaLlamaModel::synthetic");
        auto state = std::make_unique<detail::CudaLlamaState>();
        state->shared_weights = std::make_shared<const DeviceLlamaWeights>(
            generate_synthetic_weights(shape, seed, layers == 0 ? shape.config.layer_count : layers, options.precision,
                                       state->stream.get()));
        if (options.name.empty()) {
            options.name = "cuda-synthetic-" + shape.size + "-" + std::to_string(layers == 0 ? shape.config.layer_count : layers) +
                           "layers-" + precision_name(options.precision) + "-seed" + std::to_string(seed);
        }
        return CudaLlamaModel(std::move(state), std::move(options));
    }

    // Another model over this one's device weights, not copied: a KV cache,
    // activations, stream and graphs of its own, sized by `options` (whose
    // precision must be this model's: the weights are stored in it). The
    // weights live while any model holding them does. What this is for: several
    // decoders of one model on one device (a benchmark's variants, a cache
    // layout per workload) without a copy of the weights each.
    [[nodiscard]] CudaLlamaModel sharing_weights(CudaModelOptions options) const {
        if (options.precision != precision()) {
            throw Error(std::string("cuda backend: sharing_weights: the weights are stored in ") + precision_name(precision()) +
                        ", not " + precision_name(options.precision));
        }
        if (options.name.empty()) options.name = name_;
        // The weights were written on this model's stream; the new one reads them from its own.
        SPECDEC_CUDA_CHECK(cudaStreamSynchronize(state_->stream.get()));
        auto state = std::make_unique<detail::CudaLlamaState>();
        state->shared_weights = state_->shared_weights;
        return CudaLlamaModel(std::move(state), std::move(options));
    }

    CudaLlamaModel(CudaLlamaModel&&) noexcept = default;
    CudaLlamaModel& operator=(CudaLlamaModel&&) noexcept = default;

    [[nodiscard]] std::size_t vocab_size() const noexcept { return state_->weights().config.vocab_size; }
    [[nodiscard]] std::size_t context_length() const noexcept { return state_->capacity; }
    [[nodiscard]] std::size_t cached_tokens() const noexcept { return state_->cached[0]; }
    [[nodiscard]] std::size_t sequence_slots() const noexcept { return state_->cached.size(); }
    [[nodiscard]] std::size_t cached_tokens(std::size_t slot) const {
        check_slot(slot, "cached_tokens");
        return state_->cached[slot];
    }
    // Device memory of one cached position of one slot: every layer's key and value rows, fp32.
    [[nodiscard]] std::size_t kv_bytes_per_position() const noexcept {
        const LlamaConfig& c = state_->weights().config;
        return c.layer_count * 2 * c.kv_dim() * sizeof(float);
    }
    // sequence_slots() x context_length() x kv_bytes_per_position(), allocated at construction.
    [[nodiscard]] std::size_t kv_cache_bytes() const noexcept {
        return sequence_slots() * context_length() * kv_bytes_per_position();
    }
    [[nodiscard]] const LlamaConfig& config() const noexcept { return state_->weights().config; }
    [[nodiscard]] Precision precision() const noexcept { return state_->weights().precision; }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] std::size_t device_weight_bytes() const { return state_->weights().bytes(); }
    // Bytes of weights one forward pass streams (all but the embedding table).
    [[nodiscard]] std::size_t bytes_read_per_forward() const {
        return state_->weights().bytes() - state_->weights().token_embedding.bytes();
    }
    [[nodiscard]] bool uses_cuda_graphs() const noexcept { return state_->graphs_enabled; }

    // Runs each weight product of a pass once at every width 1..max_tokens,
    // on zeroed scratch activations; no cache changes. CUDA loads a kernel's
    // module at the kernel's first launch (lazy loading, its default), and
    // cuBLAS picks its GEMM kernel by width, so the first pass at a new width
    // can cost several passes: a policy that times passes (AutoBatchLength,
    // AutoLength) would take that one-off for what the width costs and keep
    // away from it. A server calls this once at start for the widths it will
    // run; specdec-bench does before it times anything.
    void warm_up_widths(std::size_t max_tokens) {
        if (max_tokens == 0) return;
        reserve_rows(max_tokens);
        detail::dispatch_precision(state_->weights().precision, [&]<class T>() { warm_up_widths_as<T>(max_tokens); });
        state_->stream.synchronize();
    }

    // O(1): the cache is indexed by absolute position; the next forward
    // overwrites the discarded positions.
    void truncate(std::size_t positions) {
        if (positions > state_->cached[0]) {
            throw Error("cuda backend: truncate(" + std::to_string(positions) + ") beyond the " +
                        std::to_string(state_->cached[0]) + " cached positions of " + name_);
        }
        state_->cached[0] = positions;
    }

    // Rolls one slot back to its first `positions` positions (O(1), as
    // truncate(n)); the other slots are untouched. truncate(slot, 0) frees it.
    void truncate(std::size_t slot, std::size_t positions) {
        check_slot(slot, "truncate");
        if (positions > state_->cached[slot]) {
            throw Error("cuda backend: truncate(" + std::to_string(slot) + ", " + std::to_string(positions) +
                        ") beyond the " + std::to_string(state_->cached[slot]) + " cached positions of slot " +
                        std::to_string(slot) + " of " + name_);
        }
        state_->cached[slot] = positions;
    }

    // One pass over every feed's tokens (MultiSequenceLM::forward_batch):
    // returns feed 0's rows, then feed 1's, ... (one row per token, or the
    // last token's row for last_row_only), in pinned host memory, valid until
    // the next forward, forward_batch or truncate. Every feed is checked
    // before anything runs: on an error no cache has changed.
    LogitsView forward_batch(std::span<const SequenceFeed> feeds) {
        check_feeds(feeds);
        detail::CudaLlamaState& s = *state_;
        const std::size_t vocab = vocab_size();
        if (feeds.empty()) return LogitsView{s.host_logits.data(), 0, vocab, vocab};
        std::size_t total = 0, rows = 0;
        for (const SequenceFeed& feed : feeds) {
            total += feed.tokens.size();
            rows += feed.last_row_only ? 1 : feed.tokens.size();
        }
        reserve_rows(total);
        s.host_feed_past.resize(feeds.size());
        s.feed_past.resize(feeds.size());
        // The previous pass has finished (every public call synchronises), so the pinned inputs are free.
        std::size_t offset = 0;
        for (std::size_t f = 0; f < feeds.size(); ++f) {
            std::copy(feeds[f].tokens.begin(), feeds[f].tokens.end(), s.host_tokens.data() + offset);
            offset += feeds[f].tokens.size();
            s.host_feed_past.data()[f] = static_cast<int>(s.cached[feeds[f].slot]);
        }
        copy_to_device(s.tokens.data(), s.host_tokens.data(), total, s.stream.get());
        copy_to_device(s.feed_past.data(), s.host_feed_past.data(), feeds.size(), s.stream.get());
        detail::dispatch_precision(s.weights().precision, [&]<class T>() { enqueue_batch_pass_as<T>(feeds); });
        copy_to_host(s.host_logits.data(), s.logits.data(), rows * vocab, s.stream.get());
        s.stream.synchronize();
        for (const SequenceFeed& feed : feeds) s.cached[feed.slot] += feed.tokens.size();
        return LogitsView{s.host_logits.data(), rows, vocab, vocab};
    }

    // Appends the tokens to the cache and returns one logits row per token, in
    // pinned host memory, valid until the next forward or truncate.
    LogitsView forward(std::span<const Token> tokens) {
        const std::size_t vocab = vocab_size(), n = tokens.size();
        check_tokens(tokens);
        if (n == 0) return LogitsView{state_->host_logits.data(), 0, vocab, vocab};
        run(tokens, n);
        detail::CudaLlamaState& s = *state_;
        copy_to_host(s.host_logits.data(), s.logits.data(), n * vocab, s.stream.get());
        s.stream.synchronize();
        s.cached[0] += n;
        return LogitsView{s.host_logits.data(), n, vocab, vocab};
    }

    // forward(tokens), then on the device the verification of `draft` (the
    // last draft.size() tokens, at positions first_position..) against the last
    // k + 1 logits rows: returns what accept_rejection_sampling / accept_greedy
    // would return on the host. The device runs the candidate stages only:
    // options with penalties, logit_bias or a constraint throw specdec::Error
    // naming the option, before the pass (the host path verifies those).
    AcceptanceResult forward_and_verify(std::span<const Token> tokens, const DraftProposal& draft,
                                        const SamplingOptions& sampling, const CounterRng& rng,
                                        std::uint64_t first_position, TokenwiseRejection /*rule*/ = {}) {
        const std::size_t rows = draft.size() + 1;
        if (tokens.size() < rows) {
            throw Error("cuda backend: forward_and_verify needs the pending token and the " +
                        std::to_string(draft.size()) + " drafts (" + std::to_string(rows) + " tokens), got " +
                        std::to_string(tokens.size()));
        }
        // Before the pass: a refused option leaves the cache as it was.
        validate(sampling, vocab_size());
        detail::require_candidate_stages_only(sampling, "forward_and_verify");
        ::specdec::detail::check_rows(draft, rows, vocab_size());
        check_tokens(tokens);
        run(tokens, rows);
        detail::CudaLlamaState& s = *state_;
        const AcceptanceResult verdict = s.verifier.verify(s.logits.data(), rows, vocab_size(), vocab_size(), draft,
                                                           sampling, rng, first_position, s.stream.get());
        s.cached[0] += tokens.size();
        return verdict;
    }

private:
    CudaLlamaModel(DeviceLlamaWeights weights, CudaModelOptions options) : name_(std::move(options.name)) {
        detail::require_device("CudaLlamaModel");
        state_ = std::make_unique<detail::CudaLlamaState>();
        state_->shared_weights = std::make_shared<const DeviceLlamaWeights>(std::move(weights));
        initialise(options);
    }
    CudaLlamaModel(std::unique_ptr<detail::CudaLlamaState> state, CudaModelOptions options)
        : name_(std::move(options.name)), state_(std::move(state)) {
        initialise(options);
    }

    void initialise(const CudaModelOptions& options) {
        detail::CudaLlamaState& s = *state_;
        const LlamaConfig& c = s.weights().config;
        c.validate();
        if (c.head_dim() % 2 != 0 || c.head_dim() > static_cast<std::size_t>(detail::kMaxHeadDim)) {
            throw Error("cuda backend: head size " + std::to_string(c.head_dim()) +
                        " is not supported: expected an even size of at most " + std::to_string(detail::kMaxHeadDim));
        }
        s.capacity = options.max_context == 0 ? c.context_length : std::min(options.max_context, c.context_length);
        if (options.sequences == 0) throw Error("cuda backend: CudaModelOptions::sequences must be at least 1, got 0");
        s.cached.assign(options.sequences, 0);
        s.kv_cache.resize(options.sequences * c.layer_count * 2 * s.capacity * c.kv_dim());
        if (c.rope_style != RopeStyle::adjacent_pairs) {
            throw Error("specdec::cuda: RoPE on halves of the head (qwen2's layout) is not implemented on the GPU; "
                        "expected adjacent-pair RoPE (the llama architecture) or the CPU model");
        }
        // Inverse frequencies exactly as the CPU model computes them.
        std::vector<float> inverse_frequencies = c.rope_inverse_frequencies();
        if (inverse_frequencies.empty()) inverse_frequencies.push_back(0.0f);
        s.inverse_frequencies = detail::upload_floats(inverse_frequencies, s.stream.get());
        s.position_scale = 1.0f / c.rope_linear_scale;
        s.host_past.resize(1);
        s.past.resize(1);
        // cuBLAS needs a workspace of its own under graph capture (32 MiB: its recommendation for Hopper).
        s.cublas_workspace.resize(std::size_t{32} << 20);
        SPECDEC_CUBLAS_CHECK(cublasSetWorkspace(s.cublas.get(), s.cublas_workspace.data(), s.cublas_workspace.bytes()));
        s.graphs_enabled = options.cuda_graphs;
        if (name_.empty()) {
            name_ = "cuda-llama-" + std::to_string(c.layer_count) + "x" + std::to_string(c.embedding_dim) + "-" +
                    precision_name(s.weights().precision);
        }
    }

    void check_tokens(std::span<const Token> tokens) const {
        const std::size_t vocab = vocab_size();
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab) {
                throw Error("cuda backend: " + name_ + ": token id " + std::to_string(tokens[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
            }
        }
        if (state_->cached[0] + tokens.size() > state_->capacity) {
            throw Error("cuda backend: " + name_ + ": forward of " + std::to_string(tokens.size()) + " tokens after " +
                        std::to_string(state_->cached[0]) + " cached positions overflows the context length " +
                        std::to_string(state_->capacity));
        }
    }

    void check_slot(std::size_t slot, const char* who) const {
        if (slot >= sequence_slots()) {
            throw Error(std::string("cuda backend: ") + name_ + ": " + who + ": slot " + std::to_string(slot) +
                        " is out of range [0, " + std::to_string(sequence_slots()) + ")");
        }
    }

    // Everything forward_batch can reject, before any state changes.
    void check_feeds(std::span<const SequenceFeed> feeds) const {
        specdec::detail::check_sequence_feeds(feeds, sequence_slots(), vocab_size(), state_->capacity,
                                     [this](std::size_t slot) { return state_->cached[slot]; },
                                     "cuda backend: " + name_);
    }

    // Grows the activation buffers to n rows. Growing moves them, which
    // invalidates every captured graph (graphs hold raw pointers).
    // Grows the activations (and the pinned logits rows) to at least n tokens,
    // doubling: a batched decoder's pass widens a few tokens at a time, and
    // each growth reallocates (cudaMallocHost pins pages, cudaFree
    // synchronises the device) and drops the captured graphs, a cost that
    // would land on the timing of every new widest pass.
    void reserve_rows(std::size_t n) {
        detail::CudaLlamaState& s = *state_;
        if (n <= s.rows_capacity) return;
        n = std::max(n, 2 * s.rows_capacity);
        const LlamaConfig& c = s.weights().config;
        const std::size_t element = precision_bytes(s.weights().precision);
        const std::size_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
        s.graphs.clear();
        s.warmed_shapes.clear();
        s.host_tokens.resize(n);
        s.tokens.resize(n);
        s.x.resize(n * dim);
        s.qkv.resize(n * (dim + 2 * kv));
        s.gate_up.resize(n * 2 * ffn);
        s.logits.resize(n * c.vocab_size);
        s.host_logits.resize(n * c.vocab_size);
        s.normed.resize(n * dim * element);
        s.attention_out.resize(n * dim * element);
        s.hidden.resize(n * ffn * element);
        s.rows_capacity = n;
    }

    // One pass over n = tokens.size() tokens at positions cached.., leaving the
    // logits of the last `logit_rows` tokens in s.logits. Does not synchronise.
    void run(std::span<const Token> tokens, std::size_t logit_rows) {
        detail::CudaLlamaState& s = *state_;
        const std::size_t n = tokens.size();
        reserve_rows(n);
        std::copy(tokens.begin(), tokens.end(), s.host_tokens.data());
        // The previous pass has finished (every public call synchronises), so the pinned inputs are free.
        s.host_past.data()[0] = static_cast<int>(s.cached[0]);
        copy_to_device(s.tokens.data(), s.host_tokens.data(), n, s.stream.get());
        copy_to_device(s.past.data(), s.host_past.data(), 1, s.stream.get());
        if (s.graphs_enabled) {
            if (const cudaGraphExec_t graph = graph_for(n, logit_rows)) {
                SPECDEC_CUDA_CHECK(cudaGraphLaunch(graph, s.stream.get()));
                return;
            }
        }
        enqueue_pass(n, logit_rows);
    }

    // The instantiated graph of the pass shape (n, logit_rows), capturing it
    // on first use; nullptr (and graphs off from then on) if capture fails.
    cudaGraphExec_t graph_for(std::size_t n, std::size_t logit_rows) {
        detail::CudaLlamaState& s = *state_;
        const auto key = std::make_pair(n, logit_rows);
        if (const auto found = s.graphs.find(key); found != s.graphs.end()) return found->second->get();
        // The first pass of a shape runs eagerly: cuBLAS and lazily loaded kernels
        // initialise themselves outside of any capture.
        if (s.warmed_shapes.insert(key).second) return nullptr;
        SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(s.stream.get(), cudaStreamCaptureModeThreadLocal));
        bool captured = true;
        try {
            enqueue_pass(n, logit_rows);
        } catch (const Error&) {
            captured = false;  // ends the capture below, then the pass runs eagerly
        }
        cudaGraph_t graph = nullptr;
        const cudaError_t end_status = cudaStreamEndCapture(s.stream.get(), &graph);
        cudaGraphExec_t exec = nullptr;
        if (captured && end_status == cudaSuccess && graph != nullptr &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
            (void)cudaGraphDestroy(graph);
            s.graphs.emplace(key, std::make_unique<detail::GraphExec>(exec));
            return exec;
        }
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        s.graphs_enabled = false;
        return nullptr;
    }

    void enqueue_pass(std::size_t n, std::size_t logit_rows) {
        detail::dispatch_precision(state_->weights().precision, [&]<class T>() { enqueue_pass_as<T>(n, logit_rows); });
    }

    template <class T>
    void warm_up_widths_as(std::size_t max_tokens) {
        detail::CudaLlamaState& s = *state_;
        const DeviceLlamaWeights& w = s.weights();
        const LlamaConfig& c = w.config;
        const cudaStream_t stream = s.stream.get();
        const cublasHandle_t blas = s.cublas.get();
        const int dim = static_cast<int>(c.embedding_dim), kv = static_cast<int>(c.kv_dim());
        const int ffn = static_cast<int>(c.feed_forward_dim), vocab = static_cast<int>(c.vocab_size);
        auto as = [](auto& buffer) { return reinterpret_cast<T*>(buffer.data()); };
        auto weights = [](const DeviceBuffer<std::byte>& buffer) { return reinterpret_cast<const T*>(buffer.data()); };
        for (auto* buffer : {&s.normed, &s.attention_out, &s.hidden})
            SPECDEC_CUDA_CHECK(cudaMemsetAsync(buffer->data(), 0, buffer->bytes(), stream));
        SPECDEC_CUDA_CHECK(cudaMemsetAsync(s.x.data(), 0, s.x.bytes(), stream));
        // Every layer's products have the first layer's shapes.
        const DeviceLayerWeights& l = w.layers.front();
        for (int n = 1; n <= static_cast<int>(max_tokens); ++n) {
            detail::gemm<T>(blas, weights(l.qkv), as(s.normed), s.qkv.data(), dim + 2 * kv, dim, n, false);
            detail::gemm<T>(blas, weights(l.attention_output), as(s.attention_out), s.x.data(), dim, dim, n, true);
            detail::gemm<T>(blas, weights(l.gate_up), as(s.normed), s.gate_up.data(), 2 * ffn, dim, n, false);
            detail::gemm<T>(blas, weights(l.down), as(s.hidden), s.x.data(), dim, ffn, n, true);
            detail::gemm<T>(blas, weights(w.output), as(s.normed), s.logits.data(), vocab, dim, n, false);
        }
    }

    // One sequence's rows in a pass: `rows` tokens of cache slot `slot`, of
    // which the last `returned` go through the final norm and the head.
    struct PassFeed {
        std::size_t slot, rows, returned;
    };

    // The pass over the tokens of one sequence (slot 0, its cached positions
    // in s.past): the pass of enqueue_feeds_as with one feed, whose last
    // logit_rows rows are returned.
    template <class T>
    void enqueue_pass_as(std::size_t n_tokens, std::size_t logit_rows) {
        const PassFeed one{0, n_tokens, logit_rows};
        enqueue_feeds_as<T>(std::span<const PassFeed>(&one, 1), state_->past.data());
    }

    // forward_batch's pass: the feeds' tokens side by side in s.tokens (feed f
    // from row start_f), each feed's cached positions in s.feed_past[f].
    template <class T>
    void enqueue_batch_pass_as(std::span<const SequenceFeed> feeds) {
        pass_feeds_.clear();
        for (const SequenceFeed& feed : feeds) {
            pass_feeds_.push_back(PassFeed{feed.slot, feed.tokens.size(), feed.last_row_only ? 1 : feed.tokens.size()});
        }
        enqueue_feeds_as<T>(pass_feeds_, state_->feed_past.data());
    }

    // The one layer loop of every pass: the feeds' rows side by side in
    // s.tokens (feed f from row start_f), feed f's cached positions at
    // past[f] (device). The GEMMs run once over all rows; the per-token
    // kernels that read or write a cache (RoPE and the cache store,
    // attention) run per feed, on that feed's rows and slot. Each feed's
    // returned rows are normalised into consecutive rows of s.normed, in
    // feed order, so that the head's GEMM writes them to s.logits in that
    // order.
    template <class T>
    void enqueue_feeds_as(std::span<const PassFeed> feeds, const int* past) {
        detail::CudaLlamaState& s = *state_;
        const DeviceLlamaWeights& w = s.weights();
        const LlamaConfig& c = w.config;
        const cudaStream_t stream = s.stream.get();
        const cublasHandle_t blas = s.cublas.get();
        std::size_t total = 0;
        for (const PassFeed& feed : feeds) total += feed.rows;
        const int n = static_cast<int>(total);
        const int dim = static_cast<int>(c.embedding_dim), kv = static_cast<int>(c.kv_dim());
        const int ffn = static_cast<int>(c.feed_forward_dim), vocab = static_cast<int>(c.vocab_size);
        const int head_dim = static_cast<int>(c.head_dim()), heads = static_cast<int>(c.head_count);
        const int group = static_cast<int>(c.head_count / c.kv_heads());
        const std::size_t qkv_width = c.embedding_dim + 2 * c.kv_dim();
        auto as = [](auto& buffer) { return reinterpret_cast<T*>(buffer.data()); };
        auto weights = [](const DeviceBuffer<std::byte>& buffer) { return reinterpret_cast<const T*>(buffer.data()); };

        detail::launch_embedding<T>(s.tokens.data(), weights(w.token_embedding), s.x.data(), n, dim, stream);
        for (std::size_t layer = 0; layer < c.layer_count; ++layer) {
            const DeviceLayerWeights& l = w.layers[layer];
            detail::launch_rms_norm<T>(s.x.data(), l.attention_norm.data(), as(s.normed), n, dim, c.rms_norm_eps, stream);
            detail::gemm<T>(blas, weights(l.qkv), as(s.normed), s.qkv.data(), dim + 2 * kv, dim, n, false);
            std::size_t start = 0;  // the feed's first row
            for (std::size_t f = 0; f < feeds.size(); ++f) {
                const std::size_t slot = feeds[f].slot;
                const int rows = static_cast<int>(feeds[f].rows);
                float* qkv = s.qkv.data() + start * qkv_width;
                detail::launch_rope_and_store_kv(qkv, s.keys(layer, slot), s.values(layer, slot), past + f,
                                                 s.inverse_frequencies.data(), s.position_scale, rows, dim, kv,
                                                 head_dim, static_cast<int>(c.rotary_dim()), stream);
                detail::launch_attention<T>(qkv, s.keys(layer, slot), s.values(layer, slot), past + f,
                                            as(s.attention_out) + start * c.embedding_dim, rows, heads, dim, kv,
                                            head_dim, group, stream);
                start += feeds[f].rows;
            }
            detail::gemm<T>(blas, weights(l.attention_output), as(s.attention_out), s.x.data(), dim, dim, n, true);

            detail::launch_rms_norm<T>(s.x.data(), l.ffn_norm.data(), as(s.normed), n, dim, c.rms_norm_eps, stream);
            detail::gemm<T>(blas, weights(l.gate_up), as(s.normed), s.gate_up.data(), 2 * ffn, dim, n, false);
            detail::launch_swiglu<T>(s.gate_up.data(), as(s.hidden), n, ffn, stream);
            detail::gemm<T>(blas, weights(l.down), as(s.hidden), s.x.data(), dim, ffn, n, true);
        }
        // Only the returned rows go through the final norm and the head.
        std::size_t start = 0, returned = 0;
        for (const PassFeed& feed : feeds) {
            const std::size_t first = start + feed.rows - feed.returned;
            detail::launch_rms_norm<T>(s.x.data() + first * c.embedding_dim, w.output_norm.data(),
                                       as(s.normed) + returned * c.embedding_dim, static_cast<int>(feed.returned), dim,
                                       c.rms_norm_eps, stream);
            start += feed.rows;
            returned += feed.returned;
        }
        detail::gemm<T>(blas, weights(w.output), as(s.normed), s.logits.data(), vocab, dim, static_cast<int>(returned),
                        false);
    }

    std::string name_;
    std::unique_ptr<detail::CudaLlamaState> state_;
    std::vector<PassFeed> pass_feeds_;  // enqueue_batch_pass_as's, kept between passes
};

static_assert(CausalLM<CudaLlamaModel>);
static_assert(DeviceVerifyingLM<CudaLlamaModel, TokenwiseRejection>);
static_assert(MultiSequenceLM<CudaLlamaModel>);
// Stated so that giving the model a tree pass is a deliberate change of this line.
static_assert(!TreeLM<CudaLlamaModel>, "CudaLlamaModel is chain-only: it has no forward_tree / commit_tree");

}  // namespace specdec::cuda
