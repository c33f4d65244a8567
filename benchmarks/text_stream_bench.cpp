// specdec-text-stream-bench: the text layer's work per token as a stream
// grows. A TextStream (detokenizer, stop strings, held-back text) must cost
// the same per token whatever the stream's length; this times streams of 1k,
// 10k and 100k random tokens of a real vocabulary (with two stop strings that
// never match, so everything is scanned) and prints ns per token and the
// ratio of each length to the 1k one (the median of five runs, each over at
// least 100k tokens in all).
//
//   specdec-text-stream-bench [VOCABULARY.gguf]   (default: tests/fixtures/llama3-f32.gguf)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <specdec/formats/gguf.hpp>
#include <specdec/formats/tokenizer.hpp>
#include <specdec/text/text_stream.hpp>

namespace {

// ns per token of streaming `tokens` through fresh streams of `length` tokens.
double stream_ns_per_token(const specdec::Tokenizer& tokenizer, const std::vector<specdec::Token>& tokens, std::size_t length) {
    const std::vector<specdec::Token> context{tokenizer.bos()};
    std::size_t bytes = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t begin = 0; begin + length <= tokens.size(); begin += length) {
        specdec::text::TextStream<specdec::Tokenizer> stream(tokenizer, {.stop_strings = {"\nUser:", "<|im_end|>"}}, context);
        for (std::size_t i = begin; i < begin + length; ++i)
            (void)stream.push(tokens[i], [&](const specdec::text::TextPiece& piece) { bytes += piece.text.size(); });
        stream.finish();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (bytes == 0) std::printf("(no text streamed)\n");
    return 1e9 * seconds / static_cast<double>(tokens.size() / length * length);
}

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path path = argc > 1 ? std::filesystem::path(argv[1]) : std::filesystem::path();
#ifdef SPECDEC_PROJECT_FIXTURES
    if (path.empty()) path = std::filesystem::path(SPECDEC_PROJECT_FIXTURES) / "llama3-f32.gguf";
#endif
    if (path.empty()) {
        std::printf("usage: %s VOCABULARY.gguf\n", argv[0]);
        return 2;
    }
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(specdec::gguf::File::open(path));
    // Random ordinary tokens: whatever the vocabulary decodes, split UTF-8 included.
    std::vector<specdec::Token> ordinary;
    for (std::size_t id = 0; id < tokenizer.vocab_size(); ++id) {
        const auto token = static_cast<specdec::Token>(id);
        if (!tokenizer.token_text(token).empty()) ordinary.push_back(token);
    }
    const auto end_of_generation = tokenizer.end_of_generation();
    std::erase_if(ordinary, [&](specdec::Token t) {
        return std::find(end_of_generation.begin(), end_of_generation.end(), t) != end_of_generation.end();
    });
    std::mt19937_64 rng(7);
    constexpr std::size_t kTokens = 100000;
    std::vector<specdec::Token> tokens(kTokens);
    for (specdec::Token& token : tokens) token = ordinary[rng() % ordinary.size()];

    std::printf("vocabulary %s (%zu tokens); %zu random tokens per run; median of 5 runs\n",
                path.filename().string().c_str(), tokenizer.vocab_size(), kTokens);
    std::printf("%10s %12s %14s\n", "length", "ns/token", "vs 1k tokens");
    double base = 0.0;
    for (const std::size_t length : {std::size_t{1000}, std::size_t{10000}, std::size_t{100000}}) {
        std::vector<double> runs;
        for (int run = 0; run < 5; ++run) runs.push_back(stream_ns_per_token(tokenizer, tokens, length));
        std::sort(runs.begin(), runs.end());
        const double median = runs[runs.size() / 2];
        if (length == 1000) base = median;
        std::printf("%10zu %12.1f %13.2fx\n", length, median, median / base);
    }
    return 0;
}
