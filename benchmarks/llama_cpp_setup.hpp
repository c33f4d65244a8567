#pragma once
// specdec-bench --engine llama.cpp: the --target and --draft GGUF files loaded
// by llama.cpp (specdec/adapters/llama_cpp.hpp), so that the same rows, report,
// JSON and SVG as the own engine's measure specdec's decoding on llama.cpp's
// forward passes. Compiled only where CMake found llama.cpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "specdec/adapters/llama_cpp.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/specdec.hpp"

#include "bench_options.hpp"
#include "bench_results.hpp"
#include "machine_info.hpp"
#include "model_setup.hpp"

namespace specdec::bench {

struct LlamaCppSetup {
    std::unique_ptr<LlamaCppModel> target;
    std::variant<std::unique_ptr<LlamaCppModel>, std::unique_ptr<PromptLookupDrafter>> draft;
    ModelInfo target_info;
    ModelInfo draft_info;
    std::vector<Token> prompt;
    std::string prompt_text;
    std::size_t threads = 0;
};

namespace detail {

// The weights a one-token forward streams, from the file's tensor table: all
// of them but the token embedding, of which one row is read (unless the
// output layer is tied to it and reads it whole). 0 (unknown) for a file
// whose tensor types specdec's reader does not know: llama.cpp loads more.
[[nodiscard]] inline std::uint64_t gguf_bytes_read_per_token(const std::string& path) {
    try {
        const gguf::File file = gguf::File::open(path);
        const bool tied = file.find_tensor("output.weight") == nullptr;
        std::uint64_t bytes = 0;
        for (const gguf::TensorInfo& tensor : file.tensors())
            if (tied || tensor.name != "token_embd.weight") bytes += tensor.byte_size;
        return bytes;
    } catch (const Error&) {
        return 0;
    }
}

[[nodiscard]] inline ModelInfo describe_llama_cpp(const LlamaCppModel& model, const std::string& path) {
    char description[256] = {};
    llama_model_desc(model.model(), description, sizeof description);
    return ModelInfo{std::filesystem::path(path).stem().string(), std::string("llama.cpp ") + description,
                     llama_model_n_params(model.model()), llama_model_size(model.model()), false,
                     gguf_bytes_read_per_token(path)};
}

// The context to give llama.cpp before the prompt is tokenised (tokenising
// needs the loaded model): a token is at least one byte of the text, plus BOS
// and EOS, so the text's length bounds the prompt.
[[nodiscard]] inline std::size_t llama_cpp_context(const BenchOptions& options, std::size_t prompt_bytes) {
    return context_needed(options, prompt_bytes + 2);
}

}  // namespace detail

[[nodiscard]] inline LlamaCppSetup set_up_llama_cpp_models(const BenchOptions& options) {
    LlamaCppSetup setup;
    setup.threads = options.threads == 0 ? hardware_threads() : options.threads;
    setup.prompt_text = options.prompt.value_or(std::string(kDefaultTextPrompt));
    LlamaCppOptions model_options;
    model_options.max_context = detail::llama_cpp_context(options, setup.prompt_text.size());
    model_options.threads = static_cast<int>(setup.threads);
    model_options.threads_batch = static_cast<int>(setup.threads);
    // --tree rows: a tree never has more leaves than nodes.
    for (const std::string& tree : options.trees)
        model_options.tree_leaves =
            std::max(model_options.tree_leaves, is_auto_tree(tree) ? options.tree_max_nodes : TreeShape::parse(tree).size());
    for (const TreeAutoVariant& variant : options.tree_auto_variants)
        if (variant.max_nodes_given) model_options.tree_leaves = std::max(model_options.tree_leaves, variant.options.max_nodes);

    setup.target = std::make_unique<LlamaCppModel>(LlamaCppModel::from_gguf(*options.target_path, model_options));
    setup.target_info = detail::describe_llama_cpp(*setup.target, *options.target_path);
    // As the own engine's GGUF prompt: the text with BOS where the vocabulary has one.
    setup.prompt = setup.target->tokenize(setup.prompt_text, /*add_bos=*/true);
    if (setup.prompt.empty()) throw UsageError("--prompt: the prompt tokenises to nothing");
    if (options.uses_prompt_lookup()) {
        setup.draft = std::make_unique<PromptLookupDrafter>();
        setup.draft_info = describe_prompt_lookup();
    } else {
        auto draft = std::make_unique<LlamaCppModel>(LlamaCppModel::from_gguf(*options.draft_path, model_options));
        check_same_vocabulary(*setup.target, *draft);
        setup.draft_info = detail::describe_llama_cpp(*draft, *options.draft_path);
        setup.draft = std::move(draft);
    }
    // The own engine stops at the model's trained context; llama.cpp decodes on
    // past it (with a context of its own size): the rows then differ in length.
    const auto trained = static_cast<std::size_t>(std::max(0, llama_model_n_ctx_train(setup.target->model())));
    if (trained > 0 && detail::context_needed(options, setup.prompt.size()) > trained)
        std::fprintf(stderr,
                     "specdec-bench: note: the target was trained on %zu positions; llama.cpp decodes past them "
                     "(the own engine stops there)\n",
                     trained);
    return setup;
}

// --engine llama.cpp --batch: the two files loaded once (one sequence each);
// every decoder of the sweep gets models of its own over the same weights
// (LlamaCppModel::new_context) with B sequences of llama.cpp's cache.
struct LlamaCppBatchSetup {
    std::unique_ptr<LlamaCppModel> target, draft;
    ModelInfo target_info, draft_info;
    std::size_t threads = 0;
    LlamaCppOptions per_decoder;  // the context of a decoder, but its number of sequences

    // A decoder's context of `slots` sequences. A target pass holds at most
    // slots x (longest draft + 1) tokens and a draft round one per sequence;
    // the batch (and llama.cpp's output buffer, one row per batch token) is
    // sized to the larger of that and one prompt per sequence: admitting more
    // prompts at once is fed in chunks.
    [[nodiscard]] LlamaCppOptions context_options(std::size_t slots, std::size_t tokens_per_sequence) const {
        LlamaCppOptions options = per_decoder;
        options.sequences = slots;
        options.batch = std::clamp<std::size_t>(slots * tokens_per_sequence, 1, 512);
        return options;
    }
};

[[nodiscard]] inline LlamaCppBatchSetup set_up_llama_cpp_batch_models(const BenchOptions& options) {
    LlamaCppBatchSetup setup;
    setup.threads = options.threads == 0 ? hardware_threads() : options.threads;
    setup.per_decoder.max_context = batch_context(options, std::numeric_limits<std::size_t>::max());
    setup.per_decoder.threads = static_cast<int>(setup.threads);
    setup.per_decoder.threads_batch = static_cast<int>(setup.threads);
    setup.target = std::make_unique<LlamaCppModel>(LlamaCppModel::from_gguf(*options.target_path, setup.per_decoder));
    setup.target_info = detail::describe_llama_cpp(*setup.target, *options.target_path);
    setup.draft = std::make_unique<LlamaCppModel>(LlamaCppModel::from_gguf(*options.draft_path, setup.per_decoder));
    check_same_vocabulary(*setup.target, *setup.draft);
    setup.draft_info = detail::describe_llama_cpp(*setup.draft, *options.draft_path);
    return setup;
}

}  // namespace specdec::bench
