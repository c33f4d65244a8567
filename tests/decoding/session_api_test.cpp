// The session API: roles that cannot be swapped, prefill/step with generate()
// built on them, and KV caches that keep the longest common prefix between
// calls so a chat's earlier turns are not recomputed.
#include <type_traits>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::StopReason;
using specdec::Token;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

namespace {
ToyLMOptions session_target_options() { return {.vocab = 20, .seed = 8, .sharpness = 1.5}; }
ToyLMOptions session_draft_options() { return {.vocab = 20, .seed = 8, .sharpness = 1.5, .noise_seed = 2, .noise = 0.6}; }

using Decoder = specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedLength>;
}  // namespace

TEST_CASE("target and draft cannot be swapped or passed without their roles", "[session][api]") {
    static_assert(std::is_constructible_v<Decoder, specdec::TargetRole<ToyLM>, specdec::DraftRole<ToyLM>>);
    static_assert(!std::is_constructible_v<Decoder, specdec::DraftRole<ToyLM>, specdec::TargetRole<ToyLM>>);
    static_assert(!std::is_constructible_v<Decoder, ToyLM&, ToyLM&>);
    // Temporaries would dangle: the role helpers refuse them.
    static_assert(!std::is_invocable_v<decltype([](auto&& m) -> decltype(specdec::target(std::move(m))) {}), ToyLM>);
    ToyLM target(session_target_options()), draft(session_draft_options());
    Decoder decoder(specdec::target(target), specdec::draft(draft), {.max_new_tokens = 4});
    CHECK(decoder.generate(std::vector<Token>{1, 2}).tokens.size() == 4);
}

TEST_CASE("prefill then steps produce exactly what generate produces", "[session][api]") {
    const std::vector<Token> prompt{3, 1, 4, 1, 5};
    const specdec::DecodingOptions options{.draft_tokens = 4, .seed = 11, .max_new_tokens = 40};
    ToyLM target_a(session_target_options()), draft_a(session_draft_options());
    Decoder whole(specdec::target(target_a), specdec::draft(draft_a), options);
    const auto expected = whole.generate(prompt);

    ToyLM target_b(session_target_options()), draft_b(session_draft_options());
    Decoder stepper(specdec::target(target_b), specdec::draft(draft_b), options);
    const specdec::GenerationStats prefill = stepper.prefill(prompt);
    CHECK(prefill.prefill_tokens == prompt.size() - 1);
    CHECK(target_b.cached_tokens() == prompt.size() - 1);
    std::vector<Token> produced;
    std::size_t steps = 0;
    while (produced.size() < options.max_new_tokens) {
        std::vector<Token> streamed;
        const specdec::StepResult step =
            stepper.step(options.max_new_tokens - produced.size(), [&](Token t) { streamed.push_back(t); });
        ++steps;
        REQUIRE_FALSE(step.stop.has_value());
        REQUIRE(!step.tokens.empty());
        REQUIRE(step.tokens.size() <= options.draft_tokens + 1);
        CHECK(step.tokens == streamed);
        CHECK(step.stats.generated_tokens == step.tokens.size());
        CHECK(step.stats.draft_tokens_accepted + 1 == step.tokens.size());
        CHECK(step.stats.target_forward_passes == 1);
        produced.insert(produced.end(), step.tokens.begin(), step.tokens.end());
        // The target's cache never holds the pending last token.
        CHECK(target_b.cached_tokens() <= stepper.sequence().size() - 1);
    }
    CHECK(produced == expected.tokens);
    CHECK(steps == expected.stats.target_forward_passes);
    CHECK(std::vector<Token>(stepper.sequence().begin(), stepper.sequence().end()).size() ==
          prompt.size() + produced.size());
}

TEST_CASE("step before prefill and step(0) are errors", "[session][api][errors]") {
    ToyLM target(session_target_options()), draft(session_draft_options());
    Decoder decoder(specdec::target(target), specdec::draft(draft));
    CHECK_THROWS_WITH(decoder.step(), Catch::Contains("call prefill(prompt) first"));
    decoder.prefill(std::vector<Token>{1, 2});
    CHECK_THROWS_WITH(decoder.step(0), Catch::Contains("max_tokens = 0"));
}

