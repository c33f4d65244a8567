// 02: generate text with a real target/draft pair from GGUF files, streaming
// the text as it is accepted, then print the decoding statistics.
//
//   02_generate_gguf TARGET.gguf DRAFT.gguf ["prompt"]
//
// With no arguments it uses stories260K.gguf (target) and stories260K-q4_0.gguf
// (draft) from $SPECDEC_FIXTURES or ../shared/fixtures, if they are there.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/formats/tokenizer.hpp>

namespace fs = std::filesystem;

// $SPECDEC_FIXTURES, else ../shared/fixtures seen from the working directory or the source tree.
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

int main(int argc, char** argv) {
    fs::path target_path = argc > 2 ? fs::path(argv[1]) : find_fixture("stories260K.gguf");
    fs::path draft_path = argc > 2 ? fs::path(argv[2]) : find_fixture("stories260K-q4_0.gguf");
    const std::string prompt_text = argc > 3 ? argv[3] : "Once upon a time";
    if (target_path.empty() || draft_path.empty()) {
        std::printf("usage: %s TARGET.gguf DRAFT.gguf [prompt]\n(no model files given and no fixtures found: nothing to do)\n", argv[0]);
        return 0;
    }
    try {
        specdec::LlamaModel target = specdec::LlamaModel::from_gguf(target_path);
        specdec::LlamaModel draft = specdec::LlamaModel::from_gguf(draft_path);
        const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(specdec::gguf::File::open(target_path));
        // BOS (and EOS) as the file asks (tokenizer.ggml.add_bos_token): a Llama file prepends BOS,
        // a Qwen2 file, whose vocabulary has a BOS token, does not.
        const std::vector<specdec::Token> prompt = tokenizer.encode(prompt_text);

        specdec::DecodingOptions options{.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 64};
        if (tokenizer.has_eos()) options.stop_tokens = {tokenizer.eos()};
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options);

        specdec::Tokenizer::StreamDecoder stream(tokenizer);
        std::printf("%s", prompt_text.c_str());
        const specdec::GenerationResult result = decoder.generate(prompt, [&](specdec::Token token) {
            std::printf("%s", stream.push(token).c_str());
            std::fflush(stdout);
        });
        std::printf("%s\n\n", stream.flush().c_str());

        const specdec::GenerationStats& s = result.stats;
        std::printf("stopped by %s after %zu tokens\n", std::string(specdec::to_string(result.stop_reason)).c_str(),
                    s.generated_tokens);
        std::printf("target passes %zu (%.2f tokens each), draft passes %zu, drafts accepted %zu/%zu (%.0f%%)\n",
                    s.target_forward_passes, s.mean_tokens_per_target_pass(), s.draft_forward_passes,
                    s.draft_tokens_accepted, s.draft_tokens_proposed, 100.0 * s.acceptance_rate());
        std::printf("time: draft %.1f ms, target %.1f ms, acceptance %.1f ms, total %.1f ms (%.0f tokens/s)\n",
                    1e3 * s.draft_seconds, 1e3 * s.target_seconds, 1e3 * s.acceptance_seconds, 1e3 * s.total_seconds,
                    s.tokens_per_second());
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "error: %s\n", error.what());
        return 1;
    }
}

// Expected output with the stories260K fixtures (timings vary by machine):
//
// Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
// Lily's mom said
//
// stopped by max_new_tokens after 64 tokens
// target passes 15 (4.27 tokens each), draft passes 58, drafts accepted 49/58 (84%)
// time: draft 12.9 ms, target 11.8 ms, acceptance 0.1 ms, total 25.0 ms (2558 tokens/s)
