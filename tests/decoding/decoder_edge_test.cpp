// Edge behaviour of the speculative decoder, through the step API: a stop
// token or a callback inside an accepted block (output, statistics, caches,
// continuing afterwards), max_new_tokens landing inside a block, a draft whose
// context is shorter than the target's, prompts of context - 1 and context
// tokens, and the draft's KV cache against the committed sequence after every
// step.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

using specdec::DecodingOptions;
using specdec::StopReason;
using specdec::Token;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

namespace {

ToyLMOptions edge_target_options(std::size_t context = 512) { return {.vocab = 20, .seed = 8, .sharpness = 1.5, .context = context}; }
ToyLMOptions noisy_draft_options(std::size_t context = 512) {
    return {.vocab = 20, .seed = 8, .sharpness = 1.5, .noise_seed = 2, .noise = 0.7, .context = context};
}
using Decoder = specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedLength>;

// A ToyLM that records its cache after every forward() call.
class RecordingLM {
public:
    explicit RecordingLM(ToyLMOptions options) : model_(options) {}
    std::size_t vocab_size() const { return model_.vocab_size(); }
    std::size_t context_length() const { return model_.context_length(); }
    std::size_t cached_tokens() const { return model_.cached_tokens(); }
    void truncate(std::size_t n) { model_.truncate(n); }
    specdec::LogitsView forward(std::span<const Token> tokens) {
        const specdec::LogitsView logits = model_.forward(tokens);
        snapshots.push_back(model_.cache());
        return logits;
    }
    const std::vector<Token>& cache() const { return model_.cache(); }

