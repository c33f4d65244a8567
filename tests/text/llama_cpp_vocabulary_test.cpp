// llama.cpp's vocabulary through text::LlamaCppVocabulary: streaming a
// generation's tokens gives the pieces llama.cpp's tools print
// (llama_token_to_piece), which is llama_detokenize(prompt + tokens) minus
// llama_detokenize(prompt) on every fixture, up to the spaces that
// llama_detokenize's clean-up removes before punctuation and contractions
// in the vocabularies that ask for it (here: mistral-f32.gguf, whose
// tokenizer has GPT-2's rules). Random sequences; built only with llama.cpp
// (SPECDEC_TEXT_WITH_LLAMA_CPP).
#ifdef SPECDEC_TEXT_WITH_LLAMA_CPP
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <llama.h>

#include "specdec/text/detokenizer.hpp"
#include "specdec/text/llama_cpp_vocabulary.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/test_random.hpp"

static_assert(specdec::text::TextVocabulary<specdec::text::LlamaCppVocabulary>);

namespace {

std::string llama_text(const llama_vocab* vocab, const std::vector<llama_token>& tokens) {
    std::string text(tokens.size() * 16 + 16, '\0');
    std::int32_t size = llama_detokenize(vocab, tokens.data(), static_cast<std::int32_t>(tokens.size()), text.data(),
                                         static_cast<std::int32_t>(text.size()), false, false);
    REQUIRE(size >= 0);
    text.resize(static_cast<std::size_t>(size));
    return text;
}

std::string piece(const llama_vocab* vocab, llama_token token) {
    char buffer[256];
    const std::int32_t length = llama_token_to_piece(vocab, token, buffer, sizeof buffer, 0, false);
    REQUIRE(length >= 0);
    return std::string(buffer, static_cast<std::size_t>(length));
}

// The text without the spaces llama_detokenize's clean-up may remove: those
// before ? ! . , and '.
std::string without_cleanable_spaces(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char next = i + 1 < text.size() ? text[i + 1] : '\0';
        if (text[i] == ' ' && (next == '?' || next == '!' || next == '.' || next == ',' || next == '\'')) continue;
        out += text[i];
    }
    return out;
}

}  // namespace

TEST_CASE("LlamaCppVocabulary streams what llama_detokenize prints", "[text][llama_cpp]") {
    llama_backend_init();
    // (file, whether llama_detokenize cleans spaces for its vocabulary)
    std::vector<std::pair<std::filesystem::path, bool>> paths;
    for (const char* name : {"llama3-f32.gguf", "qwen2-f32.gguf"})
        paths.emplace_back(std::filesystem::path(SPECDEC_REPO_FIXTURES) / name, false);
    // (llama-gqa-f32.gguf is not among them: llama.cpp does not load it.)
    paths.emplace_back(std::filesystem::path(SPECDEC_REPO_FIXTURES) / "mistral-f32.gguf", true);
    if (const auto stories = specdec::test::fixture_path("stories260K.gguf")) paths.emplace_back(*stories, false);
    for (const auto& [path, cleans_spaces] : paths) {
        INFO(path.filename().string());
        llama_model_params params = llama_model_default_params();
        params.vocab_only = true;
        const std::unique_ptr<llama_model, decltype(&llama_model_free)> model(
            llama_model_load_from_file(path.string().c_str(), params), &llama_model_free);
        REQUIRE(model != nullptr);
        const llama_vocab* vocab = llama_model_get_vocab(model.get());
        const specdec::text::LlamaCppVocabulary wrapped(vocab);
        REQUIRE(wrapped.vocab_size() == static_cast<std::size_t>(llama_vocab_n_tokens(vocab)));
        specdec::test::TestRandom random{99};
        for (int c = 0; c < 1000; ++c) {
            std::vector<llama_token> prompt;
            if (wrapped.bos() >= 0) prompt.push_back(wrapped.bos());
            const std::size_t prompt_extra = random.below(3);
            for (std::size_t i = 0; i < prompt_extra || prompt.empty(); ++i)
                prompt.push_back(static_cast<llama_token>(random.below(wrapped.vocab_size())));
            std::vector<llama_token> all = prompt;
            const std::size_t count = random.below(30);
            for (std::size_t i = 0; i < count; ++i) all.push_back(static_cast<llama_token>(random.below(wrapped.vocab_size())));
            specdec::text::Detokenizer<specdec::text::LlamaCppVocabulary> stream(wrapped);
            stream.continue_after(prompt);
            std::string streamed;
            for (std::size_t i = prompt.size(); i < all.size(); ++i) streamed += stream.push(all[i]);
            streamed += stream.flush();
            std::string pieces;
            for (std::size_t i = prompt.size(); i < all.size(); ++i) pieces += piece(vocab, all[i]);
            REQUIRE(streamed == pieces);
            const std::string whole = llama_text(vocab, all), before = llama_text(vocab, prompt);
            if (cleans_spaces) {
                REQUIRE(without_cleanable_spaces(whole) == without_cleanable_spaces(llama_text(vocab, prompt) + streamed));
            } else {
                REQUIRE(whole.compare(0, before.size(), before) == 0);
                REQUIRE(streamed == whole.substr(before.size()));
            }
        }
    }
}
#endif
