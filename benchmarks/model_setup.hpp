#pragma once
// Turns the command line into a target, a draft and a prompt: the embedded
// synthetic pair, GGUF files, or the prompt-lookup drafter; on the CPU, or on
// CUDA when the benchmark was built with it. Problems the user can fix on the
// command line (mismatched vocabularies, a backend that is not there) are
// UsageErrors; a broken model file is the library's specdec::Error.
#include <algorithm>
#include <cstdio>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/formats/tokenizer.hpp"
#ifdef SPECDEC_BENCH_WITH_CUDA
#include "specdec/cuda.cuh"
#endif

#include "bench_options.hpp"
#include "bench_results.hpp"

namespace specdec::bench {

inline constexpr std::string_view kDefaultTextPrompt = "Once upon a time";
inline constexpr std::size_t kSyntheticPromptTokens = 16;

using TargetModel = std::variant<std::unique_ptr<LlamaModel>
#ifdef SPECDEC_BENCH_WITH_CUDA
                                 ,
                                 std::unique_ptr<cuda::CudaLlamaModel>
#endif
                                 >;
using DraftModel = std::variant<std::unique_ptr<LlamaModel>, std::unique_ptr<PromptLookupDrafter>
#ifdef SPECDEC_BENCH_WITH_CUDA
                                ,
                                std::unique_ptr<cuda::CudaLlamaModel>
#endif
                                >;

struct ModelSetup {
    TargetModel target;
    DraftModel draft;
    ModelInfo target_info;
    ModelInfo draft_info;
    std::vector<Token> prompt;
    std::optional<std::string> prompt_text;  // none for a seeded token prompt
    std::vector<std::vector<Token>> repetition_prompts;  // seeded prompts: one per repetition (the first is `prompt`)
    std::size_t threads = 0;
    std::string device;  // the accelerator's description, empty on the CPU
};

// A token prompt for models without a tokenizer: ids drawn from the seeded
// counter RNG, so every run with the same seed sees the same prompt.
[[nodiscard]] inline std::vector<Token> seeded_token_prompt(std::uint64_t seed, std::size_t vocab, std::size_t length) {
    std::vector<Token> prompt(length);
    const CounterRng rng{seed ^ 0x5EED'0000'0000'0001ull};
    for (std::size_t i = 0; i < length; ++i) {
        const auto id = static_cast<std::size_t>(rng.uniform(i, RandomPurpose::target_sample) * static_cast<double>(vocab));
        prompt[i] = static_cast<Token>(std::min(id, vocab - 1));
    }
    return prompt;
}

// The synthetic models' prompts: repetition r generates from the prompt of
// seed + r, the seed its sampling uses too.
inline void set_seeded_prompts(const BenchOptions& options, std::size_t vocab, ModelSetup& setup) {
    setup.repetition_prompts.clear();
    for (std::size_t r = 0; r < options.repetitions; ++r)
        setup.repetition_prompts.push_back(seeded_token_prompt(options.seed + r, vocab, kSyntheticPromptTokens));
    setup.prompt = setup.repetition_prompts.front();
}

[[nodiscard]] inline ModelInfo describe_llama(const LlamaModel& model, bool synthetic) {
    const LlamaWeights& weights = model.weights();
    const WeightType storage = weights.layers.empty() ? weights.output.type : weights.layers.front().query.type;
    return ModelInfo{model.name(), std::string("llama ") + weight_type_name(storage), model.parameter_count(),
                     model.weight_bytes(), synthetic, weights.bytes_read_per_forward()};
}

[[nodiscard]] inline ModelInfo describe_prompt_lookup() {
    return ModelInfo{"prompt-lookup", "prompt-lookup (n-gram match in the context, no model)", 0, 0, false};
}

[[nodiscard]] inline SyntheticDraftKind parse_synthetic_draft_kind(std::string_view name) {
    for (const SyntheticDraftKind kind : {SyntheticDraftKind::quantized_q4, SyntheticDraftKind::quantized_q8,
                                          SyntheticDraftKind::early_exit, SyntheticDraftKind::early_exit_q4,
                                          SyntheticDraftKind::early_exit_q8, SyntheticDraftKind::unrelated}) {
        if (name == synthetic_draft_kind_name(kind)) return kind;
    }
    throw UsageError(unknown_synthetic_draft_message(name));
}

namespace detail {

// Room for the prompt, the generation and one full verification pass.
[[nodiscard]] inline std::size_t context_needed(const BenchOptions& options, std::size_t prompt_tokens) {
    std::size_t longest_draft = options.draft_tokens.empty() ? 1 : options.draft_tokens.back();
    if (options.auto_length) longest_draft = std::max(longest_draft, options.auto_max_draft_tokens);
    return std::max(prompt_tokens + options.new_tokens + longest_draft + 2, options.prompt_tokens.value_or(0));
}

// A model trained for a short context (stories260K: 128) stops generating
// early; say so rather than let "64 new tokens" in the header mislead.
inline void warn_if_context_limits(const BenchOptions& options, std::size_t prompt_tokens, std::size_t context_length) {
    if (context_needed(options, prompt_tokens) > context_length) {
        std::fprintf(stderr,
                     "specdec-bench: note: the target's context of %zu positions holds the %zu-token prompt and about "
                     "%zu generated tokens, fewer than --new-tokens %zu\n",
                     context_length, prompt_tokens, context_length > prompt_tokens ? context_length - prompt_tokens : 0,
                     options.new_tokens);
    }
}

inline void check_same_vocabulary(std::size_t target_vocab, std::size_t draft_vocab) {
    if (target_vocab != draft_vocab) {
        throw UsageError("the draft's vocabulary has " + std::to_string(draft_vocab) + " tokens and the target's " +
                         std::to_string(target_vocab) + ": draft and target must share one tokenizer");
    }
}

// The prompt of a GGUF target: --prompt (or a default story opening) through
// the target's tokenizer, with BOS.
inline void tokenize_prompt(const BenchOptions& options, ModelSetup& setup) {
    const std::string text = options.prompt.value_or(std::string(kDefaultTextPrompt));
    const gguf::File file = gguf::File::open(*options.target_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    setup.prompt = tokenizer.encode(text, /*add_bos=*/tokenizer.has_bos());
    setup.prompt_text = text;
    if (setup.prompt.empty()) throw UsageError("--prompt: the prompt tokenises to nothing");
}

inline void set_up_cpu_gguf(const BenchOptions& options, ModelSetup& setup, const std::shared_ptr<cpu::ThreadPool>& pool) {
    tokenize_prompt(options, setup);
    // Named after their files: general.name is often just "llama" in both.
    auto model_options = [&](const std::string& path) {
        return LlamaOptions{.threads = 0,
                            .max_context = context_needed(options, setup.prompt.size()),
                            .thread_pool = pool,
                            .name = std::filesystem::path(path).stem().string()};
    };
    auto target = std::make_unique<LlamaModel>(LlamaModel::from_gguf(*options.target_path, model_options(*options.target_path)));
    setup.target_info = describe_llama(*target, false);
    if (options.uses_prompt_lookup()) {
        setup.draft = std::make_unique<PromptLookupDrafter>();
        setup.draft_info = describe_prompt_lookup();
    } else {
        auto draft = std::make_unique<LlamaModel>(LlamaModel::from_gguf(*options.draft_path, model_options(*options.draft_path)));
        check_same_vocabulary(target->vocab_size(), draft->vocab_size());
        setup.draft_info = describe_llama(*draft, false);
        setup.draft = std::move(draft);
    }
    warn_if_context_limits(options, setup.prompt.size(), target->config().context_length);
    if (target->context_length() < setup.prompt.size() + 2)
        throw UsageError("the prompt has " + std::to_string(setup.prompt.size()) + " tokens; the target's context holds " +
                         std::to_string(target->context_length()));
    setup.target = std::move(target);
}

inline void set_up_cpu_synthetic(const BenchOptions& options, ModelSetup& setup, const std::shared_ptr<cpu::ThreadPool>& pool) {
    if (options.prompt) throw UsageError("--prompt needs --target FILE.gguf: the synthetic models have no tokenizer");
    if (options.synthetic_size != "tiny" && options.synthetic_size != "100m")
        throw UsageError("--synthetic-size " + options.synthetic_size + " is generated on the GPU only: add --backend cuda");
    const SyntheticShape shape = synthetic_shape(options.synthetic_size);
    SyntheticOptions synthetic;
    synthetic.size = options.synthetic_size;
    synthetic.thread_pool = pool;
    synthetic.max_context = std::min(shape.config.context_length, context_needed(options, kSyntheticPromptTokens));
    auto target = std::make_unique<LlamaModel>(make_synthetic_target(synthetic));
    setup.target_info = describe_llama(*target, true);
    set_seeded_prompts(options, target->vocab_size(), setup);
    if (options.uses_prompt_lookup()) {
        setup.draft = std::make_unique<PromptLookupDrafter>();
        setup.draft_info = describe_prompt_lookup();
    } else {
        const SyntheticDraftKind kind =
            options.synthetic_draft ? parse_synthetic_draft_kind(*options.synthetic_draft) : kDefaultSyntheticDraft;
        auto draft = std::make_unique<LlamaModel>(make_synthetic_draft(synthetic, kind));
        setup.draft_info = describe_llama(*draft, true);
        setup.draft = std::move(draft);
    }
    setup.target = std::move(target);
}

#ifdef SPECDEC_BENCH_WITH_CUDA
// Parameters of a Llama of this shape (the CUDA model keeps no host weights to count).
[[nodiscard]] inline std::uint64_t llama_parameter_count(const LlamaConfig& c) {
    const std::uint64_t dim = c.embedding_dim, kv = c.kv_dim(), ffn = c.feed_forward_dim;
    const std::uint64_t per_layer = 2 * dim * dim + 2 * dim * kv + 3 * dim * ffn + 2 * dim;
    return 2 * c.vocab_size * dim + c.layer_count * per_layer + dim;
}

[[nodiscard]] inline ModelInfo describe_cuda(const cuda::CudaLlamaModel& model, bool synthetic) {
    return ModelInfo{model.name(), std::string("llama ") + cuda::precision_name(model.precision()) + " on CUDA",
                     llama_parameter_count(model.config()), model.device_weight_bytes(), synthetic};
}

inline void require_cuda_synthetic_draft(const BenchOptions& options) {
    if (options.synthetic_draft && *options.synthetic_draft != "early-exit")
        throw UsageError("--synthetic-draft " + *options.synthetic_draft +
                         ": the CUDA synthetic family derives early-exit drafts only");
}

// The widest pass a single-sequence run makes after its prompt: the longest
// verification (a fixed k, auto's cap, the auto tree's nodes) with its bonus row.
[[nodiscard]] inline std::size_t widest_verification(const BenchOptions& options) {
    std::size_t drafts = options.draft_tokens.empty() ? 1 : *std::max_element(options.draft_tokens.begin(), options.draft_tokens.end());
    if (options.auto_length) drafts = std::max(drafts, options.auto_max_draft_tokens);
    if (!options.trees.empty()) drafts = std::max(drafts, options.tree_max_nodes);
    for (const TreeAutoVariant& variant : options.tree_auto_variants)
        if (variant.max_nodes_given) drafts = std::max(drafts, variant.options.max_nodes);
    return drafts + 1;
}

// Every pass width of the run loaded before anything is timed: the first pass
// at a new width pays a one-off cost (kernel loading, cuBLAS's first call for
// a shape) that AutoLength would otherwise take for that width's cost.
inline void warm_up_cuda_widths(const BenchOptions& options, cuda::CudaLlamaModel& target, cuda::CudaLlamaModel* draft) {
    const std::size_t widest = widest_verification(options);
    target.warm_up_widths(widest);
    if (draft) draft->warm_up_widths(widest);
}

inline void set_up_cuda_synthetic(const BenchOptions& options, ModelSetup& setup) {
    if (options.prompt) throw UsageError("--prompt needs --target FILE.gguf: the synthetic models have no tokenizer");
    require_cuda_synthetic_draft(options);
    cuda::CudaSyntheticOptions synthetic;
    synthetic.size = options.synthetic_size;
    synthetic.model.max_context = context_needed(options, kSyntheticPromptTokens);
    auto target = std::make_unique<cuda::CudaLlamaModel>(cuda::make_cuda_synthetic_target(synthetic));
    setup.target_info = describe_cuda(*target, true);
    set_seeded_prompts(options, target->vocab_size(), setup);
    cuda::CudaLlamaModel* draft_model = nullptr;
    if (options.uses_prompt_lookup()) {
        setup.draft = std::make_unique<PromptLookupDrafter>();
        setup.draft_info = describe_prompt_lookup();
    } else {
        auto draft = std::make_unique<cuda::CudaLlamaModel>(cuda::make_cuda_synthetic_draft(synthetic));
        setup.draft_info = describe_cuda(*draft, true);
        draft_model = draft.get();
        setup.draft = std::move(draft);
    }
    warm_up_cuda_widths(options, *target, draft_model);
    setup.target = std::move(target);
}

inline void set_up_cuda_gguf(const BenchOptions& options, ModelSetup& setup) {
    tokenize_prompt(options, setup);
    auto load = [&](const std::string& path) {
        cuda::CudaModelOptions model_options;
        model_options.max_context = context_needed(options, setup.prompt.size());
        model_options.name = std::filesystem::path(path).stem().string();
        const LlamaWeights weights = llama_weights_from_gguf(std::make_shared<const gguf::File>(gguf::File::open(path)));
        return std::make_unique<cuda::CudaLlamaModel>(weights, model_options);
    };
    auto target = load(*options.target_path);
    warn_if_context_limits(options, setup.prompt.size(), target->config().context_length);
    setup.target_info = describe_cuda(*target, false);
    cuda::CudaLlamaModel* draft_model = nullptr;
    if (options.uses_prompt_lookup()) {
        setup.draft = std::make_unique<PromptLookupDrafter>();
        setup.draft_info = describe_prompt_lookup();
    } else {
        auto draft = load(*options.draft_path);
        check_same_vocabulary(target->vocab_size(), draft->vocab_size());
        setup.draft_info = describe_cuda(*draft, false);
        draft_model = draft.get();
        setup.draft = std::move(draft);
    }
    warm_up_cuda_widths(options, *target, draft_model);
    setup.target = std::move(target);
}
#endif

}  // namespace detail

// The most drafts a --batch request holds: the longest fixed k or auto's cap
// (the sweep always runs auto).
[[nodiscard]] inline std::size_t batch_longest_draft(const BenchOptions& options) {
    return std::max(options.auto_max_draft_tokens, options.draft_tokens.empty() ? std::size_t{1} : options.draft_tokens.back());
}

// A --batch request's cache need: its prompt, its tokens and the longest verification pass.
[[nodiscard]] inline std::size_t batch_context(const BenchOptions& options, std::size_t model_context) {
    return std::min(model_context, kSyntheticPromptTokens + options.new_tokens + batch_longest_draft(options) + 2);
}

// --batch: the embedded pair once (one slot each), from which every decoder
// of the sweep gets models of its own with B cache slots over the same weights.
struct BatchModelSetup {
    std::unique_ptr<LlamaModel> target, draft;
    ModelInfo target_info, draft_info;
    std::size_t threads = 0;
    std::shared_ptr<cpu::ThreadPool> pool;
};

[[nodiscard]] inline BatchModelSetup set_up_batch_models(const BenchOptions& options) {
    if (!options.uses_synthetic_target() || options.draft_path || options.backend != Backend::cpu)
        throw UsageError("--batch on the CPU runs the embedded synthetic pair");
    if (options.synthetic_size != "tiny" && options.synthetic_size != "100m")
        throw UsageError("--synthetic-size " + options.synthetic_size + " is generated on the GPU only: add --backend cuda");
    BatchModelSetup setup;
    setup.pool = std::make_shared<cpu::ThreadPool>(options.threads);
    setup.threads = setup.pool->size();
    const SyntheticShape shape = synthetic_shape(options.synthetic_size);
    SyntheticOptions synthetic;
    synthetic.size = options.synthetic_size;
    synthetic.thread_pool = setup.pool;
    synthetic.max_context = batch_context(options, shape.config.context_length);
    setup.target = std::make_unique<LlamaModel>(make_synthetic_target(synthetic));
    setup.target_info = describe_llama(*setup.target, true);
    const SyntheticDraftKind kind =
        options.synthetic_draft ? parse_synthetic_draft_kind(*options.synthetic_draft) : kDefaultSyntheticDraft;
    setup.draft = std::make_unique<LlamaModel>(make_synthetic_draft(synthetic, kind));
    setup.draft_info = describe_llama(*setup.draft, true);
    return setup;
}

// A model over `base`'s weights and thread pool with `slots` KV cache slots
// of base's context each (its cache: slots x context x kv_bytes_per_position()).
[[nodiscard]] inline std::unique_ptr<LlamaModel> with_sequence_slots(const LlamaModel& base, std::size_t slots,
                                                                     const std::shared_ptr<cpu::ThreadPool>& pool) {
    return std::make_unique<LlamaModel>(base.weights(), LlamaOptions{.max_context = base.context_length(),
                                                                     .thread_pool = pool,
                                                                     .name = base.name(),
                                                                     .sequences = slots});
}

#ifdef SPECDEC_BENCH_WITH_CUDA
// --batch --backend cuda: the CUDA synthetic pair once, generated on the
// device; every decoder of the sweep gets models sharing its device weights.
struct CudaBatchModelSetup {
    std::unique_ptr<cuda::CudaLlamaModel> target, draft;
    ModelInfo target_info, draft_info;
    std::string device;
};

[[nodiscard]] inline CudaBatchModelSetup set_up_cuda_batch_models(const BenchOptions& options) {
    if (!options.uses_synthetic_target() || options.draft_path)
        throw UsageError("--batch --backend cuda runs the CUDA synthetic family");
    detail::require_cuda_synthetic_draft(options);
    if (!cuda::available()) throw UsageError("--backend cuda: " + cuda::device_description());
    CudaBatchModelSetup setup;
    setup.device = cuda::device_description();
    cuda::CudaSyntheticOptions synthetic;
    synthetic.size = options.synthetic_size;
    synthetic.model.max_context = batch_context(options, cuda::cuda_synthetic_shape(options.synthetic_size).config.context_length);
    setup.target = std::make_unique<cuda::CudaLlamaModel>(cuda::make_cuda_synthetic_target(synthetic));
    setup.target_info = detail::describe_cuda(*setup.target, true);
    setup.draft = std::make_unique<cuda::CudaLlamaModel>(cuda::make_cuda_synthetic_draft(synthetic));
    setup.draft_info = detail::describe_cuda(*setup.draft, true);
    // Every width a pass of the sweep can have, its kernels loaded before
    // anything is timed (the models of the sweep share these weights' shapes).
    const std::size_t widest =
        *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end()) * (batch_longest_draft(options) + 1);
    setup.target->warm_up_widths(widest);
    setup.draft->warm_up_widths(widest);
    return setup;
}

// A model over `base`'s device weights (not copied) with `slots` KV cache
// slots of base's context each.
[[nodiscard]] inline std::unique_ptr<cuda::CudaLlamaModel> with_sequence_slots(const cuda::CudaLlamaModel& base, std::size_t slots) {
    return std::make_unique<cuda::CudaLlamaModel>(base.sharing_weights(
        {.precision = base.precision(), .max_context = base.context_length(), .name = base.name(), .sequences = slots}));
}
#endif

[[nodiscard]] inline ModelSetup set_up_models(const BenchOptions& options) {
    ModelSetup setup;
    if (options.backend == Backend::cuda) {
#ifdef SPECDEC_BENCH_WITH_CUDA
        if (!cuda::available()) throw UsageError("--backend cuda: " + cuda::device_description());
        setup.device = cuda::device_description();
        setup.threads = 1;  // the host thread that drives the device
        if (options.target_path) {
            detail::set_up_cuda_gguf(options, setup);
        } else {
            detail::set_up_cuda_synthetic(options, setup);
        }
        return setup;
#else
        throw UsageError("--backend cuda: this specdec-bench was built without CUDA (configure with -DSPECDEC_CUDA=ON)");
#endif
    }
    auto pool = std::make_shared<cpu::ThreadPool>(options.threads);
    setup.threads = pool->size();
    if (options.target_path) {
        detail::set_up_cpu_gguf(options, setup, pool);
    } else {
        detail::set_up_cpu_synthetic(options, setup, pool);
    }
    return setup;
}

}  // namespace specdec::bench
