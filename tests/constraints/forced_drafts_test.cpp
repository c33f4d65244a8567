// Forced drafts (decoding/forced_drafts.hpp): where the constraint allows one
// token, the draft model is not run for it, the step may go past
// draft_tokens, and the output is the same as without them (greedy: the
// autoregressive output; sampled exactness is in regex_constraint_exactness_test.cpp).
#include <cstddef>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::RegexConstraint;
using specdec::Token;
using specdec::test::ToyLM;

namespace {

// Single-letter texts and an end token: "abcabc" forces every token.
const std::vector<std::string> kLiteralTexts{"a", "b", "c", ""};
constexpr Token kLiteralEnd = 3;

// The cases compare pass counts between runs: FixedLength keeps them from
// depending on AutoLength's timing-chosen lengths.
specdec::GenerationResult forced_literal_run(ToyLM& target, ToyLM& draft, RegexConstraint& constraint,
                                             double temperature, specdec::ForcedDraftOptions forced) {
    specdec::DecodingOptions options{.draft_tokens = 2, .seed = 5, .max_new_tokens = 20, .stop_tokens = {kLiteralEnd}};
    options.sampling.temperature = temperature;
    options.sampling.constraint = &constraint;
    options.forced_drafts = forced;
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options, specdec::FixedLength{});
    return decoder.generate(std::vector<Token>{1, 0});
}

}  // namespace

TEST_CASE("forced drafts: a fixed literal costs no draft pass and one target pass",
          "[constraints][forced_drafts]") {
    ToyLM target({.vocab = 4, .seed = 3});
    ToyLM draft({.vocab = 4, .seed = 3, .noise_seed = 2, .noise = 0.5});
    RegexConstraint constraint("abcabc", kLiteralTexts, {kLiteralEnd});
    const std::vector<Token> expected{0, 1, 2, 0, 1, 2, kLiteralEnd};
    for (const double temperature : {0.0, 1.0}) {
        INFO("T = " << temperature);
        // On: the whole literal and its end token in the first step's one pass;
        // no forced token is proposed after the stop token.
        const auto forced = forced_literal_run(target, draft, constraint, temperature, {});
        CHECK(forced.tokens == expected);
        CHECK(forced.stats.draft_forward_passes == 0);
        CHECK(forced.stats.target_forward_passes == 1);
        CHECK(forced.stats.draft_tokens_proposed == expected.size());
        CHECK(forced.stats.draft_tokens_accepted == expected.size());
        // Bounded: no forced token beyond draft_tokens = 2, still no draft pass.
        const auto bounded = forced_literal_run(target, draft, constraint, temperature, {.max_tokens = 0});
        CHECK(bounded.tokens == expected);
        CHECK(bounded.stats.draft_forward_passes == 0);
        CHECK(bounded.stats.target_forward_passes == 3);  // 2 drafts + 1 token per pass: 3 + 3 + 1
        // Off: each draft is a draft-model pass, as before.
        const auto off = forced_literal_run(target, draft, constraint, temperature, {.enabled = false});
        CHECK(off.tokens == expected);
        CHECK(off.stats.draft_forward_passes >= 3);
        CHECK(off.stats.target_forward_passes == 3);
    }
}

TEST_CASE("forced drafts: greedy output equals autoregressive, with fewer draft passes",
          "[constraints][forced_drafts][greedy]") {
    ToyLM target({.vocab = 4, .seed = 31});
    ToyLM draft({.vocab = 4, .seed = 31, .noise_seed = 8, .noise = 0.8});
    // "(ab|ba)*" over "a", "b", "ab": after "a" only "b" may follow.
    const std::vector<std::string> texts{"a", "b", "ab", ""};
    RegexConstraint constraint("(ab|ba)*", texts, {3});
    std::size_t passes_on = 0, passes_off = 0, forced_steps = 0;
    for (Token first = 0; first < 3; ++first) {
        for (std::size_t k : {1, 2, 4}) {
            const std::vector<Token> prompt{first, static_cast<Token>(k % 3)};
            specdec::DecodingOptions options{.draft_tokens = k, .max_new_tokens = 24};
            options.sampling.temperature = 0.0;
            options.sampling.constraint = &constraint;
            const auto reference = specdec::AutoregressiveDecoder(target, options).generate(prompt);
            const auto on =
                specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), options, specdec::FixedLength{})
                    .generate(prompt);
            options.forced_drafts.enabled = false;
            const auto off =
                specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), options, specdec::FixedLength{})
                    .generate(prompt);
            INFO("prompt " << first << ", k = " << k);
            CHECK(on.tokens == reference.tokens);
            CHECK(off.tokens == reference.tokens);
            CHECK(on.stats.draft_forward_passes <= off.stats.draft_forward_passes);
            passes_on += on.stats.draft_forward_passes;
            passes_off += off.stats.draft_forward_passes;
            if (on.stats.draft_length_counts.size() > k + 1) ++forced_steps;
        }
    }
    CHECK(passes_on < passes_off);
    CHECK(forced_steps > 0);  // some step went past draft_tokens
}

TEST_CASE("forced drafts: a literal longer than the context stops where autoregressive decoding does",
          "[constraints][forced_drafts]") {
    RegexConstraint constraint("abcabcabcabc", kLiteralTexts, {kLiteralEnd});
    for (const std::size_t draft_context : {6, 8, 64}) {
        ToyLM target({.vocab = 4, .seed = 3, .context = 8});
        ToyLM draft({.vocab = 4, .seed = 3, .noise_seed = 2, .noise = 0.5, .context = draft_context});
        specdec::DecodingOptions options{.draft_tokens = 2, .seed = 1, .max_new_tokens = 20, .stop_tokens = {kLiteralEnd}};
        options.sampling.temperature = 1.0;
        options.sampling.constraint = &constraint;
        const std::vector<Token> prompt{1, 0};
        const auto reference = specdec::AutoregressiveDecoder(target, options).generate(prompt);
        const auto forced =
            specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), options, specdec::FixedLength{})
                    .generate(prompt);
        INFO("draft context " << draft_context);
        CHECK(forced.tokens == reference.tokens);
        CHECK(forced.tokens.size() == 7);  // the target's context holds 8 positions
        CHECK(forced.stop_reason == reference.stop_reason);
        CHECK(forced.stop_reason == specdec::StopReason::context_full);
    }
}
