// Links specdec::cpu from the consumer's side: the seeded synthetic pair (no
// model file) decodes greedily, and speculative decoding must reproduce the
// target's own greedy output token for token.
#include <cstdio>
#include <vector>

#include <specdec/cpu.hpp>

int main() {
    auto pair = specdec::make_synthetic_pair({.size = "tiny", .threads = 1});
    const std::vector<specdec::Token> prompt{1, 5, 9};
    const specdec::DecodingOptions options{.draft_tokens = 3, .sampling = {.temperature = 0.0}, .max_new_tokens = 12};
    specdec::AutoregressiveDecoder reference(pair.target, options);
    const auto expected = reference.generate(prompt).tokens;
    pair.target.truncate(0);
    specdec::SpeculativeDecoder decoder(specdec::target(pair.target), specdec::draft(pair.draft), options);
    const auto result = decoder.generate(prompt);
    for (const auto token : result.tokens) std::printf("%d ", token);
    std::printf("\n");
    return result.tokens.size() == 12 && result.tokens == expected ? 0 : 1;
}
