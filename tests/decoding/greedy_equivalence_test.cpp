// At temperature 0 speculative decoding must reproduce autoregressive greedy
// decoding token for token, whatever the draft gets right or wrong.
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::test::ToyLM;

TEST_CASE("greedy speculative output equals greedy autoregressive output token for token", "[exactness][greedy]") {
    const std::vector<std::vector<Token>> prompts{{1}, {3, 7, 7, 2}, {10, 20, 30, 40, 41, 42, 0}};
    // Per k: drafts accepted at the deepest position, over all runs (every
    // position is exercised, the bonus after a full block too).
    std::vector<std::size_t> deepest_accepted(9, 0);
    for (const double draft_noise : {0.3, 0.8}) {
        for (const auto& prompt : prompts) {
            ToyLM reference({.vocab = 50, .seed = 21, .sharpness = 1.0});
            specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 96});
            const auto expected = autoregressive.generate(prompt).tokens;
            for (const std::size_t k : {1, 2, 3, 5, 8}) {
                ToyLM target({.vocab = 50, .seed = 21, .sharpness = 1.0});
                ToyLM draft({.vocab = 50, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = draft_noise});
                specdec::SpeculativeDecoder decoder(
                    specdec::target(target), specdec::draft(draft), {.draft_tokens = k, .sampling = {.temperature = 0.0}, .max_new_tokens = 96},
                    specdec::TokenwiseRejection{}, specdec::FixedLength{});
                const auto result = decoder.generate(prompt);
                INFO("noise " << draft_noise << ", prompt length " << prompt.size() << ", k " << k
                              << ", acceptance " << result.stats.acceptance_rate());
                REQUIRE(result.tokens == expected);
                // The draft is sometimes right and sometimes wrong, so both paths ran.
                CHECK(result.stats.draft_tokens_accepted > 0);
                CHECK(result.stats.draft_tokens_accepted < result.stats.draft_tokens_proposed);
                deepest_accepted[k] += result.stats.accepted_at_position[k - 1];
            }
        }
    }
    for (const std::size_t k : {1, 2, 3, 5, 8}) {
        INFO("k " << k << ": accepted at draft position " << k - 1 << ": " << deepest_accepted[k]);
        CHECK(deepest_accepted[k] > 0);
    }
}

TEST_CASE("greedy verification through the exactness harness: the reference argmax sequence at every k up to 8", "[exactness][greedy]") {
    // At T = 0 the reference is a point mass on one sequence: a single emitted
    // token that differs from the independent argmax makes p = 0.
    for (const std::size_t k : {2, 4, 8}) {
        ToyLM target({.vocab = 4, .seed = 21, .sharpness = 1.0});
        ToyLM draft({.vocab = 4, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = 0.3});
        const specdec::SamplingOptions greedy{.temperature = 0.0};
        const specdec::test::ExactnessSetup setup{.name = "greedy, k " + std::to_string(k),
                                                  .prompt = {2, 1},
                                                  .vocab = 4,
                                                  .length = k + 1,
                                                  .draft_tokens = k,
                                                  .samples = 20,
                                                  .target = specdec::test::reference_conditional(target, greedy)};
        const auto report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
            // The seed must not matter at T = 0: every run must give the one sequence.
            specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                                {.draft_tokens = k, .sampling = greedy, .seed = seed, .max_new_tokens = 2 * k + 2},
                                                specdec::TokenwiseRejection{}, specdec::FixedLength{});
            return specdec::test::sampled_run(decoder.generate(setup.prompt));
        });
        specdec::test::check_exact(report, k);
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