    std::vector<std::vector<Token>> snapshots;

private:
    ToyLM model_;
};

std::vector<Token> concat(std::span<const Token> a, std::span<const Token> b) {
    std::vector<Token> out(a.begin(), a.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
}

}  // namespace

TEST_CASE("a stop token inside an accepted block ends the step there and counts only the emitted drafts", "[decoder][edge]") {
    // The draft equals the target, so every draft is accepted (at T > 0 too:
    // q == p). The stop token is the second token of the first block: two of
    // the four accepted drafts are emitted.
    for (const double temperature : {0.0, 1.0}) {
        bool found = false;
        for (std::uint64_t seed = 1; seed < 40 && !found; ++seed) {
            const std::vector<Token> prompt{static_cast<Token>(seed % 20), 3};
            const DecodingOptions plain{.draft_tokens = 4, .sampling = {.temperature = temperature}, .seed = seed, .max_new_tokens = 30};
            ToyLM t0(edge_target_options()), d0(edge_target_options());
            Decoder unstopped(specdec::target(t0), specdec::draft(d0), plain);
            unstopped.prefill(prompt);
            const auto block = unstopped.step().tokens;
            REQUIRE(block.size() == 5);
            if (block[0] == block[1]) continue;  // the stop token must first occur at index 1
            INFO("temperature " << temperature << ", seed " << seed);

            DecodingOptions stopping = plain;
            stopping.stop_tokens = {block[1]};
            ToyLM target(edge_target_options()), draft(edge_target_options());
            Decoder decoder(specdec::target(target), specdec::draft(draft), stopping);
            decoder.prefill(prompt);
            const specdec::StepResult step = decoder.step();
            CHECK(step.tokens == std::vector<Token>{block[0], block[1]});
            REQUIRE(step.stop == StopReason::stop_token);
            CHECK(step.stats.generated_tokens == 2);
            CHECK(step.stats.draft_tokens_proposed == 4);
            CHECK(step.stats.draft_tokens_accepted == 2);
            CHECK(step.stats.proposed_at_position == std::vector<std::size_t>{1, 1, 1, 1});
            CHECK(step.stats.accepted_at_position == std::vector<std::size_t>{1, 1, 0, 0});
            CHECK(std::vector<Token>(decoder.sequence().begin(), decoder.sequence().end()) ==
                  concat(prompt, step.tokens));
            // The target still holds the unemitted accepted drafts; they agree with
            // the committed sequence as far as it goes and are rolled back by the next pass.
            const std::vector<Token> committed(decoder.sequence().begin(), decoder.sequence().end());
            REQUIRE(target.cache().size() >= committed.size() - 1);
            CHECK(std::equal(committed.begin(), committed.end() - 1, target.cache().begin()));

            // generate() reports the same.
            ToyLM target2(edge_target_options()), draft2(edge_target_options());
            const auto whole = Decoder(specdec::target(target2), specdec::draft(draft2), stopping).generate(prompt);
            CHECK(whole.tokens == step.tokens);
            CHECK(whole.stop_reason == StopReason::stop_token);
            CHECK(whole.stats.draft_tokens_accepted == 2);
            CHECK(whole.stats.acceptance_rate() == Approx(0.5));

            // Continuing past the stop: the next steps give what a fresh decoder
            // gives for the committed sequence (the randomness is per position).
            DecodingOptions continuing = plain;
            ToyLM fresh_target(edge_target_options()), fresh_draft(edge_target_options());
            Decoder fresh(specdec::target(fresh_target), specdec::draft(fresh_draft), continuing);
            fresh.prefill(committed);
            const auto expected = fresh.step().tokens;
            CHECK(decoder.step().tokens == expected);
            found = true;
        }
        CHECK(found);
    }
}

TEST_CASE("a callback that stops inside an accepted block counts only the emitted drafts", "[decoder][edge]") {
    for (const double temperature : {0.0, 1.0}) {
        ToyLM target(edge_target_options()), draft(edge_target_options());
        Decoder decoder(specdec::target(target), specdec::draft(draft),
                        {.draft_tokens = 6, .sampling = {.temperature = temperature}, .seed = 5, .max_new_tokens = 40});
        decoder.prefill(std::vector<Token>{4, 4, 1});
        std::size_t calls = 0;
        const auto step = decoder.step(decoder.options().max_new_tokens, [&](Token) { return ++calls < 3; });
        INFO("temperature " << temperature);
        CHECK(step.tokens.size() == 3);
        CHECK(step.stop == StopReason::callback);
        CHECK(step.stats.draft_tokens_proposed == 6);
        CHECK(step.stats.draft_tokens_accepted == 3);
        CHECK(step.stats.accepted_at_position == std::vector<std::size_t>{1, 1, 1, 0, 0, 0});
    }
}

TEST_CASE("max_new_tokens inside a block: a step drafts at most max_tokens - 1 and emits at most max_tokens", "[decoder][edge]") {
    // An always-accepting draft would emit k + 1 = 5 tokens a step without the clamp.
    for (std::size_t limit = 1; limit <= 7; ++limit) {
        ToyLM target(edge_target_options()), draft(edge_target_options());
        Decoder decoder(specdec::target(target), specdec::draft(draft), {.draft_tokens = 4, .seed = 2, .max_new_tokens = 50});
        decoder.prefill(std::vector<Token>{1, 2});
        const auto step = decoder.step(limit);
        INFO("max_tokens " << limit);
        CHECK(step.tokens.size() == std::min<std::size_t>(limit, 5));
        CHECK(step.stats.draft_tokens_proposed == std::min<std::size_t>(limit - 1, 4));
        CHECK(step.stats.draft_tokens_accepted == std::min<std::size_t>(limit - 1, 4));
    }
    ToyLM target(edge_target_options()), draft(edge_target_options());
    const auto result = Decoder(specdec::target(target), specdec::draft(draft), {.draft_tokens = 4, .seed = 2, .max_new_tokens = 7})
                            .generate(std::vector<Token>{1, 2});
    CHECK(result.tokens.size() == 7);
    CHECK(result.stats.target_forward_passes == 2);  // 5 tokens, then 1 draft + 1
    CHECK(result.stats.draft_tokens_proposed == 5);
    CHECK(result.stats.proposed_at_position == std::vector<std::size_t>{2, 1, 1, 1});
}

TEST_CASE("max_new_tokens inside a block keeps the output distribution exact", "[decoder][edge][exactness]") {
    // k = 8 is clamped to 2 drafts by max_new_tokens = 3.
    ToyLM target({.vocab = 3, .seed = 5, .sharpness = 1.2}), draft({.vocab = 3, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5});
    const specdec::SamplingOptions sampling{.temperature = 1.0};
    const specdec::test::ExactnessSetup setup{.name = "k 8 clamped by max_new_tokens 3",
                                              .prompt = {1, 2},
                                              .vocab = 3,
                                              .length = 3,
                                              .draft_tokens = 2,
                                              .samples = 10000,
                                              .target = specdec::test::reference_conditional(target, sampling)};
    const auto report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        Decoder decoder(specdec::target(target), specdec::draft(draft),
                        {.draft_tokens = 8, .sampling = sampling, .seed = seed, .max_new_tokens = 3});
        return specdec::test::sampled_run(decoder.generate(setup.prompt));
    });
    specdec::test::check_exact(report, 2);
    CHECK(report.reached.size() == 8);
    CHECK(report.reached[2] == 0);  // never drafted beyond the clamp
}

