// 11: add speculative decoding to a program that already runs llama.cpp.
// The program loads its models and creates its contexts with llama.h as it
// always did; specdec borrows them (LlamaCppModel::borrow: used, never
// freed) and decodes with the small model drafting for the large one. The
// greedy output is checked against specdec's autoregressive decoding on
// the same contexts.
//
//   11_llama_cpp TARGET.gguf DRAFT.gguf ["prompt"]
//
// With no arguments it uses stories260K.gguf (target) and
// stories260K-q8_0.gguf (draft) from $SPECDEC_FIXTURES or ../shared/fixtures.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <llama.h>

#include <specdec/adapters/llama_cpp.hpp>
#include <specdec/specdec.hpp>

namespace fs = std::filesystem;

static fs::path find_fixture(const std::string& name) {
    std::vector<fs::path> folders;
    if (const char* env = std::getenv("SPECDEC_FIXTURES")) folders.emplace_back(env);
    folders.emplace_back("../shared/fixtures");
#ifdef SPECDEC_DEFAULT_FIXTURES
    folders.emplace_back(SPECDEC_DEFAULT_FIXTURES);
#endif
    for (const fs::path& folder : folders)
        if (fs::exists(folder / name)) return folder / name;
    return {};
}

// --- The program's own llama.cpp code, unchanged by specdec ---------------
using ModelPtr = std::unique_ptr<llama_model, decltype(&llama_model_free)>;
using ContextPtr = std::unique_ptr<llama_context, decltype(&llama_free)>;

static ModelPtr load_model(const fs::path& path) {
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 99;  // whatever devices this llama.cpp build has
    return ModelPtr(llama_model_load_from_file(path.c_str(), params), &llama_model_free);
}

static ContextPtr new_context(llama_model* model) {
    llama_context_params params = llama_context_default_params();
    params.n_ctx = 512;
    params.n_batch = 512;
    params.n_threads = params.n_threads_batch = 1;  // tiny models: more threads only wait
    return ContextPtr(llama_init_from_model(model, params), &llama_free);
}

int main(int argc, char** argv) {
    const fs::path target_path = argc > 2 ? fs::path(argv[1]) : find_fixture("stories260K.gguf");
    const fs::path draft_path = argc > 2 ? fs::path(argv[2]) : find_fixture("stories260K-q8_0.gguf");
    const std::string prompt_text = argc > 3 ? argv[3] : "Once upon a time";
    if (target_path.empty() || draft_path.empty()) {
        std::printf("usage: %s TARGET.gguf DRAFT.gguf [prompt]\n"
                    "SKIPPED: no model files given and no stories260K fixtures found\n", argv[0]);
        return 0;
    }
    llama_backend_init();
    ModelPtr target_model = load_model(target_path), draft_model = load_model(draft_path);
    if (!target_model || !draft_model) {
        std::fprintf(stderr, "llama.cpp could not load the models\n");
        return 1;
    }
    ContextPtr target_context = new_context(target_model.get()), draft_context = new_context(draft_model.get());
    if (!target_context || !draft_context) {
        std::fprintf(stderr, "llama.cpp could not create the contexts\n");
        return 1;
    }

    // --- Speculative decoding on those contexts: the lines specdec adds ----
    try {
        specdec::LlamaCppModel target = specdec::LlamaCppModel::borrow(target_model.get(), target_context.get());
        specdec::LlamaCppModel draft = specdec::LlamaCppModel::borrow(draft_model.get(), draft_context.get());
        specdec::check_same_vocabulary(target, draft);
        const std::vector<specdec::Token> prompt = target.tokenize(prompt_text, target.add_bos());
        specdec::DecodingOptions options{.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 64};
        options.stop_tokens = target.stop_tokens();
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options);
        const specdec::GenerationResult result = decoder.generate(prompt);
        std::printf("%s%s\n\n", prompt_text.c_str(), target.detokenize(result.tokens).c_str());
        std::printf("%zu tokens, %zu target passes, %zu of %zu drafted tokens accepted\n", result.tokens.size(),
                    result.stats.target_forward_passes, result.stats.draft_tokens_accepted, result.stats.draft_tokens_proposed);

        // The same contexts, greedily without a draft: the text must not change.
        target.truncate(0);
        specdec::AutoregressiveDecoder<specdec::LlamaCppModel> plain(target, options);
        const bool same = plain.generate(prompt).tokens == result.tokens;
        std::printf("greedy speculative %s autoregressive\n", same ? "==" : "DIFFERENT from");
        if (!same) return 1;
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "%s\n", error.what());
        return 1;
    }
    // specdec is gone; the contexts are the program's again (ContextPtr frees them).
    return 0;
}