TEST_CASE("a second generate sharing a prefix runs the target only on the new tokens", "[session][cache]") {
    for (const double temperature : {0.0, 1.0}) {
        const specdec::DecodingOptions options{
            .draft_tokens = 3, .sampling = {.temperature = temperature}, .seed = 5, .max_new_tokens = 24};
        ToyLM target(session_target_options()), draft(session_draft_options());
        Decoder decoder(specdec::target(target), specdec::draft(draft), options);
        const std::vector<Token> first_prompt{1, 2, 3, 4, 5, 6, 7, 8};
        const auto first = decoder.generate(first_prompt);

        // A chat's second turn: the whole conversation so far, then the new user tokens.
        std::vector<Token> second_prompt = first_prompt;
        second_prompt.insert(second_prompt.end(), first.tokens.begin(), first.tokens.end());
        const std::vector<Token> new_turn{9, 10, 11};
        second_prompt.insert(second_prompt.end(), new_turn.begin(), new_turn.end());

        const std::size_t fed_before = target.tokens_fed();
        const std::size_t draft_fed_before = draft.tokens_fed();
        const auto second = decoder.generate(second_prompt);
        INFO("temperature " << temperature);
        // The conversation up to the last emitted token is in the cache; prefill
        // computes the pending last emitted token and the new turn but its last token.
        CHECK(second.stats.prefill_tokens == 1 + new_turn.size() - 1);
        const std::size_t target_fed = target.tokens_fed() - fed_before;
        CHECK(target_fed == second.stats.target_tokens);
        // Steps feed the pending token and the drafts; nothing from the first turn.
        CHECK(target_fed == second.stats.prefill_tokens + second.stats.target_forward_passes +
                                second.stats.draft_tokens_proposed);
        CHECK(draft.tokens_fed() - draft_fed_before < second_prompt.size());

        // And the output is what a fresh decoder gives for the same prompt.
        ToyLM fresh_target(session_target_options()), fresh_draft(session_draft_options());
        Decoder fresh(specdec::target(fresh_target), specdec::draft(fresh_draft), options);
        const auto reference = fresh.generate(second_prompt);
        CHECK(second.tokens == reference.tokens);
        CHECK(fresh_target.tokens_fed() > target_fed + first_prompt.size());
    }
}

TEST_CASE("a prompt that diverges from the cached sequence rolls the caches back to the common prefix", "[session][cache]") {
    const specdec::DecodingOptions options{.draft_tokens = 4, .seed = 2, .max_new_tokens = 16};
    ToyLM target(session_target_options()), draft(session_draft_options());
    Decoder decoder(specdec::target(target), specdec::draft(draft), options);
    (void)decoder.generate(std::vector<Token>{1, 2, 3, 4, 5, 6});
    const std::vector<Token> edited{1, 2, 3, 7, 7};
    const auto result = decoder.generate(edited);
    CHECK(result.stats.prefill_tokens == 1);  // positions 3 (7); the last 7 is pending
    ToyLM fresh_target(session_target_options()), fresh_draft(session_draft_options());
    Decoder fresh(specdec::target(fresh_target), specdec::draft(fresh_draft), options);
    CHECK(result.tokens == fresh.generate(edited).tokens);
    // After reset() nothing is reused.
    decoder.reset();
    CHECK(target.cached_tokens() == 0);
    CHECK(decoder.sequence().empty());
    CHECK(decoder.generate(edited).stats.prefill_tokens == edited.size() - 1);
}

TEST_CASE("the autoregressive decoder has the same session API and cache reuse", "[session][cache]") {
    const specdec::DecodingOptions options{.sampling = {.temperature = 0.0}, .max_new_tokens = 10};
    ToyLM target(session_target_options());
    specdec::AutoregressiveDecoder decoder(target, options);
    const std::vector<Token> prompt{4, 3, 2};
    const auto first = decoder.generate(prompt);
    std::vector<Token> longer = prompt;
    longer.insert(longer.end(), first.tokens.begin(), first.tokens.end());
    const std::size_t before = target.tokens_fed();
    const auto second = decoder.generate(longer);
    // Everything but the pending last token is cached: prefill has nothing to
    // compute and each step feeds exactly one token.
    CHECK(second.stats.prefill_tokens == 0);
    CHECK(target.tokens_fed() - before == second.stats.target_forward_passes);
    decoder.prefill(prompt);
    std::vector<Token> stepped;
    for (int i = 0; i < 10; ++i) {
        const auto step = decoder.step();
        REQUIRE(step.tokens.size() == 1);
        stepped.push_back(step.tokens[0]);
    }
    CHECK(stepped == first.tokens);
}

using specdec::test::LastRowToyLM;
static_assert(specdec::LastRowLM<LastRowToyLM>);
static_assert(!specdec::LastRowLM<ToyLM>);

TEST_CASE("prefill and the draft's catching up go through forward_last when the model has it, with the same output",
          "[session][api]") {
    const std::vector<Token> prompt{2, 7, 1, 8, 2, 8};
    const specdec::DecodingOptions options{.draft_tokens = 3, .seed = 4, .max_new_tokens = 20};
    LastRowToyLM target(session_target_options()), draft(session_draft_options());
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options,
                                        specdec::TokenwiseRejection{}, specdec::FixedLength{});
    const auto result = decoder.generate(prompt);
    CHECK(target.last_row_calls == 1);
    // The draft: its prompt, then each drafting step's first pass, which
    // catches up on what the last verification committed and reads one row.
    std::size_t drafting_steps = 0;
    for (std::size_t n = 1; n < result.stats.draft_length_counts.size(); ++n)
        drafting_steps += result.stats.draft_length_counts[n];
    REQUIRE(drafting_steps >= 5);
    CHECK(draft.last_row_calls == 1 + drafting_steps);
    ToyLM plain_target(session_target_options()), plain_draft(session_draft_options());
    Decoder plain(specdec::target(plain_target), specdec::draft(plain_draft), options);
    CHECK(result.tokens == plain.generate(prompt).tokens);
}
