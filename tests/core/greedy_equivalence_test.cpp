// At temperature 0 speculative decoding must reproduce autoregressive greedy
// decoding token for token, whatever the draft gets right or wrong.
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::test::ToyLM;

TEST_CASE("greedy speculative output equals greedy autoregressive output token for token", "[exactness][greedy]") {
    const std::vector<std::vector<Token>> prompts{{1}, {3, 7, 7, 2}, {10, 20, 30, 40, 41, 42, 0}};
    for (const double draft_noise : {0.3, 0.8}) {
        for (const auto& prompt : prompts) {
            ToyLM reference({.vocab = 50, .seed = 21, .sharpness = 1.0});
            specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 96});
            const auto expected = autoregressive.generate(prompt).tokens;
            for (const std::size_t k : {1, 2, 3, 5, 8}) {
                ToyLM target({.vocab = 50, .seed = 21, .sharpness = 1.0});
                ToyLM draft({.vocab = 50, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = draft_noise});
                specdec::SpeculativeDecoder decoder(
                    specdec::target(target), specdec::draft(draft), {.draft_tokens = k, .sampling = {.temperature = 0.0}, .max_new_tokens = 96});
                const auto result = decoder.generate(prompt);
                INFO("noise " << draft_noise << ", prompt length " << prompt.size() << ", k " << k
                              << ", acceptance " << result.stats.acceptance_rate());
                REQUIRE(result.tokens == expected);
                // The draft is sometimes right and sometimes wrong, so both paths ran.
                CHECK(result.stats.draft_tokens_accepted > 0);
                CHECK(result.stats.draft_tokens_accepted < result.stats.draft_tokens_proposed);
            }
        }
    }
}

TEST_CASE("greedy equivalence holds with a point-mass prompt-lookup drafter", "[exactness][greedy]") {
    ToyLM reference({.vocab = 8, .seed = 2});
    const std::vector<Token> prompt{1, 2, 3, 1, 2, 3, 1, 2};
    specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 64});
    const auto expected = autoregressive.generate(prompt).tokens;
    ToyLM target({.vocab = 8, .seed = 2});
    specdec::PromptLookupDrafter drafter;
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(drafter), {.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 64});
    const auto result = decoder.generate(prompt);
    CHECK(result.tokens == expected);
    CHECK(result.stats.draft_tokens_proposed > 0);
    CHECK(result.stats.draft_forward_passes == 0);
}
