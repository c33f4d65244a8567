// Decodes with a tiny adapter through the public header only; prints the tokens.
#include <cstdio>
#include <vector>

#include <specdec/specdec.hpp>

struct CountingModel {  // logits favour (last token + 1) mod vocab
    std::size_t vocab_size() const { return 16; }
    std::size_t context_length() const { return 64; }
    std::size_t cached_tokens() const { return cached; }
    specdec::LogitsView forward(std::span<const specdec::Token> tokens) {
        logits.assign(tokens.size() * 16, 0.0f);
        for (std::size_t i = 0; i < tokens.size(); ++i) logits[i * 16 + (tokens[i] + 1) % 16] = 5.0f;
        cached += tokens.size();
        return specdec::dense_logits(logits, tokens.size(), 16);
    }
    void truncate(std::size_t n) { cached = n; }
    std::size_t cached = 0;
    std::vector<float> logits;
};

int main() {
    CountingModel target, draft;
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), {.draft_tokens = 3, .sampling = {.temperature = 0.0}, .max_new_tokens = 8});
    const auto result = decoder.generate(std::vector<specdec::Token>{3});
    for (const auto token : result.tokens) std::printf("%d ", token);
    std::printf("\n");
    return result.tokens == std::vector<specdec::Token>{4, 5, 6, 7, 8, 9, 10, 11} ? 0 : 1;
}