TEST_CASE("a draft model with a shorter context than the target's stops drafting and the output stays exact", "[decoder][edge]") {
    // Greedy: identical to autoregressive decoding, for prompts shorter and
    // longer than the draft's context.
    for (const std::size_t prompt_length : {3, 12}) {
        std::vector<Token> prompt;
        for (std::size_t i = 0; i < prompt_length; ++i) prompt.push_back(static_cast<Token>((i * 7) % 20));
        ToyLM reference(edge_target_options(64));
        const auto expected = specdec::AutoregressiveDecoder(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 30})
                                  .generate(prompt);
        ToyLM target(edge_target_options(64)), draft(noisy_draft_options(8));
        const auto result = Decoder(specdec::target(target), specdec::draft(draft),
                                    {.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 30})
                                .generate(prompt);
        INFO("prompt length " << prompt_length);
        CHECK(result.tokens == expected.tokens);
        CHECK(draft.cached_tokens() <= 8);
        if (prompt_length < 8) CHECK(result.stats.draft_tokens_proposed > 0);
        else CHECK(result.stats.draft_tokens_proposed == 0);
    }
    // Sampling: the first step can draft only 3 of k = 4 (draft context 4, prompt 2).
    ToyLM target({.vocab = 3, .seed = 5, .sharpness = 1.2}),
        draft({.vocab = 3, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5, .context = 4});
    const specdec::SamplingOptions sampling{.temperature = 1.0};
    const specdec::test::ExactnessSetup setup{.name = "draft context 4, k 4",
                                              .prompt = {1, 2},
                                              .vocab = 3,
                                              .length = 5,
                                              .draft_tokens = 3,
                                              .samples = 10000,
                                              .target = specdec::test::reference_conditional(target, sampling)};
    const auto report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        Decoder decoder(specdec::target(target), specdec::draft(draft),
                        {.draft_tokens = 4, .sampling = sampling, .seed = seed, .max_new_tokens = 5});
        return specdec::test::sampled_run(decoder.generate(setup.prompt));
    });
    specdec::test::check_exact(report, 3);
    CHECK(report.reached[3] == 0);
}

TEST_CASE("prompts of context - 1 and context tokens: the last positions are generated, then context_full", "[decoder][edge]") {
    constexpr std::size_t kContext = 16;
    for (const double temperature : {0.0, 1.0}) {
        for (const std::size_t prompt_length : {kContext - 1, kContext}) {
            std::vector<Token> prompt;
            for (std::size_t i = 0; i < prompt_length; ++i) prompt.push_back(static_cast<Token>((i * 3) % 20));
            const DecodingOptions options{.draft_tokens = 4, .sampling = {.temperature = temperature}, .seed = 7, .max_new_tokens = 10};
            ToyLM reference(edge_target_options(kContext));
            const auto expected = specdec::AutoregressiveDecoder(reference, options).generate(prompt);
            ToyLM target(edge_target_options(kContext)), draft(noisy_draft_options(kContext));
            Decoder decoder(specdec::target(target), specdec::draft(draft), options);
            const auto result = decoder.generate(prompt);
            INFO("temperature " << temperature << ", prompt length " << prompt_length);
            // The cache holds `context` positions; the token after the last one is
            // still generated: context + 1 - prompt tokens in all.
            CHECK(result.stop_reason == StopReason::context_full);
            CHECK(expected.stop_reason == StopReason::context_full);
            CHECK(result.tokens.size() == kContext + 1 - prompt_length);
            CHECK(target.cached_tokens() <= kContext);
            CHECK(draft.cached_tokens() <= kContext);
            // Greedy: token for token. At context, no draft fits and the one token
            // is drawn with the autoregressive decoder's randomness: equal at T > 0 too.
            if (temperature == 0.0 || prompt_length == kContext) CHECK(result.tokens == expected.tokens);
            if (prompt_length == kContext) CHECK(result.stats.draft_tokens_proposed == 0);
            else CHECK(result.stats.draft_tokens_proposed == 1);
        }
    }
    ToyLM target(edge_target_options(kContext)), draft(noisy_draft_options(kContext));
    Decoder decoder(specdec::target(target), specdec::draft(draft));
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>(kContext + 1, 1)), Catch::Contains("context holds only 16"));
}

TEST_CASE("after every step the draft catches up to exactly the committed sequence before drafting", "[decoder][edge][rollback]") {
    for (const double temperature : {0.0, 1.0}) {
        ToyLM target(edge_target_options());
        RecordingLM draft(noisy_draft_options());
        constexpr std::size_t k = 5;
        specdec::SpeculativeDecoder<ToyLM, RecordingLM, specdec::TokenwiseRejection, specdec::FixedLength> decoder(
            specdec::target(target), specdec::draft(draft),
            {.draft_tokens = k, .sampling = {.temperature = temperature}, .seed = 9, .max_new_tokens = 200, .stop_tokens = {}});
        decoder.prefill(std::vector<Token>{5, 6, 7});
        std::size_t rejections = 0, full_blocks = 0;
        for (int s = 0; s < 40; ++s) {
            const std::vector<Token> before(decoder.sequence().begin(), decoder.sequence().end());
            const std::size_t first_snapshot = draft.snapshots.size();
            const auto step = decoder.step();
            INFO("temperature " << temperature << ", step " << s);
            REQUIRE(draft.snapshots.size() == first_snapshot + k);  // one catch-up pass, then k - 1 single-token passes
            // The catch-up pass leaves the draft's cache equal to the committed sequence.
            CHECK(draft.snapshots[first_snapshot] == before);
            for (std::size_t i = 1; i < k; ++i)
                CHECK(draft.snapshots[first_snapshot + i].size() == before.size() + i);
            // The draft's cache agrees with the new committed sequence on every
            // position it holds except the rejected drafts' (beyond the accepted ones).
            const std::vector<Token> after(decoder.sequence().begin(), decoder.sequence().end());
            const std::size_t accepted = step.stats.draft_tokens_accepted;
            const std::size_t agreed = before.size() + std::min(accepted, k - 1);
            REQUIRE(draft.cache().size() == before.size() + k - 1);
            CHECK(std::equal(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(agreed), draft.cache().begin()));
            // The target's cache holds the new sequence but its pending last token.
            CHECK(target.cache() == std::vector<Token>(after.begin(), after.end() - 1));
            rejections += accepted < k ? 1 : 0;
            full_blocks += accepted == k ? 1 : 0;
        }
        CHECK(rejections > 5);
        CHECK(full_blocks > 0);
    }
}
